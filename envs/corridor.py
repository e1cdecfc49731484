"""A one-dimensional corridor: walk right to the goal. Small and fast, for tests and examples."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Start at cell 0; action 1 moves right, 0 moves left; reaching ``length - 1`` pays +1.

    Each step costs -0.01, so the optimal return is ``1 - 0.01 * (length - 2)``.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, length: int = 8, max_steps: int = 50, render_mode: str | None = None):
        if length < 2:
            raise ValueError(f"length must be at least 2, got {length}")
        self.length = length
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._position = 0
        self._steps = 0

    def _obs(self) -> np.ndarray:
        return np.array([self._position / (self.length - 1)], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._position, self._steps = 0, 0
        return self._obs(), {}

    def step(self, action: int):
        self._steps += 1
        self._position = int(
            np.clip(self._position + (1 if action == 1 else -1), 0, self.length - 1)
        )
        at_goal = self._position == self.length - 1
        reward = 1.0 if at_goal else -0.01
        return self._obs(), reward, at_goal, self._steps >= self.max_steps, {}

    def render(self) -> str:
        cells = ["."] * self.length
        cells[-1] = "G"
        cells[self._position] = "A"
        return "".join(cells)


class PixelCorridor(Corridor):
    """The corridor seen as a grayscale image of shape ``(3, length, 1)``: the agent is the
    bright pixel of the middle row. One frame says where the agent is, a stack of frames also
    where it came from (for RLlib's ``frame_stack`` connector)."""

    def __init__(self, length: int = 8, max_steps: int = 50, render_mode: str | None = None):
        super().__init__(length, max_steps, render_mode)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(3, length, 1), dtype=np.float32)

    def _obs(self) -> np.ndarray:
        image = np.zeros((3, self.length, 1), dtype=np.float32)
        image[1, self._position, 0] = 1.0
        image[1, -1, 0] = 0.5  # the goal
        return image
