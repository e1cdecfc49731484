"""One seed's result out of a stacked iteration's (``rlplat.algorithms.stacked``): what its
trial logs, as a separate run of that seed would."""

from __future__ import annotations

from typing import Any

from rlplat.algorithms.stacked.runner import SEED_RESULTS, SEED_STOPPED, SEED_WINDOW
from rlplat.rllib.episode_stats import WINDOW_KEY

LEARNER = "default_policy"  # RLlib's module id: where a seed's learner results go


def seed_result(result: dict[str, Any], index: int) -> dict[str, Any]:
    """Seed ``index``'s result from a stacked iteration's: its env runner, learner and greedy
    evaluation results under RLlib's names, its last episodes as rlplat's ``window``; the
    counters and timers are the stack's (its env steps are each seed's)."""
    runners = dict(result.get("env_runners") or {})
    mine = dict((runners.pop(SEED_RESULTS, None) or {}).get(str(index)) or {})
    window = mine.pop(SEED_WINDOW, None)
    learners = dict(result.get("learners") or {})
    learned = (learners.pop(SEED_RESULTS, None) or {}).get(str(index)) or {}
    if LEARNER in learners:
        learners[LEARNER] = {**learners[LEARNER], **learned}
    one = {**result, "env_runners": {**runners, **mine}, "learners": learners}
    evaluation = (result.get("evaluation") or {}).get("env_runners")
    if evaluation:  # the seed's greedy episodes (StackedEnvRunner as an evaluation runner)
        played = dict(evaluation)
        own = (played.pop(SEED_RESULTS, None) or {}).get(str(index)) or {}
        one["evaluation"] = {**result["evaluation"], "env_runners": {**played, **own}}
    one.pop(WINDOW_KEY, None)  # the stack's, over every seed's episodes
    if window:
        one[WINDOW_KEY] = window
    return one


def seed_stopped(result: dict[str, Any]) -> bool:
    """Whether a seed's result says a non-finite loss or gradient stopped it."""
    return bool((result.get("learners") or {}).get(LEARNER, {}).get(SEED_STOPPED))
