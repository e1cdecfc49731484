"""Gymnasium multi-agent environments (EPyMARL's "gymma" kind) as PettingZoo parallel envs.

Level-Based Foraging and Multi-Robot Warehouse are ``gym.Env``s that act for all agents at once:
the action and observation spaces are Tuples with one entry per agent, ``step`` takes a tuple of
actions and returns a list of rewards and one ``done`` for the team. Seen as a PettingZoo
parallel env (agents ``agent_0``, ``agent_1``, ...) they get everything rlplat does for PettingZoo
envs: the contract check, policy mapping, the team view of QMIX/VDN/IQL, eval, export and serve.

Each agent keeps its own reward (a scalar reward is every agent's); the team view sums them
(``training.team_reward: sum``), as EPyMARL's ``common_reward`` does. These envs have no global
state, so the team view's state is the agents' observations concatenated, as in EPyMARL.
``time_limit`` ends an episode after that many steps as a truncation (the return is then
bootstrapped); a ``done`` from the env before the limit is a termination.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Iterable
from typing import Any

import gymnasium as gym
from pettingzoo import ParallelEnv

from rlplat.environments.opengl import headless_pyglet


def make_gymma(key: str, time_limit: int | None = None, **kwargs: Any) -> GymMultiAgentEnv:
    """``gym.make(key, **kwargs)`` (``module:EnvId`` imports ``module`` first, which registers
    the id) as a PettingZoo parallel env."""
    if kwargs.get("render_mode") == "rgb_array":
        headless_pyglet()
    with warnings.catch_warnings():  # a render_mode missing from an old env's metadata
        warnings.simplefilter("ignore")
        env = gym.make(key, disable_env_checker=True, **kwargs)
    return GymMultiAgentEnv(env, time_limit)


def vmas_scenario(
    scenario: str,
    max_steps: int,
    continuous_actions: bool = True,
    render_mode: str | None = None,
    **kwargs: Any,
) -> GymMultiAgentEnv:
    """One VMAS scenario (``balance``, ``navigation``, ``transport``, ...) on the CPU through
    VMAS's own Gymnasium wrapper, as a PettingZoo parallel env; ``kwargs`` go to the scenario
    (e.g. ``n_agents``). The wrapper simulates one world; ``env.backend: vmas`` has training's
    env runners step their envs as one batch instead (``rlplat.environments.vmas_worlds``)."""
    import vmas  # noqa: PLC0415 - an optional package

    if render_mode == "rgb_array":
        headless_pyglet()
    env = vmas.make_env(
        scenario,
        num_envs=1,
        device="cpu",
        continuous_actions=continuous_actions,
        wrapper="gymnasium",
        max_steps=max_steps,
        terminated_truncated=True,
        wrapper_kwargs={"render_mode": render_mode or "rgb_array"},
        **kwargs,
    )
    return GymMultiAgentEnv(env)


class GymMultiAgentEnv(ParallelEnv):
    """A Gymnasium env with Tuple spaces, one entry per agent, as a PettingZoo parallel env."""

    def __init__(self, env: gym.Env, time_limit: int | None = None):
        spaces = {"observation": env.observation_space, "action": env.action_space}
        for name, space in spaces.items():
            if not isinstance(space, gym.spaces.Tuple):
                raise ValueError(
                    f"a Gymnasium multi-agent env has a Tuple {name} space with one entry per "
                    f"agent; this one has {space}"
                )
        count = len(env.action_space)
        if len(env.observation_space) != count:
            raise ValueError(
                f"the observation space has {len(env.observation_space)} entries for "
                f"{count} agents (its action space has {count})"
            )
        self.env = env
        self.time_limit = time_limit
        agents = [f"agent_{i}" for i in range(count)]
        self.possible_agents = agents
        self.agents: list[str] = []
        self.observation_spaces = dict(zip(agents, env.observation_space, strict=True))
        self.action_spaces = dict(zip(agents, env.action_space, strict=True))
        self.metadata = dict(env.metadata or {})
        modes = list(self.metadata.get("render_modes") or [])
        # Gym's API before render_mode (LBF, RWARE, VMAS): render(mode).
        self._renders_by_mode = "mode" in inspect.signature(env.unwrapped.render).parameters
        if self._renders_by_mode and "rgb_array" not in modes:
            modes.append("rgb_array")  # Gym's render(mode) API: its envs drew rgb_array frames
        self.metadata["render_modes"] = modes
        self.render_mode = env.render_mode
        self._steps = 0

    def observation_space(self, agent: str) -> gym.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gym.Space:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None):
        observations, info = self.env.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        self._steps = 0
        return self._by_agent(observations, "observations"), self._infos(info)

    def step(self, actions: dict[str, Any]):
        joint = tuple(actions[agent] for agent in self.possible_agents)
        observations, rewards, done, truncated, info = self.env.step(joint)
        self._steps += 1
        if not isinstance(rewards, Iterable):
            rewards = [rewards] * len(self.possible_agents)
        cut_off = self.time_limit is not None and self._steps >= self.time_limit
        ended = all(done) if isinstance(done, Iterable) else bool(done)
        terminated = ended and not cut_off
        truncated = not terminated and (cut_off or bool(truncated))
        agents = self.possible_agents
        if terminated or truncated:
            self.agents = []
        return (
            self._by_agent(observations, "observations"),
            {agent: float(r) for agent, r in self._by_agent(rewards, "rewards").items()},
            dict.fromkeys(agents, terminated),
            dict.fromkeys(agents, truncated),
            self._infos(info),
        )

    def _by_agent(self, values: Any, what: str) -> dict[str, Any]:
        values = list(values)
        if len(values) != len(self.possible_agents):
            raise ValueError(
                f"the env returned {len(values)} {what} for {len(self.possible_agents)} agents"
            )
        return dict(zip(self.possible_agents, values, strict=True))

    def _infos(self, info: Any) -> dict[str, dict]:
        """The env's info per agent: a list has one entry per agent, a dict keyed by the agents'
        names (VMAS) one per agent; any other dict is every agent's."""
        if isinstance(info, (list, tuple)):
            return {agent: dict(i) for agent, i in self._by_agent(info, "infos").items()}
        if set(info) == set(self.possible_agents):
            return {agent: dict(info[agent]) for agent in self.possible_agents}
        return {agent: dict(info) for agent in self.possible_agents}

    def render(self) -> Any:
        if self.render_mode is None:
            return None
        if self._renders_by_mode:
            return self.env.unwrapped.render(mode=self.render_mode)
        return self.env.render()

    def close(self) -> None:
        self.env.close()
