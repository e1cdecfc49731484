"""Environments that break training on purpose, for the training-health diagnoses
(docs/doctor.md): each makes one rule fire in a run's first minutes.

- ``SparseCorridor``: the corridor with no step cost: the only reward is at a far goal, which
  random walks do not reach (``no_reward``).
- ``scale_reward``: a wrapper (``env.wrappers: [{envs.sick:scale_reward: {scale: 10000}}]``)
  that multiplies every reward (``reward_scale``).
- ``leaky_cartpole``: CartPole whose step takes longer the more steps it has taken, as an env that
  leaks would (``throughput_drop``).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from envs.corridor import Corridor


class SparseCorridor(Corridor):
    """Reaching cell ``length - 1`` pays +1; every other step pays 0."""

    def __init__(self, length: int = 40, max_steps: int = 60, render_mode: str | None = None):
        super().__init__(length, max_steps, render_mode)

    def step(self, action: int):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, (1.0 if terminated else 0.0), terminated, truncated, info


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
