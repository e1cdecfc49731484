"""A cooperative multi-agent environment seen as one team, for value-factorisation learners.

QMIX, VDN and IQL choose every agent's action with one shared network and learn from whole
episodes in which all agents are aligned in time. Seen as a single "team agent", such an env fits
RLlib's single-agent env runners and episode buffers as they are; the team's observation holds,
per agent, what that agent sees, which actions it may take and what it did last, plus the global
state the mixer is conditioned on:

    obs           (n_agents, obs_dim)    each agent's observation, flattened
    action_mask   (n_agents, n_actions)  1 = allowed (an agent that is gone may only take 0)
    prev_actions  (n_agents, n_actions)  one-hot of the previous joint action (zeros at reset)
    state         (state_dim,)           env.state(), or the agents' observations concatenated

The team acts with a MultiDiscrete joint action. Its reward is the sum of the agents' rewards
(``team_reward: sum``) or the reward they share (``common``: the mean over the agents that were
rewarded, which equals the common reward in a fully cooperative env); each agent's own reward is in
``info["agent_rewards"]`` so evaluation can still report per-agent returns. The episode ends when
every agent is done.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from rlplat.environments.global_state import GlobalState, GlobalStateError, resolve_source
from rlplat.environments.kinds import ACTION_MASK

TeamReward = Literal["sum", "common"]
DEFAULT_TEAM_REWARD: TeamReward = "sum"
DEFAULT_GLOBAL_STATE: GlobalState = "auto"
AGENT_REWARDS = "agent_rewards"
TEAM_SETTINGS = ("team_reward", "global_state")  # the algorithm's settings this env takes


class TeamEnvError(ValueError):
    """The multi-agent env cannot be played as one team; ``key`` is the experiment key to fix."""

    def __init__(self, message: str, key: str = "env"):
        super().__init__(message)
        self.key = key


def _agent_space_parts(space: gym.Space) -> tuple[gym.Space, bool]:
    """(the observation part of an agent's space, whether it carries an action mask)."""
    if isinstance(space, gym.spaces.Dict) and ACTION_MASK in space.spaces:
        if "observation" not in space.spaces:
            raise TeamEnvError(
                f"an agent's Dict observation has an action_mask but no 'observation' key: {space}"
            )
        return space["observation"], True
    return space, False


class TeamEnv(gym.Env):
    """``env`` (an RLlib MultiAgentEnv with simultaneous moves) as one team agent."""

    def __init__(
        self,
        env: Any,
        team_reward: TeamReward = DEFAULT_TEAM_REWARD,
        global_state: GlobalState = DEFAULT_GLOBAL_STATE,
    ):
        if getattr(env, "turn_based", False):
            raise TeamEnvError(
                "the environment is turn-based (PettingZoo AEC API); value factorisation needs "
                "all agents to act at every step: use a parallel environment (env.api: parallel)"
            )
        self.env = env
        self.members: list[str] = list(env.possible_agents)
        action_spaces = [env.action_spaces[a] for a in self.members]
        if (
            not all(isinstance(s, gym.spaces.Discrete) for s in action_spaces)
            or len({int(s.n) for s in action_spaces}) != 1
        ):
            raise TeamEnvError(
                "every agent needs the same Discrete action space; this environment has "
                + ", ".join(f"{a}: {s}" for a, s in zip(self.members, action_spaces, strict=True))
                + " (SuperSuit's pad_action_space_v0 pads Discrete spaces to the largest)"
            )
        self.n_actions = int(action_spaces[0].n)
        parts = [_agent_space_parts(env.observation_spaces[a]) for a in self.members]
        self._agent_obs_spaces = [space for space, _ in parts]
        self._masked = [masked for _, masked in parts]
        dims = {gym.spaces.flatdim(space) for space in self._agent_obs_spaces}
        if len(dims) != 1:
            raise TeamEnvError(
                "every agent's observation must have the same size for one shared network; "
                "SuperSuit's pad_observations_v0 pads them to the largest"
            )
        self.obs_dim = dims.pop()
        self.state_source = self._resolve_state(global_state)
        if self.state_source == "env":
            state_dim = int(np.prod(env.state_space.shape))
        else:
            state_dim = self.obs_dim * len(self.members)
        n, a = len(self.members), self.n_actions
        self.team_reward = team_reward
        self.observation_space = gym.spaces.Dict(
            {
                "obs": gym.spaces.Box(-np.inf, np.inf, (n, self.obs_dim), np.float32),
                ACTION_MASK: gym.spaces.Box(0.0, 1.0, (n, a), np.float32),
                "prev_actions": gym.spaces.Box(0.0, 1.0, (n, a), np.float32),
                "state": gym.spaces.Box(-np.inf, np.inf, (state_dim,), np.float32),
            }
        )
        self.action_space = gym.spaces.MultiDiscrete([a] * n)
        self.metadata = dict(getattr(env, "metadata", {}) or {})
        self.render_mode = getattr(env, "render_mode", None)
        self._live: list[str] = []

    def _resolve_state(self, wanted: GlobalState) -> str:
        try:
            return resolve_source(wanted, getattr(self.env, "state_space", None))
        except GlobalStateError as exc:
            raise TeamEnvError(str(exc), key="training.global_state") from None

    def _team_obs(self, observations: dict[str, Any], prev: np.ndarray) -> dict[str, np.ndarray]:
        n, a = len(self.members), self.n_actions
        obs = np.zeros((n, self.obs_dim), np.float32)
        mask = np.zeros((n, a), np.float32)
        for i, agent in enumerate(self.members):
            if agent not in observations:
                mask[i, 0] = 1.0  # gone: only the no-op slot, so max and argmax stay defined
                continue
            value = observations[agent]
            if self._masked[i]:
                mask[i] = np.asarray(value[ACTION_MASK], np.float32)
                value = value["observation"]
            else:
                mask[i] = 1.0
            obs[i] = gym.spaces.flatten(self._agent_obs_spaces[i], value)
        if self.state_source == "env":
            state = np.asarray(self.env.state(), np.float32).reshape(-1)
        else:
            state = obs.reshape(-1)
        return {"obs": obs, ACTION_MASK: mask, "prev_actions": prev, "state": state}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        observations, _ = self.env.reset(seed=seed, options=options)
        self._live = [a for a in self.members if a in observations]
        prev = np.zeros((len(self.members), self.n_actions), np.float32)
        return self._team_obs(observations, prev), {}

    def step(self, action: np.ndarray):
        action = np.asarray(action, dtype=np.int64).reshape(-1)
        joint = {
            agent: int(action[i]) for i, agent in enumerate(self.members) if agent in (self._live)
        }
        observations, rewards, terminateds, truncateds, _ = self.env.step(joint)
        agent_rewards = {agent: float(r) for agent, r in rewards.items()}
        if not agent_rewards:
            reward = 0.0
        elif self.team_reward == "sum":
            reward = sum(agent_rewards.values())
        else:
            reward = float(np.mean(list(agent_rewards.values())))
        self._live = [
            a
            for a in self.members
            if a in observations and not (terminateds.get(a) or truncateds.get(a))
        ]
        prev = np.eye(self.n_actions, dtype=np.float32)[action]
        terminated = bool(terminateds.get("__all__", False))
        truncated = bool(truncateds.get("__all__", False)) and not terminated
        info = {AGENT_REWARDS: agent_rewards}
        return self._team_obs(observations, prev), reward, terminated, truncated, info

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


class TeamEnvCreator:
    """Picklable creator: builds the multi-agent env with ``make`` and wraps it as a team."""

    def __init__(
        self,
        make: Callable[[dict[str, Any] | None], Any],
        team_reward: TeamReward = DEFAULT_TEAM_REWARD,
        global_state: GlobalState = DEFAULT_GLOBAL_STATE,
    ):
        self.make = make
        self.team_reward = team_reward
        self.global_state = global_state

    def __call__(self, env_config: dict[str, Any] | None = None) -> TeamEnv:
        return TeamEnv(self.make(env_config), self.team_reward, self.global_state)
