"""A training env that crashes: survived and counted, and a clear stop when it keeps crashing.

rlplat turns on RLlib's ``restart_failed_sub_environments``: when an env's ``step`` or ``reset``
raises (or returns something RLlib cannot unpack), the env runner logs it, builds a new env and
drops the episodes in progress (RLlib counts them in ``env_runners/num_env_step_failures``). It
builds that env while handling the error, so the creator sees the error as the exception in
flight. An env that fails every time would be rebuilt forever: once ``MAX_CONSECUTIVE_CRASHES``
failures happened in this process without an episode finishing in between, building the next env
raises ``EnvKeepsFailing`` with the env's own last error, which ends the trial.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from rlplat.errors import EnvKeepsFailing

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


def _over(flag: Any) -> bool:
    return bool(flag.get("__all__")) if isinstance(flag, dict) else bool(flag)


def failures_in_this_process() -> tuple[int, str | None]:
    """Failures since an episode last finished in this process, and the last error (asked of
    remote env runners, where RLlib swallows the ``EnvKeepsFailing`` raised below)."""
    return _Crashes.consecutive, _Crashes.last


def keeps_failing(consecutive: int, last: str | None) -> EnvKeepsFailing | None:
    if consecutive < MAX_CONSECUTIVE_CRASHES:
        return None
    return EnvKeepsFailing(
        f"the training environment failed {consecutive} times in a row without finishing an "
        f"episode; its last error: {last}. Fix the environment (rlplat eval and the env's own "
        "tests can reproduce it)."
    )


class GuardedCreator:
    """Wraps an env creator for training (picklable, like the creator it wraps)."""

    def __init__(self, creator: Callable[[Any], Any]):
        self.creator = creator

    def __call__(self, env_config: Any = None) -> Any:
        failure = sys.exc_info()[1]
        if isinstance(failure, Exception):  # rebuilt by RLlib after the env failed
            _Crashes.consecutive += 1
            _Crashes.last = f"{type(failure).__name__}: {failure}"
        failing = keeps_failing(_Crashes.consecutive, _Crashes.last)
        if failing is not None:
            raise failing
        env = self.creator(env_config)
        return EpisodeEndRecorder(env) if isinstance(env, gym.Env) else env
