"""A training env that crashes: survived and counted, and a clear stop when it keeps crashing.

rlplat turns on RLlib's ``restart_failed_sub_environments``: when an env's ``step`` or ``reset``
raises (or returns something RLlib cannot unpack), the env runner logs it, builds a new env and
drops the episodes in progress (RLlib counts them in ``env_runners/num_env_step_failures``). It
builds that env while handling the error, so the creator sees the error as the exception in
flight. An env that fails every time would be rebuilt forever: once ``MAX_CONSECUTIVE_CRASHES``
failures happened in this process without an episode finishing in between, building the next env
raises ``EnvKeepsFailing`` with the env's own last error, which ends the trial. A remote env
runner cannot end it so: RLlib logs the failed call, the runner exits, and Ray restarts it as a
new process. So an env runner actor also leaves the error in Ray's key-value store under its
actor id, where the trial looks after each iteration (``take_reported_failure``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import ray

from rlplat.errors import EnvKeepsFailing
from rlplat.seams.ray_internals import kv_delete, kv_get, kv_put

MAX_CONSECUTIVE_CRASHES = 5


class _Crashes:
    """This process's record: failures since an episode last finished, and the last error."""

    consecutive = 0
    last: str | None = None


class EpisodeEndRecorder(gym.Wrapper):
    """Passes everything through; a finished episode (single- or multi-agent) clears the
    count of consecutive failures."""

    def step(self, action: Any) -> Any:
        result = self.env.step(action)
        if len(result) == 5 and (_over(result[2]) or _over(result[3])):
            _Crashes.consecutive = 0
        return result


class VectorEpisodeEndRecorder(gym.vector.VectorWrapper):
    """``EpisodeEndRecorder`` for a vector env: an episode that finished in any of its envs
    clears the count."""

    def step(self, actions: Any) -> Any:
        result = self.env.step(actions)
        if np.any(result[2]) or np.any(result[3]):
            _Crashes.consecutive = 0
        return result


def _over(flag: Any) -> bool:
    return bool(flag.get("__all__")) if isinstance(flag, dict) else bool(flag)


def _failure_key(actor_id: str) -> bytes:
    return f"rlplat/env_keeps_failing/{actor_id}".encode()


def _report_to_trial(message: str) -> None:
    actor_id = ray.get_runtime_context().get_actor_id() if ray.is_initialized() else None
    if actor_id is not None:
        kv_put(_failure_key(actor_id), message.encode(), overwrite=True)


def take_reported_failure(actor_id: str) -> str | None:
    """The error an env runner actor reported (once), or None."""
    key = _failure_key(actor_id)
    message = kv_get(key)
    if message is None:
        return None
    kv_delete(key)
    return message.decode()


class GuardedCreator:
    """Wraps an env creator for training (picklable, like the creator it wraps)."""

    def __init__(self, creator: Callable[[Any], Any]):
        self.creator = creator

    def __call__(self, env_config: Any = None) -> Any:
        failure = sys.exc_info()[1]
        if isinstance(failure, Exception):  # rebuilt by RLlib after the env failed
            _Crashes.consecutive += 1
            _Crashes.last = f"{type(failure).__name__}: {failure}"
        if _Crashes.consecutive >= MAX_CONSECUTIVE_CRASHES:
            message = (
                f"the training environment failed {_Crashes.consecutive} times in a row "
                f"without finishing an episode; its last error: {_Crashes.last}. Fix the "
                "environment (rlplat eval and the env's own tests can reproduce it)."
            )
            _report_to_trial(message)
            raise EnvKeepsFailing(message)
        env = self.creator(env_config)
        if isinstance(env, gym.vector.VectorEnv):  # env.backend envpool: the whole vector
            return VectorEpisodeEndRecorder(env)
        return EpisodeEndRecorder(env) if isinstance(env, gym.Env) else env
