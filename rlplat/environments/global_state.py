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
from ray.rllib.env.vector.vector_multi_agent_env import VectorMultiAgentEnv

from rlplat.environments.kinds import ACTION_MASK
from rlplat.environments.pettingzoo import Delegating

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


class CriticStateEnv(Delegating, MultiAgentEnv):
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
        self.inputs = CriticInputs(
            self.possible_agents, self.observation_spaces, self.state_space, global_state
        )
        self.source, self.size = self.inputs.source, self.inputs.size

    def _with_state(self, observations: Mapping[str, Any], infos: Mapping[str, Any]) -> dict:
        state = self.env.state() if self.source == "env" else None
        return self.inputs.added(observations, infos, state)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        observations, infos = self.env.reset(seed=seed, options=options)
        self.agents = list(getattr(self.env, "agents", self.possible_agents))
        return observations, self._with_state(observations, infos or {})

    def step(self, actions: dict[str, Any]):
        observations, rewards, terminateds, truncateds, infos = self.env.step(actions)
        self.agents = list(getattr(self.env, "agents", self.possible_agents))
        infos = self._with_state(observations, infos or {})
        return observations, rewards, terminateds, truncateds, infos


class CriticStateVector(VectorMultiAgentEnv):
    """A whole vector of envs (``env.backend: vmas``) with the critic's input in every world's
    infos; the worlds have no ``state()``, so the source is the agents' observations."""

    def __init__(self, vector: Any, global_state: GlobalState = "auto"):
        self.vector = vector
        self.num_envs = vector.num_envs
        self.envs = vector.envs
        self.metadata = vector.metadata
        self.render_mode = None
        self.single_observation_spaces = vector.single_observation_spaces
        self.single_action_spaces = vector.single_action_spaces
        self.single_observation_space = vector.single_observation_space
        self.single_action_space = vector.single_action_space
        agents = list(vector.envs[0].possible_agents)
        self.inputs = CriticInputs(agents, self.single_observation_spaces, None, global_state)

    def reset(self, *, seed: Any = None, options: dict | None = None):
        observations, infos = self.vector.reset(seed=seed, options=options)
        return observations, self._with_state(observations, infos)

    def step(self, actions: list[dict[str, Any]]):
        observations, rewards, terminateds, truncateds, infos = self.vector.step(actions)
        return observations, rewards, terminateds, truncateds, self._with_state(observations, infos)

    def _with_state(self, observations: list, infos: list) -> list[dict]:
        return [self.inputs.added(o, i) for o, i in zip(observations, infos, strict=True)]

    def close_extras(self, **kwargs: Any) -> None:
        self.vector.close()


class CriticStateCreator:
    """Picklable creator: the multi-agent env from ``make``, with the critic's input."""

    def __init__(self, make: Callable[[dict[str, Any] | None], Any], global_state: GlobalState):
        self.make = make
        self.global_state = global_state

    def __call__(self, env_config: dict[str, Any] | None = None) -> Any:
        env = self.make(env_config)
        if isinstance(env, VectorMultiAgentEnv):  # a backend's whole vector
            return CriticStateVector(env, self.global_state)
        return CriticStateEnv(env, self.global_state)
