"""Canaries of rlplat/seams/rllib_runner.py: RLlib's env runner, episode, filter and registry
internals its seams rely on."""

from __future__ import annotations

import inspect

from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.tune import registry

from tests.seam_canary import has, holds

SEAM = "rlplat.seams.rllib_runner."


def test_runner_hooks():
    seam = SEAM + "RunnerHooks"
    params = ("num_timesteps", "num_episodes", "explore", "random_actions", "force_reset")
    for runner in (SingleAgentEnvRunner, MultiAgentEnvRunner):
        has(seam, runner, "_sample", params=params)
        holds(
            seam,
            "self._sample(" in inspect.getsource(runner.sample),
            f"{runner.__name__}.sample calls self._sample",
        )
        for name in (
            "_env_to_module",
            "_module_to_env",
            "_callbacks",
            "_needs_initial_reset",
            "_ongoing_episodes",
            "_weights_seq_no",
        ):
            has(seam, runner, name)
    has(seam, SingleAgentEnvRunner, "_cached_to_module")
    has(seam, SingleAgentEnvRunner, "_new_episode", params=("env_index", "episodes"))
    has(
        seam, SingleAgentEnvRunner, "_make_on_episode_callback", params=("which", "idx", "episodes")
    )
    has(
        seam,
        SingleAgentEnvRunner,
        "_increase_sampled_metrics",
        params=("num_steps", "num_episodes_completed"),
    )
    has(seam, SingleAgentEnvRunner, "_done_episodes_for_metrics")
    has(seam, SingleAgentEnvRunner, "_ongoing_episodes_for_metrics")
    has(seam, EnvRunner, "_reset_envs_and_episodes", params=("explore",))
    has(seam, EnvRunner, "_try_env_step", params=("actions",))
    has(seam, EnvRunner, "_log_env_steps", params=("metric", "num_steps"))
    has(seam, EnvRunner, "_metrics_num_env_steps_sampled")


def test_set_reset_seed():
    seam = SEAM + "set_reset_seed"
    has(seam, SingleAgentEnvRunner, "_seed")
    holds(
        seam,
        "seed=self._seed" in inspect.getsource(SingleAgentEnvRunner),
        "the single-agent runner's first reset takes seed=self._seed",
    )


def test_skip_mode_switch():
    seam = SEAM + "skip_mode_switch"
    for name in ("forward_inference", "forward_exploration"):
        has(seam, TorchRLModule, f"_{name}")
        wrapper = inspect.getsource(getattr(RLModule, name))
        holds(seam, f"self._{name}(" in wrapper, f"RLModule.{name} calls self._{name}")


def test_stamp_episode_step():
    seam = SEAM + "stamp_episode_step"
    has(seam, SingleAgentEpisode, "_start_time")
    has(seam, SingleAgentEpisode, "_last_step_time")


def test_episode_started():
    has(SEAM + "episode_started", SingleAgentEpisode, "_start_time")


def test_registered_env_creator():
    seam = SEAM + "registered_env_creator"
    has(seam, registry, "_global_registry")
    has(seam, registry._global_registry, "get", params=("category", "key"))
