"""Recall: a task that only a policy with memory solves, sized by how far back it must look.

Each step shows one of ``classes`` classes (one-hot) and pays 1 for naming the class shown
``delay`` steps earlier; the first ``delay`` steps pay nothing whatever the action. The classes
are drawn independently, so the current observation says nothing about the answer: a policy
without memory (or with too short a memory) earns ``(length - delay) / classes``, one that
remembers ``length - delay``. bsuite's memory length task asks the same of a single bit at the
end of an episode; here every step asks, so short runs learn it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class Recall(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, classes: int = 2, delay: int = 1, length: int = 16):
        if not 0 < delay < length:
            raise ValueError(f"delay must be from 1 to length - 1 ({length - 1}), got {delay}")
        self.classes, self.delay, self.length = classes, delay, length
        self.observation_space = gym.spaces.Box(0.0, 1.0, (classes,), np.float32)
        self.action_space = gym.spaces.Discrete(classes)
        self._shown: list[int] = []

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._shown = []
        return self._show(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        t = len(self._shown) - 1  # the step being answered
        reward = 0.0
        if t >= self.delay:
            reward = float(int(action) == self._shown[t - self.delay])
        truncated = len(self._shown) >= self.length
        return self._show(), reward, False, truncated, {}

    def _show(self) -> np.ndarray:
        shown = int(self.np_random.integers(self.classes))
        self._shown.append(shown)
        observation = np.zeros(self.classes, np.float32)
        observation[shown] = 1.0
        return observation
