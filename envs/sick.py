"""Environments that break training on purpose, for the training-health diagnoses
(docs/doctor.md): each makes one rule fire in a run's first minutes.

- ``CombinationLock``: a reward only for 20 right actions in a row, each cell's own; a policy
  that settles before it is ever rewarded never is (``no_reward``, ``entropy_collapse``).
- ``scale_reward``: a wrapper (``env.wrappers: [{envs.sick:scale_reward: {scale: 10000}}]``)
  that multiplies every reward (``reward_scale``).
- ``leaky_cartpole``: CartPole whose step takes longer the more steps it has taken, as an env that
  leaks would (``throughput_drop``).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class CombinationLock(gym.Env):
    """A lock of ``length`` cells: in each cell one of two actions (fixed per cell, drawn from
    ``lock_seed``) moves on, the other back to the start; opening the last cell pays +1, every
    other step 0. A policy that settles on one action per cell without having been rewarded
    never opens it."""

    def __init__(self, length: int = 20, max_steps: int = 60, lock_seed: int = 0):
        self.length, self.max_steps = length, max_steps
        self.combination = np.random.default_rng(lock_seed).integers(0, 2, size=length)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._cell, self._steps = 0, 0

    def _obs(self) -> np.ndarray:
        return np.array([self._cell / self.length], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._cell, self._steps = 0, 0
        return self._obs(), {}

    def step(self, action: int):
        self._steps += 1
        self._cell = self._cell + 1 if action == self.combination[self._cell] else 0
        opened = self._cell == self.length
        return self._obs(), float(opened), opened, self._steps >= self.max_steps, {}


def scale_observation(env: gym.Env, scale: float = 1000.0) -> gym.Env:
    """Every observation times ``scale``."""
    space = env.observation_space
    scaled = gym.spaces.Box(space.low * scale, space.high * scale, dtype=space.dtype)
    return gym.wrappers.TransformObservation(env, lambda obs: obs * scale, scaled)


def scale_reward(env: gym.Env, scale: float = 1e4) -> gym.Env:
    """Every reward times ``scale``."""
    return gym.wrappers.TransformReward(env, lambda reward: reward * scale)


def leaky_cartpole(leak_s: float = 1e-5, max_episode_steps: int = 500) -> gym.Env:
    """``LeakyCartPole`` with CartPole-v1's time limit."""
    return gym.wrappers.TimeLimit(LeakyCartPole(leak_s), max_episode_steps)


class LeakyCartPole(CartPoleEnv):
    """CartPole whose every step sleeps ``leak_s`` for each thousand steps this env has taken."""

    def __init__(self, leak_s: float = 1e-4, render_mode: str | None = None, **kwargs: Any):
        super().__init__(render_mode=render_mode)
        self.leak_s = leak_s
        self.steps_taken = 0

    def step(self, action: int):
        self.steps_taken += 1
        time.sleep(self.leak_s * self.steps_taken / 1000)
        return super().step(action)
