"""Identity tasks: the smallest problems an RL algorithm must solve, for a learning test per
algorithm (as Stable-Baselines3's ``tests/test_identity.py``). The right action is what the agent
sees, every step is independent, and an episode is ``length`` steps.

- ``Identity``: see one of ``classes`` as a one-hot vector, be paid 1 for choosing it. A uniformly
  random policy earns ``length / classes``, a solved one ``length``.
- ``IdentityBox``: see a number x in [-1, 1], be paid -(a - x)^2 for the action a in [-1, 1].
  A uniformly random policy earns ``-length * 2/3`` on average, a solved one 0.
- ``IdentityTeam``: a PettingZoo parallel env of ``agents`` agents, each seeing its own draw of
  the above (``continuous``) and all paid the team's mean reward; ``state()`` joins their
  observations, for critics on the global state.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv


class _Steps(gym.Env):
    """An episode of ``length`` independent steps: ``_draw()`` shows the next target,
    ``_reward(action)`` pays for the last one."""

    metadata = {"render_modes": []}

    def __init__(self, length: int):
        self.length = length
        self._steps = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._steps = 0
        return self._draw(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward = self._reward(action)
        self._steps += 1
        return self._draw(), reward, False, self._steps >= self.length, {}

    def _draw(self) -> np.ndarray:
        raise NotImplementedError

    def _reward(self, action: Any) -> float:
        raise NotImplementedError


class Identity(_Steps):
    def __init__(self, classes: int = 4, length: int = 8):
        super().__init__(length)
        self.classes = classes
        self.observation_space = gym.spaces.Box(0.0, 1.0, (classes,), np.float32)
        self.action_space = gym.spaces.Discrete(classes)
        self._target = 0

    def _reward(self, action: int) -> float:
        return float(int(action) == self._target)

    def _draw(self) -> np.ndarray:
        self._target = int(self.np_random.integers(self.classes))
        return np.eye(self.classes, dtype=np.float32)[self._target]


class IdentityBox(_Steps):
    def __init__(self, length: int = 8):
        super().__init__(length)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self._target = np.zeros(1, np.float32)

    def _reward(self, action: np.ndarray) -> float:
        error = float(np.clip(action, -1.0, 1.0)[0] - self._target[0])
        return -(error**2)

    def _draw(self) -> np.ndarray:
        self._target = self.np_random.uniform(-1.0, 1.0, 1).astype(np.float32)
        return self._target.copy()


class IdentityTeam(ParallelEnv):
    metadata = {"name": "identity_team_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(
        self, agents: int = 2, continuous: bool = False, classes: int = 4, length: int = 8
    ):
        self.possible_agents = [f"agent_{i}" for i in range(agents)]
        self.agents: list[str] = []
        make = (lambda: IdentityBox(length)) if continuous else (lambda: Identity(classes, length))
        self._envs = {agent: make() for agent in self.possible_agents}
        single = next(iter(self._envs.values())).observation_space
        self.state_space = gym.spaces.Box(
            np.tile(single.low, agents), np.tile(single.high, agents), dtype=np.float32
        )
        self._observations: dict[str, np.ndarray] = {}

    def observation_space(self, agent: str) -> gym.Space:
        return self._envs[agent].observation_space

    def action_space(self, agent: str) -> gym.Space:
        return self._envs[agent].action_space

    def state(self) -> np.ndarray:
        return np.concatenate([self._observations[agent] for agent in self.possible_agents])

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        self.agents = list(self.possible_agents)
        for index, (agent, env) in enumerate(self._envs.items()):
            seeded = None if seed is None else seed * len(self._envs) + index
            self._observations[agent] = env.reset(seed=seeded)[0]
        return dict(self._observations), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        rewards, truncated = [], False
        for agent, env in self._envs.items():
            observation, reward, _, truncated, _ = env.step(actions[agent])
            self._observations[agent] = observation
            rewards.append(reward)
        team = float(np.mean(rewards))
        agents = list(self.agents)
        if truncated:
            self.agents = []
        return (
            {agent: self._observations[agent] for agent in agents},
            {agent: team for agent in agents},
            {agent: False for agent in agents},
            {agent: truncated for agent in agents},
            {agent: {} for agent in agents},
        )
