"""What a centralised critic (MAPPO's) reads: the global state, added to every agent's info.

A centralised critic values an agent's situation from the whole team's: the env's own
``state()`` where it defines one (mpe2, SISL), the agents' observations concatenated
otherwise (LBF, RWARE, VMAS), as EPyMARL's ``get_state`` does. Its actors still read only their
own observations, so what is exported and served is unchanged.

``CriticStateEnv`` wraps a simultaneous-move RLlib ``MultiAgentEnv`` and puts, under
``info[CRITIC_STATE]`` of every agent that observes, that state followed by the one-hot of the
agent's place in ``possible_agents`` (one critic shared by several agents tells them apart, as
EPyMARL's central-V critic does). Episodes keep infos step by step beside the observations, so
the learner reads the critic's input for each agent step straight from the episode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

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


class CriticStateEnv(MultiAgentEnv):
    """``env`` with the critic's input in every observing agent's info (see the module)."""

    def __init__(self, env: Any, global_state: GlobalState = "auto"):
        super().__init__()
        if getattr(env, "turn_based", False):
            raise GlobalStateError(
                "a centralised critic needs every agent's step at once, but the environment is "
                "turn-based (PettingZoo's AEC API); use a parallel environment or PPO"
            )
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self.agents = list(getattr(env, "agents", self.possible_agents))
        self.observation_spaces = dict(env.observation_spaces)
        self.action_spaces = dict(env.action_spaces)
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self.state_space = getattr(env, "state_space", None)
        self.metadata = dict(getattr(env, "metadata", {}) or {})
        self.render_mode = getattr(env, "render_mode", None)
        self.source = resolve_source(global_state, self.state_space)
        self.size = critic_state_size(self.source, self.state_space, self.observation_spaces)
        self._parts = {a: observation_part(s) for a, s in self.observation_spaces.items()}

    def _state(self, observations: Mapping[str, Any]) -> np.ndarray:
        if self.source == "env":
            return np.asarray(self.env.state(), np.float32).reshape(-1)
        pieces = []
        for agent in self.possible_agents:
            part = self._parts[agent]
            value = observations.get(agent)
            if value is None:  # gone: zeros in its place
                pieces.append(np.zeros(gym.spaces.flatdim(part), np.float32))
                continue
            if part is not self.observation_spaces[agent]:
                value = value["observation"]
            pieces.append(np.asarray(gym.spaces.flatten(part, value), np.float32))
        return np.concatenate(pieces)

    def _with_state(self, observations: Mapping[str, Any], infos: Mapping[str, Any]) -> dict:
        state = self._state(observations)
        identity = np.eye(len(self.possible_agents), dtype=np.float32)
        infos = {agent: dict(info) for agent, info in infos.items()}
        for agent in observations:
            own = identity[self.possible_agents.index(agent)]
            infos.setdefault(agent, {})[CRITIC_STATE] = np.concatenate([state, own])
        return infos

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        observations, infos = self.env.reset(seed=seed, options=options)
        self.agents = list(getattr(self.env, "agents", self.possible_agents))
        return observations, self._with_state(observations, infos or {})

    def step(self, actions: dict[str, Any]):
        observations, rewards, terminateds, truncateds, infos = self.env.step(actions)
        self.agents = list(getattr(self.env, "agents", self.possible_agents))
        infos = self._with_state(observations, infos or {})
        return observations, rewards, terminateds, truncateds, infos

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def state(self) -> Any:
        return self.env.state()


class CriticStateCreator:
    """Picklable creator: the multi-agent env from ``make``, with the critic's input."""

    def __init__(self, make: Callable[[dict[str, Any] | None], Any], global_state: GlobalState):
        self.make = make
        self.global_state = global_state

    def __call__(self, env_config: dict[str, Any] | None = None) -> CriticStateEnv:
        return CriticStateEnv(self.make(env_config), self.global_state)
