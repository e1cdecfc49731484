"""What a centralised critic (MAPPO's) reads: the global state, added to every agent's info.

A centralised critic values an agent's situation from the whole team's: the env's own
``state()`` where it defines one (mpe2, SISL), the agents' observations concatenated
otherwise (LBF, RWARE, VMAS), as EPyMARL's ``get_state`` does. Its actors still read only their
own observations, so what is exported and served is unchanged.

``CriticInputs`` makes, for every agent that observes, that state followed by the one-hot of the
agent's place in ``possible_agents`` (one critic shared by several agents tells them apart, as
EPyMARL's central-V critic does); ``rlplat.environments.critic_state``'s wrappers put it under
``info[CRITIC_STATE]``. Episodes keep infos step by step beside the observations, so the learner
reads the critic's input for each agent step straight from the episode. This module needs
neither Ray nor torch (the team view and the checks before Ray use it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from rlplat.environments.kinds import ACTION_MASK

GlobalState = Literal["auto", "env", "observations"]
CRITIC_STATE = "rlplat_critic_state"


class GlobalStateError(ValueError):
    """The env cannot give the requested global state."""


def observation_part(space: gym.Space) -> gym.Space:
    """The part of an agent's observation space that describes the world (an action-masked
    Dict's ``observation`` entry, else the whole space)."""
    if isinstance(space, gym.spaces.Dict) and ACTION_MASK in space.spaces:
        return space["observation"]
    return space


def resolve_source(wanted: GlobalState, state_space: gym.Space | None) -> str:
    """``env`` (the env's ``state()``) or ``observations`` (the agents' concatenated)."""
    has_state = isinstance(state_space, gym.spaces.Box)
    if wanted == "env" and not has_state:
        raise GlobalStateError(
            "global_state is 'env' but the environment defines no state() with a Box "
            "state_space; use 'observations' (the agents' observations concatenated) or 'auto'"
        )
    if wanted == "auto":
        return "env" if has_state else "observations"
    return wanted


def critic_state_size(
    source: str, state_space: gym.Space | None, observation_spaces: Mapping[str, gym.Space]
) -> int:
    """The length of the critic's input: the global state, then one slot per agent."""
    if source == "env":
        assert state_space is not None
        size = gym.spaces.flatdim(state_space)
    else:
        size = sum(gym.spaces.flatdim(observation_part(s)) for s in observation_spaces.values())
    return size + len(observation_spaces)


class CriticInputs:
    """The critic's input of every observing agent at one step, added to its info."""

    def __init__(
        self,
        agents: list[str],
        observation_spaces: Mapping[str, gym.Space],
        state_space: gym.Space | None,
        wanted: GlobalState,
    ):
        self.agents = agents
        self.source = resolve_source(wanted, state_space)
        self.size = critic_state_size(self.source, state_space, observation_spaces)
        self._spaces = dict(observation_spaces)
        self._parts = {a: observation_part(s) for a, s in observation_spaces.items()}
        self._places = dict(zip(agents, np.eye(len(agents), dtype=np.float32), strict=True))

    def _concatenated(self, observations: Mapping[str, Any]) -> np.ndarray:
        pieces = []
        for agent in self.agents:
            part = self._parts[agent]
            value = observations.get(agent)
            if value is None:  # gone: zeros in its place
                pieces.append(np.zeros(gym.spaces.flatdim(part), np.float32))
                continue
            if part is not self._spaces[agent]:
                value = value["observation"]
            pieces.append(np.asarray(gym.spaces.flatten(part, value), np.float32))
        return np.concatenate(pieces)

    def added(
        self, observations: Mapping[str, Any], infos: Mapping[str, Any], state: Any = None
    ) -> dict[str, dict]:
        """``infos`` with ``CRITIC_STATE`` for every agent in ``observations``; ``state``: the
        env's ``state()`` where that is the source."""
        if self.source == "env":
            state = np.asarray(state, np.float32).reshape(-1)
        else:
            state = self._concatenated(observations)
        infos = {agent: dict(info) for agent, info in infos.items()}
        for agent in observations:
            infos.setdefault(agent, {})[CRITIC_STATE] = np.concatenate([state, self._places[agent]])
        return infos
