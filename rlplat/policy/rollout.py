"""Roll a restored policy out in one environment, one seeded episode at a time."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rlplat.environments.team import AGENT_REWARDS
from rlplat.policy.restore import Policy


@dataclass
class EpisodeResult:
    """One finished episode; ``frames[t]`` is what the agents saw when they chose actions ``t``.

    Multi-agent: ``episode_return`` is the team's (the sum over agents, as RLlib reports it) and
    ``agent_returns`` splits it by agent.
    """

    seed: int
    episode_return: float
    length: int
    truncated: bool
    agent_returns: dict[str, float] = field(default_factory=dict)
    frames: list[Any] = field(default_factory=list, repr=False)
    returns_before: list[float] = field(default_factory=list, repr=False)


def run_episode(
    policy: Policy,
    env: Any,
    *,
    seed: int,
    explore: bool,
    capture_frames: bool = False,
    max_steps: int | None = None,
) -> EpisodeResult:
    """Play one episode; the same seed gives the same episode (greedy or sampled)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    observation, info = env.reset(seed=seed)
    if policy.multi_agent:
        episode: Any = MultiAgentEpisode(
            observation_space=env.observation_space,
            action_space=env.action_space,
            agent_to_module_mapping_fn=policy.mapping,
        )
        episode.add_env_reset(observations=observation, infos=info)
    else:
        episode = SingleAgentEpisode(
            observation_space=env.observation_space, action_space=env.action_space
        )
        episode.add_env_reset(observation=observation, infos=info)
    shared_data: dict[str, Any] = {}
    result = EpisodeResult(seed=seed, episode_return=0.0, length=0, truncated=False)
    # Every agent listed, in the env's order, even if it never scores.
    if policy.multi_agent:
        result.agent_returns = dict.fromkeys(env.possible_agents, 0.0)
    elif hasattr(env, "members"):  # a team env (QMIX)
        result.agent_returns = dict.fromkeys(env.members, 0.0)
    while not episode.is_done:
        if capture_frames:
            result.frames.append(env.render())
            result.returns_before.append(result.episode_return)
        env_action, action, extra = policy.act(episode, explore, shared_data)
        observation, reward, terminated, truncated, info = env.step(env_action)
        result.length += 1
        cut = max_steps is not None and result.length >= max_steps
        if policy.multi_agent:
            for agent, value in reward.items():
                result.agent_returns[agent] = result.agent_returns.get(agent, 0.0) + float(value)
            result.episode_return = sum(result.agent_returns.values())
            if cut:
                truncated = {**truncated, "__all__": True}
            episode.add_env_step(
                observations=observation,
                actions=action,
                rewards=reward,
                infos=info,
                terminateds=terminated,
                truncateds=truncated,
                extra_model_outputs=extra,
            )
            terminated, truncated = terminated.get("__all__", False), truncated["__all__"]
        else:
            result.episode_return += float(reward)
            for agent, value in info.get(AGENT_REWARDS, {}).items():  # a team env's members
                result.agent_returns[agent] = result.agent_returns.get(agent, 0.0) + value
            truncated = bool(truncated) or cut
            episode.add_env_step(
                observation=observation,
                action=action,
                reward=reward,
                infos=info,
                terminated=bool(terminated),
                truncated=truncated,
                extra_model_outputs=extra,
            )
        result.truncated = bool(truncated) and not terminated
    return result


@dataclass(frozen=True)
class Stats:
    mean: float
    std: float
    min: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Stats:
        if not values:
            return cls(math.nan, math.nan, math.nan, math.nan)
        array = np.asarray(values, dtype=float)
        return cls(float(array.mean()), float(array.std()), float(array.min()), float(array.max()))
