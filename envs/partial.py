"""Partially observable versions of classic-control tasks: the velocities hidden.

With positions only, one observation cannot tell which way the pole (or the cart) is moving;
a policy with memory can infer it from the last few. Used by
``experiments/cartpole_novel_lstm.yaml``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

# The observation entries that are positions (everything else is a velocity), by env id.
POSITIONS = {
    "CartPole-v1": [0, 2],  # cart position, pole angle
    "Pendulum-v1": [0, 1],  # cos and sin of the angle
    "MountainCar-v0": [0],  # car position
    "MountainCarContinuous-v0": [0],
}


class HideVelocities(gym.ObservationWrapper):
    """Keep only the position entries of the observation (``POSITIONS``)."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        env_id = env.unwrapped.spec.id if env.unwrapped.spec else None
        if env_id not in POSITIONS:
            raise ValueError(f"HideVelocities knows {', '.join(POSITIONS)}; got {env_id!r}")
        self.keep = np.array(POSITIONS[env_id])
        space = env.observation_space
        self.observation_space = gym.spaces.Box(
            space.low[self.keep], space.high[self.keep], dtype=space.dtype
        )

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation)[self.keep]
