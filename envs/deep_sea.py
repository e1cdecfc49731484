"""Deep Sea (Osband et al. 2019, "Behaviour Suite for Reinforcement Learning", bsuite's
deep_sea): a task that dithering exploration does not solve.

The agent starts at the top-left of a ``size`` x ``size`` grid and descends one row per step
(``size - 1`` steps in all), choosing to move left or right. Each move right costs
``0.01 / size``; reaching the bottom-right cell pays 1. The only rewarded path is right at
every step, which a uniformly random policy takes with probability 2**-(size - 1), while every
other reward it sees says "do not go right".
Here action 1 is right everywhere (bsuite randomises it per cell; with a fixed mapping the
bonus-free policy is no more likely to find the goal, as the cost still pushes it left).
The observation is the one-hot of the agent's cell (``size**2`` floats).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class DeepSea(gym.Env):
    """See the module's docstring. The optimal return is ``1 - 0.01 * (size - 1) / size``."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, size: int = 10, render_mode: str | None = None):
        if size < 2:
            raise ValueError(f"size must be at least 2, got {size}")
        self.size = size
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(size * size,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._row, self._column = 0, 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.size * self.size, dtype=np.float32)
        obs[self._row * self.size + self._column] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._row, self._column = 0, 0
        return self._obs(), {}

    def step(self, action: int):
        reward = 0.0
        if int(action) == 1:
            reward -= 0.01 / self.size
            self._column = min(self._column + 1, self.size - 1)
        else:
            self._column = max(self._column - 1, 0)
        self._row += 1
        terminated = self._row == self.size - 1
        if terminated and self._column == self.size - 1:
            reward += 1.0
        return self._obs(), reward, terminated, False, {"is_success": reward > 0.5}

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        rows = []
        for row in range(self.size):
            cells = ["."] * self.size
            if row == self.size - 1:
                cells[-1] = "G"
            if row == self._row:
                cells[self._column] = "A"
            rows.append("".join(cells))
        return "\n".join(rows) + "\n"
