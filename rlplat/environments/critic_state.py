"""The env wrappers that put a centralised critic's input (``global_state.CriticInputs``) in
every observing agent's info: ``CriticStateEnv`` around a simultaneous-move RLlib
``MultiAgentEnv``, ``CriticStateVector`` around a backend's whole vector of worlds."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.env.vector.vector_multi_agent_env import VectorMultiAgentEnv

from rlplat.environments.global_state import (
    CriticInputs,
    GlobalState,
    GlobalStateError,
)
from rlplat.environments.pettingzoo import Delegating


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
