"""CartPole with injected faults: a simulator that crashes, or produces NaN rewards.

For checking what a training run does when its environment misbehaves (tests, docs/errors.md);
``factory: envs.flaky:FlakyCartPole`` with the kwargs below.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import ray


def _in_ray_actor() -> bool:
    return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None


class SimulatorCrash(RuntimeError):
    """What the flaky env raises: stands for a crashed physics engine or game binary."""


class FlakyCartPole(gym.Wrapper):
    """CartPole-v1 that fails on purpose.

    - ``crash_on_reset``: ``reset`` always raises.
    - ``crash_at_step``: ``step`` raises once this env has taken that many steps. Each new env
      counts from zero, so a restarted env runner crashes again at the same point.
    - ``crash_once_marker``: with ``crash_at_step``, crash only if this file does not exist yet
      (it is created when crashing), so exactly one crash happens across all processes.
    - ``nan_reward``: every reward is NaN.
    - ``old_step_api``: ``step`` returns Gymnasium's old 4-tuple (obs, reward, done, info).
    - ``observation_offset``: added to every observation (40 leaves the observation space).
    - ``hang_at_step``: ``step`` never returns once this env has taken that many steps (a
      deadlocked simulator).
    - ``crash_in_ray_actors``: ``step`` raises in Ray actors (the env runners), never in the
      driver that checks the env before training.
    - ``step_delay_s``: every ``step`` takes this much longer (a slow simulator).
    - ``faults_in_ray_actors``: ``crash_at_step``, ``nan_reward`` and ``old_step_api`` act only
      in Ray actors (the env runners): the checks before training see a sound env.
    """

    def __init__(
        self,
        crash_on_reset: bool = False,
        crash_at_step: int | None = None,
        crash_once_marker: str | None = None,
        nan_reward: bool = False,
        old_step_api: bool = False,
        observation_offset: float = 0.0,
        crash_in_ray_actors: bool = False,
        hang_at_step: int | None = None,
        step_delay_s: float = 0.0,
        faults_in_ray_actors: bool = False,
        render_mode: str | None = None,
    ):
        super().__init__(gym.make("CartPole-v1", render_mode=render_mode))
        self.crash_on_reset = crash_on_reset
        self.crash_at_step = crash_at_step
        self.crash_once_marker = Path(crash_once_marker) if crash_once_marker else None
        self.nan_reward = nan_reward
        self.old_step_api = old_step_api
        self.observation_offset = observation_offset
        self.crash_in_ray_actors = crash_in_ray_actors
        self.hang_at_step = hang_at_step
        self.step_delay_s = step_delay_s
        self.faults_in_ray_actors = faults_in_ray_actors
        self._steps = 0

    def reset(self, **kwargs: Any):
        if self.crash_on_reset:
            raise SimulatorCrash("the simulator failed to start (crash_on_reset)")
        obs, info = self.env.reset(**kwargs)
        return obs + self.observation_offset, info

    def step(self, action: Any):
        self._steps += 1
        time.sleep(self.step_delay_s)
        while self.hang_at_step is not None and self._steps >= self.hang_at_step:
            time.sleep(1.0)
        if self.crash_in_ray_actors and _in_ray_actor():
            raise SimulatorCrash(f"the simulator crashed in a Ray actor (pid {os.getpid()})")
        faulty = not self.faults_in_ray_actors or _in_ray_actor()
        if faulty and self.crash_at_step is not None and self._steps >= self.crash_at_step:
            if self.crash_once_marker is None or not self.crash_once_marker.exists():
                if self.crash_once_marker is not None:
                    self.crash_once_marker.touch()
                raise SimulatorCrash(f"the simulator crashed at step {self._steps}")
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs = obs + self.observation_offset
        reward = float("nan") if faulty and self.nan_reward else reward
        if faulty and self.old_step_api:
            return obs, reward, terminated or truncated, info
        return obs, reward, terminated, truncated, info
