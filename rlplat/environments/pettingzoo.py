"""PettingZoo environments as RLlib ``MultiAgentEnv``s.

RLlib ships adapters for both PettingZoo APIs, but they keep agents in a ``set`` (the order of
agents then changes between processes) and call ``render(render_mode)``, which PettingZoo's
``render()`` does not accept. These adapters keep PettingZoo's own agent order and its metadata
(render modes, frame rate), and render what PettingZoo renders.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from pettingzoo import AECEnv
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from rlplat.environments.kinds import ACTION_MASK

__all__ = ["ACTION_MASK", "to_multi_agent_env"]


def to_multi_agent_env(env: Any) -> MultiAgentEnv:
    return TurnBasedEnv(env) if isinstance(env, AECEnv) else SimultaneousEnv(env)


class Delegating:
    """An env over ``self.env`` that renders, closes and reports the state as that env does."""

    env: Any

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def state(self) -> Any:
        """The global state, for environments that define one (mpe2, SISL)."""
        return self.env.state()


class _PettingZooAdapter(Delegating, MultiAgentEnv):
    def __init__(self, env: Any):
        super().__init__()
        self.env = env
        self.metadata = dict(getattr(env, "metadata", {}) or {})
        self.render_mode = getattr(env, "render_mode", None)
        self.possible_agents = list(env.possible_agents)
        self.agents = list(self.possible_agents)
        self.observation_spaces = {a: env.observation_space(a) for a in self.possible_agents}
        self.action_spaces = {a: env.action_space(a) for a in self.possible_agents}
        self.observation_space = gym.spaces.Dict(self.observation_spaces)
        self.action_space = gym.spaces.Dict(self.action_spaces)
        self.state_space = getattr(env, "state_space", None)  # envs with a global state()

    def _live_or_reported(self, observations: dict[str, Any]) -> list[str]:
        """The agents after a step: PettingZoo's live ones and those the step reported for the
        last time (PettingZoo has removed them already). RLlib checks every key of a step's
        dicts against ``agents``; without them a hand of poker that ends at its first action
        fails that check, which samples one random step."""
        live = set(self.env.agents)
        return [a for a in self.possible_agents if a in live or a in observations]


class SimultaneousEnv(_PettingZooAdapter):
    """PettingZoo's parallel API: every live agent acts at every step."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        observations, infos = self.env.reset(seed=seed, options=options)
        self.agents = list(self.env.agents)
        return observations, infos or {}

    def step(self, actions: dict[str, Any]):
        observations, rewards, terminateds, truncateds, infos = self.env.step(actions)
        self.agents = self._live_or_reported(observations)
        terminateds = dict(terminateds)
        truncateds = dict(truncateds)
        # An episode is over when every agent is done (or PettingZoo removed them all); it is
        # "terminated" only if every agent terminated, otherwise it was cut off.
        terminateds["__all__"] = all(terminateds.values())
        truncateds["__all__"] = not terminateds["__all__"] and (
            all(truncateds.values()) or not self.env.agents
        )
        return observations, rewards, terminateds, truncateds, infos


class TurnBasedEnv(_PettingZooAdapter):
    """PettingZoo's AEC API: one agent acts per step (board games such as connect_four).

    Each step returns an observation only for the agent whose turn comes next. When agents are
    done, each of them is visited once (its final observation and accumulated reward reported,
    then PettingZoo's ``step(None)`` removes it) before the next live agent's turn.
    """

    turn_based = True

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.env.reset(seed=seed, options=options)
        self.agents = list(self.env.agents)
        agent = self.env.agent_selection
        return {agent: self.env.observe(agent)}, {agent: self.env.infos.get(agent, {})}

    def step(self, actions: dict[str, Any]):
        self.env.step(actions[self.env.agent_selection])
        observations, rewards, terminateds, truncateds, infos = {}, {}, {}, {}, {}
        while self.env.agents:
            agent = self.env.agent_selection
            observation, reward, terminated, truncated, info = self.env.last()
            observations[agent] = observation
            rewards[agent] = reward
            terminateds[agent] = terminated
            truncateds[agent] = truncated
            infos[agent] = info
            if not (terminated or truncated):
                break
            self.env.step(None)
        self.agents = self._live_or_reported(observations)
        finished = not self.env.agents
        terminateds["__all__"] = finished and all(terminateds.values())
        truncateds["__all__"] = finished and not terminateds["__all__"]
        return observations, rewards, terminateds, truncateds, infos
