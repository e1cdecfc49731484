"""Goal-conditioned envs as Gymnasium-Robotics defines them: a Dict observation of
``observation``, ``achieved_goal`` and ``desired_goal``, and the env's own
``compute_reward(achieved_goal, desired_goal, info)`` over batches of goals (with
``compute_terminated`` where episodes end on success). Hindsight relabelling
(``rlplat.algorithms.hindsight``) needs both; ``goal_parts`` finds them in an env as training
builds it (``FlatObservation`` flattens the Dict: ``GoalLayout`` says where the goals sit in
the vector), or says what is missing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from rlplat.environments.observations import FlatObservation, numeric_part

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")


@dataclass(frozen=True)
class GoalLayout:
    """The columns of the achieved and the desired goal in the flattened observation."""

    achieved: slice
    desired: slice

    @classmethod
    def of(cls, space: gym.Space) -> GoalLayout:
        """The layout of a goal env's Dict observation space flattened as ``FlatObservation``
        flattens it; ValueError, saying what is missing, for any other space."""
        if not isinstance(space, gym.spaces.Dict):
            raise ValueError(f"a goal env observes a Dict of {', '.join(GOAL_KEYS)}, not {space}")
        missing = [key for key in GOAL_KEYS if key not in space.spaces]
        if missing:
            raise ValueError(
                f"a goal env's Dict observation has {', '.join(GOAL_KEYS)}; this one has no "
                f"{', '.join(missing)} (it has {', '.join(space.spaces)})"
            )
        slices, start = {}, 0
        for key, part in numeric_part(space).spaces.items():
            size = gym.spaces.flatdim(part)
            slices[key] = slice(start, start + size)
            start += size
        achieved, desired = slices["achieved_goal"], slices["desired_goal"]
        if achieved.stop - achieved.start != desired.stop - desired.start:
            raise ValueError(
                f"a goal env's achieved_goal and desired_goal have the same size; here "
                f"{space['achieved_goal']} and {space['desired_goal']}"
            )
        return cls(achieved, desired)


def goal_parts(env: gym.Env) -> tuple[GoalLayout | None, str]:
    """The goal layout of an env as training builds it (its observations flattened by
    ``FlatObservation``), and "" ; or None and why it is no goal env."""
    flat = env
    while isinstance(flat, gym.Wrapper) and not isinstance(flat, FlatObservation):
        flat = flat.env
    if not isinstance(flat, FlatObservation):
        return None, f"it observes {_described(env.observation_space)}"
    try:
        layout = GoalLayout.of(flat.env.observation_space)
    except ValueError as exc:
        return None, str(exc)
    if not callable(reward_function(env)):
        return None, "it has no compute_reward(achieved_goal, desired_goal, info)"
    return layout, ""


def _described(space: gym.Space) -> str:
    if isinstance(space, gym.spaces.Dict):
        return f"a Dict of {', '.join(space.spaces)} (flattened by no FlatObservation wrapper)"
    return f"a {type(space).__name__} of shape {space.shape}, not a Dict of {', '.join(GOAL_KEYS)}"


def reward_function(env: gym.Env) -> Any:
    """The env's ``compute_reward`` through its wrappers (None where it has none)."""
    return _env_function(env, "compute_reward")


def _env_function(env: gym.Env, name: str) -> Any:
    try:
        return env.get_wrapper_attr(name)
    except AttributeError:
        return None


@dataclass(frozen=True)
class GoalFunctions:
    """A goal env's reward for any goal, and (where it has one) whether reaching it ends the
    episode, over batches of goals."""

    compute_reward: Callable[[Any, Any, Any], Any]
    compute_terminated: Callable[[Any, Any, Any], Any] | None = None

    @classmethod
    def of(cls, env: gym.Env) -> GoalFunctions:
        return cls(reward_function(env), _env_function(env, "compute_terminated"))
