"""A catch game on a 10x10 grid of boolean frames, as MinAtar's envs (Young & Tian, 2019) give:
observations of shape 10x10x2 and dtype bool (channel 0 the paddle, channel 1 the ball).

The ball falls one row per step from a random column; the paddle (bottom row) moves left, stays
or moves right. Catching the ball pays 1, missing it -1; an episode is one drop (10 steps).
``integer=True`` gives the same frames as int32, ``flat=True`` as one vector (an MLP's input).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

SIDE = 10


class BoolFrames(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, integer: bool = False, flat: bool = False):
        dtype = np.int32 if integer else np.bool_
        shape = (SIDE * SIDE * 2,) if flat else (SIDE, SIDE, 2)
        self.observation_space = gym.spaces.Box(0, 1, shape, dtype)
        self.action_space = gym.spaces.Discrete(3)
        self._ball = (0, 0)
        self._paddle = SIDE // 2

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._ball = (0, int(self.np_random.integers(SIDE)))
        self._paddle = SIDE // 2
        return self._frame(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self._paddle = int(np.clip(self._paddle + int(action) - 1, 0, SIDE - 1))
        row, column = self._ball
        self._ball = (row + 1, column)
        landed = row + 1 == SIDE - 1
        reward = (1.0 if column == self._paddle else -1.0) if landed else 0.0
        return self._frame(), reward, landed, False, {}

    def _frame(self) -> np.ndarray:
        frame = np.zeros((SIDE, SIDE, 2), dtype=bool)
        frame[SIDE - 1, self._paddle, 0] = True
        frame[self._ball[0], self._ball[1], 1] = True
        return frame.astype(self.observation_space.dtype).reshape(self.observation_space.shape)
