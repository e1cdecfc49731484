"""Canaries of rlplat/seams/rllib_algorithm.py: RLlib's algorithm, config and replay buffer
internals its seams rely on."""

from __future__ import annotations

import inspect

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer

from rlplat.seams.rllib_algorithm import compiled_after
from tests.seam_canary import has, holds

SEAM = "rlplat.seams.rllib_algorithm."


def test_algorithm_hooks():
    seam = SEAM + "AlgorithmHooks"
    has(seam, Algorithm, "_run_one_training_iteration", params=())
    has(seam, Algorithm, "_create_local_replay_buffer_if_necessary", params=("config",))
    source = inspect.getsource(Algorithm)
    for hook in ("_run_one_training_iteration(", "_create_local_replay_buffer_if_necessary("):
        holds(seam, f"self.{hook}" in source, f"RLlib's Algorithm calls self.{hook}...)")


def test_compiled_after():
    seam = SEAM + "compiled_after"
    has(seam, MetricsLogger, "compile", params=())
    metrics, seen = MetricsLogger(), []
    with compiled_after(metrics, lambda: seen.append("before")):
        metrics.compile()
    holds(
        seam,
        seen == ["before"] and "compile" not in vars(metrics),
        "the hook runs before compile, and the logger's own compile is back after",
    )


def test_episode_replay_hooks():
    seam = SEAM + "EpisodeReplayHooks"
    params = ("num_items", "batch_size_B", "batch_length_T", "n_step", "gamma", "lookback")
    has(seam, EpisodeReplayBuffer, "_sample_episodes", params=params)
    holds(
        seam,
        "self._sample_episodes(" in inspect.getsource(EpisodeReplayBuffer.sample),
        "EpisodeReplayBuffer.sample calls self._sample_episodes",
    )
    has(seam, EpisodeReplayBuffer, "_indices")
    has(seam, EpisodeReplayBuffer, "_last_sampled_indices")
    has(
        seam,
        EpisodeReplayBuffer,
        "_update_sample_metrics",
        params=("num_env_steps_sampled", "num_episodes_per_sample", "num_env_steps_per_sample"),
    )
