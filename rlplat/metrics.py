"""Names of the numbers rlplat reads from RLlib results.

Users write short names (``episode_return_mean``) in ``stop``, ``checkpoint.score`` and ``tune``;
RLlib reports nested keys (``env_runners/episode_return_mean``). Any full result path containing a
``/`` is accepted as it is.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

ENV_STEPS = "num_env_steps_sampled_lifetime"
# Env steps the learners trained on (repeats counted). Offline runs (BC, MARWIL, CQL, IQL) sample
# nothing and RLlib's env-step counter there is nominal: rlplat reports this as their env steps.
ENV_STEPS_TRAINED = "learners/__all_modules__/num_env_steps_trained_lifetime"
ITERATION = "training_iteration"
TIME_TOTAL = "time_total_s"
RETURN_MEAN = "window/episode_return_mean"
# Env runner processes Ray restarted since the trial (last) started: rlplat's count, see
# rlplat.cluster.connect.env_runner_restarts; RLlib's num_remote_worker_restarts misses quiet
# restarts.
RUNNER_RESTARTS = "fault_tolerance/env_runner_restarts"
HEALTHY_RUNNERS = "fault_tolerance/num_healthy_workers"
# Env steps or resets that raised (RLlib rebuilt the env and dropped its episodes in progress).
ENV_CRASHES = "env_runners/num_env_step_failures"
# Off-policy algorithms: env steps in the replay memory, and (in the first result after a
# restore) how many the checkpoint brought back.
REPLAY_STEPS = "replay/env_steps_stored"
RESTORED_REPLAY_STEPS = "replay/env_steps_restored"

# Goal envs: the share of the last N finished episodes whose last info said is_success.
SUCCESS_RATE = "window/success_rate"

# ``window/...`` is the mean over the last N finished episodes (see rlplat.rllib.episode_stats);
# RLlib's ``env_runners/...`` values cover only the episodes finished in the latest iteration.
METRIC_ALIASES: dict[str, str] = {
    "episode_return_mean": RETURN_MEAN,
    "episode_len_mean": "window/episode_len_mean",
    "game_score_mean": "window/game_score_mean",
    "success_rate": SUCCESS_RATE,
    "iteration_episode_return_mean": "env_runners/episode_return_mean",
    "iteration_episode_return_min": "env_runners/episode_return_min",
    "iteration_episode_return_max": "env_runners/episode_return_max",
    "eval_episode_return_mean": "evaluation/env_runners/episode_return_mean",
    "env_steps": ENV_STEPS,
    "iterations": ITERATION,
    "time_s": TIME_TOTAL,
}

# Set in the result of the iteration after which stop.time_s ended a trial because another
# iteration would have ended past the budget (rlplat.run.trainable.another_iteration_fits).
TIME_BUDGET_ENDED = "stop/time_budget_ended"
# Seconds the trial has spent playing greedy evaluation episodes (in and between iterations),
# since it (last) started: part of the time the re-scoring budget is a share of.
EVALUATION_SECONDS = "evaluation_cost/time_total_s"
# In a stacked seed's results: how many seeds its process trained with it. Every seed's
# time_total_s is its process's, so a seed's share of the run's training seconds is that over
# this (the re-scoring budget, rlplat.run.rescore).
STACKED_PROCESS_SEEDS = "stacked/seeds_in_process"
# The two default checkpoint scores: the greedy evaluation of the checkpoint's own weights
# (rlplat_evaluation.json, written by the trainable) and the training window.
EVAL_SCORE = "eval_episode_return_mean"
WINDOW_SCORE = "episode_return_mean"
SELF_PLAY_SCORE = "self_play/learner_elo"  # a zero-sum game's returns sum to 0: rate the learner
# Episodes in the window that were played before the first gradient update: a window score
# with any of them is not the trained policy's.
WINDOW_BEFORE_LEARNING = "window/episodes_before_learning"

# Multi-agent runs: ``policy_return_mean/<policy>`` and ``agent_return_mean/<agent>``, windowed
# like episode_return_mean (which is then the team's return, summed over agents).
POLICY_RETURNS = "window/policy_return_mean"
AGENT_RETURNS = "window/agent_return_mean"
GROUP_PREFIXES = ("policy_return_mean/", "agent_return_mean/")


def metric_path(name: str) -> str:
    """Full RLlib/Tune result path for a short metric name (full paths pass through)."""
    if name.startswith(GROUP_PREFIXES):
        return f"window/{name}"
    return METRIC_ALIASES.get(name, name)


def is_known_metric(name: str) -> bool:
    """True for an alias or anything that looks like a full result path."""
    return name in METRIC_ALIASES or "/" in name or name in METRIC_ALIASES.values()


def lookup(result: Mapping[str, Any], path: str) -> Any:
    """Read ``a/b/c`` from a nested or already-flattened result dict; None when absent."""
    if path in result:
        return result[path]
    node: Any = result
    for part in path.split("/"):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def finite(value: Any) -> float | None:
    """The value as a float when it is a finite number, else None (NaN before any episode ends)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy scalars included
        return None
    return float(value) if math.isfinite(value) else None


def member_returns(values: dict[str, float], limit: int = 8) -> str:
    """``learner 0.45, opponent -0.45``: the return of each policy (or agent)."""
    shown = [f"{name} {value:.2f}" for name, value in list(values.items())[:limit]]
    more = f", ... ({len(values) - limit} more)" if len(values) > limit else ""
    return ", ".join(shown) + more


class Throughput:
    """Environment steps per second between consecutive results of each trial."""

    def __init__(self) -> None:
        self._last: dict[Any, tuple[float, float]] = {}

    def update(self, trial: Any, result: Mapping[str, Any]) -> float | None:
        steps = finite(lookup(result, ENV_STEPS)) or 0.0
        elapsed = finite(result.get(TIME_TOTAL)) or 0.0
        prev_steps, prev_elapsed = self._last.get(trial, (0.0, 0.0))
        if steps < prev_steps or elapsed < prev_elapsed:  # restored from an earlier checkpoint
            prev_steps, prev_elapsed = 0.0, 0.0
        self._last[trial] = (steps, elapsed)
        if elapsed <= prev_elapsed:
            return None
        return (steps - prev_steps) / (elapsed - prev_elapsed)
