"""What a learner update is made of, per kind of algorithm, for ``prepare``'s probe: freshly
sampled episodes (on-policy), episodes replayed from RLlib's episode buffer (DQN, SAC, TD3:
their learner connectors read n-step columns the buffer writes), sequences replayed from it
(DreamerV3), or rlplat's own replay memory's batch (QMIX, MADDPG)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.columns import Columns
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.from_config import from_config
from ray.rllib.utils.numpy import one_hot
from ray.rllib.utils.replay_buffers.replay_buffer import ReplayBuffer

from rlplat.algorithms.base import ReplayLoopAlgorithm

MEMORY_COPIES = 64


def update_inputs(algo_cls: type, config: AlgorithmConfig, episodes: list[Any]) -> dict[str, Any]:
    """Keyword arguments of ``Learner.update`` for one update on ``episodes``."""
    if issubclass(algo_cls, ReplayLoopAlgorithm):
        return {"batch": _own_replay_batch(algo_cls, config, episodes)}
    buffer_config = dict(getattr(config, "replay_buffer_config", None) or {})
    if "EpisodeReplayBuffer" not in str(buffer_config.get("type", "")):
        return {"episodes": episodes}
    buffer_config["capacity"] = max(1000, sum(len(e) for e in episodes))
    buffer = from_config(ReplayBuffer, buffer_config)
    buffer.rng = np.random.default_rng(np.random.randint(2**31))  # draws as seeded as the probe
    buffer.add(episodes)
    if hasattr(config, "batch_length_T"):
        return {"batch": _sequences(buffer, config, episodes[0])}
    sample: dict[str, Any] = {"num_items": 16, "gamma": config.gamma, "sample_episodes": True}
    if getattr(config, "n_step", None) is not None:
        sample["n_step"] = config.n_step
    return {"episodes": buffer.sample(**sample)}


def _own_replay_batch(algo_cls: type, config: AlgorithmConfig, episodes: list[Any]) -> Any:
    """One replayed batch from the algorithm's own memory, made and filled as its training
    step does (``make_replay_memory`` and ``replayed_batch`` read only ``config`` and the
    memory; its draws seeded from the probe's numpy). The few probe episodes go in
    ``MEMORY_COPIES`` times: a batch may draw more episodes than were sampled, without
    replacement."""
    seeded = config.copy(copy_frozen=False).debugging(seed=int(np.random.randint(2**31)))
    algorithm = SimpleNamespace(config=seeded)
    algorithm.replay_memory = algo_cls.make_replay_memory(algorithm)
    for _ in range(MEMORY_COPIES):
        algorithm.replay_memory.add(episodes)
    return algo_cls.replayed_batch(algorithm)


def _sequences(buffer: Any, config: AlgorithmConfig, episode: Any) -> MultiAgentBatch:
    """DreamerV3's batch: ``batch_size_B`` sequences of ``batch_length_T`` steps, Discrete
    actions one-hot beside their integers, as its training step draws them."""
    sample = buffer.sample(batch_size_B=config.batch_size_B, batch_length_T=config.batch_length_T)
    action_space = episode.action_space
    if isinstance(action_space, gym.spaces.Discrete):
        sample["actions_ints"] = sample[Columns.ACTIONS]
        sample[Columns.ACTIONS] = one_hot(sample["actions_ints"], depth=action_space.n)
    return SampleBatch(sample).as_multi_agent()
