"""Bit flipping (Andrychowicz et al. 2017, "Hindsight Experience Replay", section 3.1): a
goal-conditioned task a sparse reward alone does not teach.

The state is ``bits`` bits, the goal another ``bits`` bits, both drawn at random; each action
flips one bit. Every step that ends away from the goal costs -1, the step that reaches it pays 0
and ends the episode; after ``bits`` steps it is cut off. With 15 bits or more a random policy
almost never sees a reward other than -1, which is why the paper needs hindsight. Observations
follow Gymnasium-Robotics' goal-env convention: a Dict of ``observation``, ``achieved_goal`` (the
bits as they are) and ``desired_goal``, with the env's ``compute_reward``,
``compute_terminated`` and ``compute_truncated`` over batches of goals.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class BitFlip(gym.Env):
    """See the module's docstring."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, bits: int = 15, render_mode: str | None = None):
        if bits < 1:
            raise ValueError(f"bits must be at least 1, got {bits}")
        self.bits = bits
        self.render_mode = render_mode
        vector = gym.spaces.Box(0.0, 1.0, shape=(bits,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict(
            {"observation": vector, "achieved_goal": vector, "desired_goal": vector}
        )
        self.action_space = gym.spaces.Discrete(bits)
        self._state = np.zeros(bits, np.float32)
        self._goal = np.zeros(bits, np.float32)
        self._steps = 0

    def _obs(self) -> dict[str, np.ndarray]:
        return {
            "observation": self._state.copy(),
            "achieved_goal": self._state.copy(),
            "desired_goal": self._goal.copy(),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._state = self.np_random.integers(0, 2, self.bits).astype(np.float32)
        self._goal = self.np_random.integers(0, 2, self.bits).astype(np.float32)
        while np.array_equal(self._state, self._goal):  # a goal already reached teaches nothing
            self._goal = self.np_random.integers(0, 2, self.bits).astype(np.float32)
        self._steps = 0
        return self._obs(), {}

    def step(self, action: int):
        self._state[int(action)] = 1.0 - self._state[int(action)]
        self._steps += 1
        info = {"is_success": bool(np.array_equal(self._state, self._goal))}
        reward = float(self.compute_reward(self._state, self._goal, info))
        terminated = bool(self.compute_terminated(self._state, self._goal, info))
        truncated = self._steps >= self.bits and not terminated
        return self._obs(), reward, terminated, truncated, info

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """0 where the achieved goal is the desired one, else -1 (one value per row)."""
        reached = np.all(np.asarray(achieved_goal) == np.asarray(desired_goal), axis=-1)
        return reached.astype(np.float32) - 1.0

    def compute_terminated(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """Reaching the goal ends the episode."""
        return np.all(np.asarray(achieved_goal) == np.asarray(desired_goal), axis=-1)

    def compute_truncated(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        return np.zeros(np.shape(achieved_goal)[:-1], bool)

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        state = "".join(str(int(bit)) for bit in self._state)
        goal = "".join(str(int(bit)) for bit in self._goal)
        return f"state {state}\ngoal  {goal}\n"
