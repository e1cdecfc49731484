"""``checkpoint.rescore``: at a run's end, each trial's kept checkpoints play ``rescore`` greedy
episodes again (the policy restored as ``rlplat eval`` restores it, without Ray), and that mean
becomes their score, with its 95% interval. The checkpoint ``rlplat eval``, ``export`` and
``serve`` pick is then ranked by a score that holds up, not by the few evaluation episodes
(5 by default) played at its iteration, which on a task whose returns spread widely rank a lucky
checkpoint first.

Only greedy-evaluation scores are re-scored (the default score when the run evaluates): the
re-score measures the same thing with more episodes. A trial with one kept checkpoint has no
choice to make and is left as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

from rlplat.checkpoints import CheckpointInfo, best_and_last, checkpoints_in, trials_in
from rlplat.errors import RlplatError
from rlplat.experiment.schema import Experiment
from rlplat.metrics import EVAL_SCORE
from rlplat.policy.evaluate import evaluate
from rlplat.policy.options import EvalOptions

Z_95 = 1.96


@dataclass(frozen=True)
class Rescored:
    checkpoint: Path
    info: CheckpointInfo  # as rewritten: score = the re-scored mean

    @property
    def label(self) -> str:
        return f"{self.info.score:.2f} ± {self.info.score_interval:.2f}"


def rescore_run(run_dir: Path, experiment: Experiment, console: Console) -> None:
    """Re-score every trial of the run in ``run_dir`` that kept more than one checkpoint, and
    say per trial which checkpoint is now best and what the first pick plays."""
    episodes = experiment.checkpoint.rescore
    if not episodes or experiment.score_metric() != EVAL_SCORE:
        return
    for trial in trials_in(run_dir):
        checkpoints = checkpoints_in(trial)
        if len(checkpoints) < 2:
            continue
        first_pick = best_and_last(trial)[0]
        console.print(
            f"Re-scoring the {len(checkpoints)} checkpoints {trial.name} kept with {episodes} "
            "greedy episodes each (checkpoint.rescore)...",
            highlight=False,
        )
        try:
            rescored = [rescore_checkpoint(c, episodes) for c in checkpoints]
        except (RlplatError, OSError, RuntimeError, ValueError) as exc:
            console.print(
                f"  not re-scored ({type(exc).__name__}: {exc}); the scores taken during "
                "training rank its checkpoints.",
                highlight=False,
            )
            continue
        for each in rescored:  # all or none: scores of two kinds never rank one trial
            each.info.write(each.checkpoint)
        best, newest = best_and_last(trial)
        console.print(_verdict(rescored, first_pick, best), highlight=False)
        target = experiment.stop.episode_return_mean
        if target is not None:
            noisy = _noisy_stop(target, CheckpointInfo.read(newest), CheckpointInfo.read(best))
            if noisy:
                console.print(noisy, highlight=False)


def rescore_checkpoint(checkpoint: Path, episodes: int) -> Rescored:
    """Play ``episodes`` greedy episodes (seeds 0.., as ``rlplat eval -n EPISODES``) with the
    checkpoint's policy: its info with their mean as the score (not yet written); one
    re-scored before keeps its score."""
    info = CheckpointInfo.read(checkpoint) or CheckpointInfo()
    if info.score_interval is not None:
        return Rescored(checkpoint, info)
    report = evaluate(checkpoint, EvalOptions(episodes=episodes), say=lambda _: None)
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
    )
    return Rescored(checkpoint, rescored)


def _verdict(rescored: list[Rescored], first_pick: Path | None, pick: Path | None) -> str:
    best = next(r for r in rescored if r.checkpoint == pick)
    line = f"  best: {best.checkpoint.name} {best.label}"
    others = [r for r in rescored if r is not best]
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
