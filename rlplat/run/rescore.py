"""``checkpoint.rescore``: at a run's end, each trial's kept checkpoints play ``rescore`` greedy
episodes again (the policy restored as ``rlplat eval`` restores it, without Ray), and that mean
becomes their score, with its 95% interval. The checkpoint ``rlplat eval``, ``export`` and
``serve`` pick is then ranked by a score that holds up, not by the few evaluation episodes
(5 by default) played at its iteration, which on a task whose returns spread widely rank a lucky
checkpoint first.

Only greedy-evaluation scores are re-scored (the default score when the run evaluates): the
re-score measures the same thing with more episodes. A lone trial with one kept checkpoint has
no choice to make and is left as it is; an unfinished run is re-scored when its resumed run
ends (``rlplat/run/launch.py``).

Re-scoring is budgeted against the run (``checkpoint.rescore_share`` of its training seconds,
10% by default: the sum of its trials' seconds, a stacked seed counting its share of its
process's), so that a short run does not spend a third of its command replaying
checkpoints: each checkpoint gets an equal part of what is left, and a trial whose checkpoints
could not play more episodes than their evaluation during training keeps those scores.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

from rlplat.checkpoints import (
    CheckpointInfo,
    best_and_last,
    checkpoints_in,
    read_results,
    trials_in,
)
from rlplat.experiment.schema import Experiment
from rlplat.metrics import (
    EVAL_SCORE,
    EVALUATION_SECONDS,
    STACKED_PROCESS_SEEDS,
    TIME_TOTAL,
    finite,
    lookup,
)
from rlplat.policy.evaluate import evaluate
from rlplat.policy.options import EvalOptions
from rlplat.util.signals import StopRequest, stopped_by_signals

Z_95 = 1.96
MAX_TRIALS = 10  # a bigger search keeps its training scores: re-scoring runs in the driver
TRAINING_EPISODES = 5  # greedy episodes per checkpoint during training, where none is recorded


@dataclass(frozen=True)
class Rescored:
    checkpoint: Path
    info: CheckpointInfo  # as rewritten: score = the re-scored mean

    @property
    def label(self) -> str:
        return f"{self.info.score:.2f} ± {self.info.score_interval:.2f}"


def rescore_run(run_dir: Path, experiment: Experiment, console: Console) -> bool:
    """Re-score the trials of the run in ``run_dir`` (one that kept a single checkpoint only when
    the run has several trials, which are then ranked against each other), saying per trial which
    checkpoint is now best and what the first pick plays; whether any score changed. A trial whose
    policy cannot be played outside Ray keeps its training scores."""
    if not _rescores(experiment):
        return False
    trials = trials_in(run_dir)
    if len(trials) > MAX_TRIALS:
        console.print(
            f"Not re-scoring the checkpoints of {len(trials)} trials (checkpoint.rescore plays "
            f"those of at most {MAX_TRIALS}): their training scores rank them; `rlplat eval "
            f"<checkpoint> -n {experiment.checkpoint.rescore}` plays one again.",
            highlight=False,
        )
        return False
    fewest = 1 if len(trials) > 1 else 2
    chosen = [trial for trial in trials if len(checkpoints_in(trial)) >= fewest]
    budget = _budget(chosen, experiment)
    if budget is not None:
        console.print(budget.describe(experiment), highlight=False)
    changed = False
    with stopped_by_signals() as stop:
        for index, trial in enumerate(chosen):
            try:
                share = budget.share(len(chosen) - index) if budget else None
                changed |= _rescore_trial(trial, experiment, console, share, stop)
            except KeyboardInterrupt as interrupt:
                name = str(interrupt) or "SIGINT"
                console.print(
                    f"  {name}: re-scoring stopped; the trials re-scored keep their new scores, "
                    "the others their scores from training.",
                    highlight=False,
                )
                break
    return changed


def _rescores(experiment: Experiment) -> bool:
    """Whether the run's score is the greedy evaluation ``rlplat eval`` replays: not one whose
    evaluation explores or plays another env config, which ``rlplat eval`` would not."""
    evaluation_config = experiment.evaluation.get("evaluation_config") or {}
    return bool(
        experiment.checkpoint.rescore
        and experiment.score_metric() == EVAL_SCORE
        and not evaluation_config.get("explore")
        and not evaluation_config.get("env_config")
    )


@dataclass
class Budget:
    """The seconds re-scoring may take (``checkpoint.rescore_share`` of the training seconds),
    and when it started."""

    training_s: float
    evaluation_s: float  # of training_s: the greedy evaluations at checkpoint iterations
    seconds: float
    started: float

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.started)

    def share(self, trials_left: int) -> float:
        """The seconds the next trial may take: an equal part of what is left."""
        return max(self.left(), 0.0) / trials_left

    def describe(self, experiment: Experiment) -> str:
        share = experiment.checkpoint.rescore_share
        evaluation = self.evaluation_s / self.training_s
        return (
            f"Re-scoring within {self.seconds:.1f} s ({share:.0%} of {self.training_s:.0f} s of "
            "training: checkpoint.rescore_share; null for no limit). Greedy evaluation during "
            f"training took {self.evaluation_s:.1f} s of those ({evaluation:.0%}: "
            "evaluation.evaluation_duration episodes every checkpoint.every iterations)."
        )


def _budget(trials: list[Path], experiment: Experiment) -> Budget | None:
    """The run's re-scoring budget; None without a share or when no training time was
    recorded."""
    share = experiment.checkpoint.rescore_share
    if share is None or not trials:
        return None
    training_s = evaluation_s = 0.0
    for trial in trials:
        results = read_results(trial)
        if results:
            # A stacked seed's seconds are its process's, shared with the other seeds there.
            sharing = finite(lookup(results[-1], STACKED_PROCESS_SEEDS)) or 1.0
            training_s += (finite(results[-1].get(TIME_TOTAL)) or 0.0) / sharing
            evaluation_s += (finite(lookup(results[-1], EVALUATION_SECONDS)) or 0.0) / sharing
    if not training_s:
        return None
    return Budget(training_s, min(evaluation_s, training_s), share * training_s, time.monotonic())


def _rescore_trial(
    trial: Path,
    experiment: Experiment,
    console: Console,
    seconds: float | None = None,
    stop: StopRequest | None = None,
) -> bool:
    checkpoints = checkpoints_in(trial)
    episodes = experiment.checkpoint.rescore
    first_pick = best_and_last(trial)[0]
    within = f", within {seconds:.1f} s" if seconds is not None else ""
    console.print(
        f"Re-scoring the {len(checkpoints)} checkpoint(s) {trial.name} kept with up to "
        f"{episodes} greedy episodes each (checkpoint.rescore{within})...",
        highlight=False,
    )
    before = {c: CheckpointInfo.read(c) for c in checkpoints}
    started = time.monotonic()
    try:
        rescored = []
        for index, checkpoint in enumerate(checkpoints):
            deadline = None
            if seconds is not None:
                left = seconds - (time.monotonic() - started)
                deadline = time.monotonic() + left / (len(checkpoints) - index)
            each = rescore_checkpoint(checkpoint, episodes, deadline, stop)
            if deadline is not None and _no_better_than_training(
                each, before[checkpoint], episodes
            ):
                played = each.info.rescore_episodes
                console.print(
                    f"  not re-scored: the budget let {checkpoint.name} play {played} "
                    "episode(s), no more than its evaluation during training; those scores "
                    "rank the trial (raise checkpoint.rescore_share, or null).",
                    highlight=False,
                )
                return False
            rescored.append(each)
        for each in rescored:  # all or none: scores of two kinds never rank one trial
            each.info.write(each.checkpoint)
    except Exception as exc:  # noqa: BLE001 - the trained run stands; its scores say what they are
        _restore(before)
        console.print(
            f"  not re-scored ({type(exc).__name__}: {exc}); the scores taken during training "
            "rank its checkpoints.",
            highlight=False,
        )
        return False
    best, newest = best_and_last(trial)
    console.print(_verdict(rescored, first_pick, best), highlight=False)
    target = experiment.stop.episode_return_mean
    if target is not None and experiment.checkpoint.mode == "max":
        noisy = _noisy_stop(target, CheckpointInfo.read(newest), CheckpointInfo.read(best))
        if noisy:
            console.print(noisy, highlight=False)
    return True


def _restore(infos: dict[Path, CheckpointInfo | None]) -> None:
    """Write back the infos a failed re-scoring may have replaced (as far as the disk allows)."""
    for checkpoint, info in infos.items():
        if info is not None:
            try:
                info.write(checkpoint)
            except OSError:
                pass


def _no_better_than_training(each: Rescored, before: CheckpointInfo | None, episodes: int) -> bool:
    """Whether the budget cut a re-score short of ``episodes`` at no more episodes than the
    checkpoint's evaluation during training (a re-score from an earlier run, which has its
    interval, always counts)."""
    played = each.info.rescore_episodes
    if played is None or played >= episodes:
        return False
    training = (before.evaluation_episodes if before else None) or TRAINING_EPISODES
    return played <= training


def rescore_checkpoint(
    checkpoint: Path,
    episodes: int,
    deadline: float | None = None,
    stop: StopRequest | None = None,
) -> Rescored:
    """Play ``episodes`` greedy episodes (seeds 0.., as ``rlplat eval -n EPISODES``) with the
    checkpoint's policy, fewer where ``deadline`` (``time.monotonic()``) comes first: its info
    with their mean as the score (not yet written); one re-scored before keeps its score. A
    ``stop`` that was asked raises KeyboardInterrupt before the next episode."""
    info = CheckpointInfo.read(checkpoint) or CheckpointInfo()
    if info.score_interval is not None:
        return Rescored(checkpoint, info)
    report = evaluate(
        checkpoint,
        EvalOptions(episodes=episodes),
        say=lambda _: None,
        deadline=deadline,
        before_episode=stop.raise_if_asked if stop is not None else None,
    )
    episodes = report.episodes
    returns = report.returns
    sample_std = returns.std * math.sqrt(episodes / (episodes - 1)) if episodes > 1 else 0.0
    half_width = Z_95 * sample_std / math.sqrt(episodes)
    rescored = replace(
        info,
        score_metric=EVAL_SCORE,
        score=returns.mean,
        scored_by=f"greedy return over {episodes} episodes at the run's end, ± {half_width:.2f} "
        "at 95%",
        score_interval=half_width,
        training_score=info.score,
        rescore_episodes=episodes,
    )
    return Rescored(checkpoint, rescored)


def _verdict(rescored: list[Rescored], first_pick: Path | None, pick: Path | None) -> str:
    best = next(r for r in rescored if r.checkpoint == pick)
    line = f"  best: {best.checkpoint.name} {best.label}"
    others = [r for r in rescored if r is not best]
    if others:
        line += "; " + ", ".join(f"{r.checkpoint.name} {r.label}" for r in others)
    before = next((r for r in rescored if r.checkpoint == first_pick), None)
    if before is not None and before is not best and before.info.training_score is not None:
        episodes = before.info.evaluation_episodes
        over = f" over {episodes} episodes" if episodes else ""
        line += (
            f". During training {before.checkpoint.name} ranked first "
            f"({before.info.training_score:.2f}{over})."
        )
    return line


def _noisy_stop(
    target: float, newest: CheckpointInfo | None, best: CheckpointInfo | None
) -> str | None:
    """A sentence when ``stop.episode_return_mean`` ended the trial (its last checkpoint's
    training window reached it) but greedily even its best checkpoint plays below it."""
    if newest is None or best is None or best.score is None or best.score_interval is None:
        return None
    window = newest.episode_return_mean
    if window is None or window < target or best.score + best.score_interval >= target:
        return None
    return (
        f"  The trial stopped when its training window (exploring episodes) read {window:.2f}, "
        f"reaching stop.episode_return_mean ({target:g}); greedily its best checkpoint plays "
        f"{best.score:.2f} ± {best.score_interval:.2f}, below that target: the window was a "
        "noisy one."
    )
