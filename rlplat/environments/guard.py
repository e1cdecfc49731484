"""A training env that crashes: survived and counted, and a clear stop when it keeps crashing.

rlplat turns on RLlib's ``restart_failed_sub_environments``: when an env raises in ``step`` or
``reset``, the env runner builds a new env and drops the episodes in progress (RLlib counts them
in ``env_runners/num_env_step_failures``). An env that crashes every time would make the runner
rebuild it forever, so each env is wrapped to remember its crashes in its process; once
``MAX_CONSECUTIVE_CRASHES`` happened without an episode finishing in between, building the next
env raises ``EnvKeepsFailing`` with the env's own last error, which ends the trial.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rlplat.errors import EnvKeepsFailing

MAX_CONSECUTIVE_CRASHES = 5


class _Crashes:
    """This process's record: crashes since an episode last finished, and the last error."""

    consecutive = 0
    last: str | None = None


class CrashRecorder(gym.Wrapper):
    """Passes everything through; notes each exception of ``step``/``reset`` before re-raising."""

    def reset(self, **kwargs: Any) -> Any:
        try:
            return self.env.reset(**kwargs)
        except Exception as exc:
            _record(exc)
            raise

    def step(self, action: Any) -> Any:
        try:
            result = self.env.step(action)
        except Exception as exc:
            _record(exc)
            raise
        if result[2] or result[3]:  # terminated or truncated: the env works again
            _Crashes.consecutive = 0
        return result


def _record(exc: Exception) -> None:
    _Crashes.consecutive += 1
    _Crashes.last = f"{type(exc).__name__}: {exc}"


class GuardedCreator:
    """Wraps an env creator for training (picklable, like the creator it wraps)."""

    def __init__(self, creator: Callable[[Any], Any]):
        self.creator = creator

    def __call__(self, env_config: Any = None) -> Any:
        if _Crashes.consecutive >= MAX_CONSECUTIVE_CRASHES:
            raise EnvKeepsFailing(
                f"the training environment crashed {_Crashes.consecutive} times in a row "
                f"without finishing an episode; its last error: {_Crashes.last}. Fix the "
                "environment (rlplat eval and the env's own tests can reproduce it)."
            )
        env = self.creator(env_config)
        return CrashRecorder(env) if isinstance(env, gym.Env) else env
