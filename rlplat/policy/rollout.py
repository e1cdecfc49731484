"""Roll a policy out in one environment, one seeded episode at a time.

The policy is an :class:`Actor`: a checkpoint's RLModule with its connectors
(:class:`rlplat.policy.restore.CheckpointActor`) or an ONNX export
(:class:`rlplat.policy.exported.ExportActor`). This module imports neither torch nor Ray, so
evaluating an export needs neither.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from rlplat.environments.opengl import opengl_failure
from rlplat.environments.team import AGENT_REWARDS
from rlplat.errors import UserError


class Actor(Protocol):
    """Chooses the env's actions for one episode at a time.

    Multi-agent envs: observations and actions are dicts by agent (the agents whose turn it is).
    """

    multi_agent: bool
    mapping: Callable[[str], Any] | None  # agent -> policy id (multi-agent), else None

    def reset(self, env: Any, observation: Any, info: Any, seed: int) -> None:
        """A new episode starts with ``observation``."""

    def act(self, observation: Any, explore: bool) -> Any:
        """The env action for ``observation`` (the latest one passed to reset or observe)."""

    def observe(
        self, observation: Any, reward: Any, terminated: Any, truncated: Any, info: Any
    ) -> None:
        """The env stepped with the action ``act`` returned last."""


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
    # Goal envs: whether its last step's info said is_success (None: the env does not say).
    success: bool | None = None


Watch = Callable[[Any, Any], None]  # (observation, env action) at every step


def run_episode(
    actor: Actor,
    env: Any,
    *,
    seed: int,
    explore: bool,
    capture_frames: bool = False,
    max_steps: int | None = None,
    shadows: list[Actor] = (),
    watch: Watch | None = None,
) -> EpisodeResult:
    """Play one episode; the same seed gives the same episode (greedy or sampled).

    ``shadows`` see the same observations and follow the episode without acting (``watch``
    gets each observation with the action taken; parity checks compare the shadows' choices).
    """
    random.seed(seed)
    np.random.seed(seed % 2**32)
    observation, info = env.reset(seed=seed)
    for each in (actor, *shadows):
        each.reset(env, observation, info, seed)
    result = EpisodeResult(seed=seed, episode_return=0.0, length=0, truncated=False)
    result.agent_returns = _agents_at_start(actor, env)
    done = False
    while not done:
        if capture_frames:
            result.frames.append(_frame(env))
            result.returns_before.append(result.episode_return)
        action = actor.act(observation, explore)
        if watch is not None:
            watch(observation, action)
        observation, reward, terminated, truncated, info = env.step(action)
        result.length += 1
        cut = max_steps is not None and result.length >= max_steps
        if actor.multi_agent:
            step = _multi_agent_step(result, reward, terminated, truncated, cut)
            truncated, ended, was_cut = step
        else:
            result.episode_return += float(reward)
            for agent, value in info.get(AGENT_REWARDS, {}).items():  # a team env's members
                result.agent_returns[agent] = result.agent_returns.get(agent, 0.0) + value
            truncated = bool(truncated) or cut
            ended, was_cut = bool(terminated), truncated
            if "is_success" in info:
                result.success = bool(info["is_success"])
        for each in (actor, *shadows):
            each.observe(observation, reward, terminated, truncated, info)
        done = bool(ended) or bool(was_cut)
        result.truncated = bool(was_cut) and not ended
    return result


def _agents_at_start(actor: Actor, env: Any) -> dict[str, float]:
    """Every agent's return at 0, in the env's order, so that one that never scores is listed
    too; none for a single-agent env that is not a team."""
    if actor.multi_agent:
        return dict.fromkeys(env.possible_agents, 0.0)
    if hasattr(env, "members"):  # a team env (QMIX)
        return dict.fromkeys(env.members, 0.0)
    return {}


def _multi_agent_step(
    result: EpisodeResult, reward: dict, terminated: dict, truncated: dict, cut: bool
) -> tuple[dict, bool, bool]:
    """Add a multi-agent step's rewards to ``result``; the truncations as the actor sees them
    (``__all__`` where ``cut`` at max_steps), whether the episode ended and whether it was cut."""
    for agent, value in reward.items():
        result.agent_returns[agent] = result.agent_returns.get(agent, 0.0) + float(value)
    result.episode_return = sum(result.agent_returns.values())
    if cut:
        truncated = {**truncated, "__all__": True}
    return truncated, terminated.get("__all__", False), truncated["__all__"]


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


def _frame(env: Any) -> Any:
    """``env.render()``; a renderer without OpenGL (MuJoCo makes its context at the first
    frame) is a user error naming what to install."""
    try:
        return env.render()
    except Exception as exc:  # noqa: BLE001 - whatever the renderer raised
        no_opengl = opengl_failure(exc)
        if no_opengl is None:
            raise
        raise UserError(f"cannot render the environment: {no_opengl}") from None
