"""The joint layout: every agent of the env, in its order, with its policy and the widths of its
observation and action in a centralised critic's input."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym


def action_width(space: gym.Space) -> int:
    """Entries of one agent's action in the critic's input: n for Discrete(n), else the Box's."""
    return int(space.n) if isinstance(space, gym.spaces.Discrete) else int(space.shape[0])


def joint_layout(
    agents: list[str],
    observation_spaces: dict[str, gym.Space],
    action_spaces: dict[str, gym.Space],
    policy_of: Callable[[str], str | None],
) -> list[dict[str, Any]]:
    return [
        {
            "agent": agent,
            "policy": policy_of(agent),
            "obs_dim": int(gym.spaces.flatdim(observation_spaces[agent])),
            "action_dim": action_width(action_spaces[agent]),
            "discrete": isinstance(action_spaces[agent], gym.spaces.Discrete),
        }
        for agent in agents
    ]
