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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console

from rlplat.checkpoints import CheckpointInfo, best_and_last, checkpoints_in, trials_in
from rlplat.experiment.schema import Experiment
from rlplat.metrics import EVAL_SCORE
from rlplat.policy.evaluate import evaluate
from rlplat.policy.options import EvalOptions

Z_95 = 1.96
MAX_TRIALS = 10  # a bigger search keeps its training scores: re-scoring runs in the driver


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
    changed = False
    for trial in trials:
        if len(checkpoints_in(trial)) >= fewest:
            try:
                changed |= _rescore_trial(trial, experiment, console)
            except KeyboardInterrupt:
                console.print(
                    "  re-scoring interrupted: the trials not re-scored keep their training "
                    "scores.",
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


def _rescore_trial(trial: Path, experiment: Experiment, console: Console) -> bool:
    checkpoints = checkpoints_in(trial)
    episodes = experiment.checkpoint.rescore
    first_pick = best_and_last(trial)[0]
    console.print(
        f"Re-scoring the {len(checkpoints)} checkpoint(s) {trial.name} kept with {episodes} "
        "greedy episodes each (checkpoint.rescore)...",
        highlight=False,
    )
    before = {c: CheckpointInfo.read(c) for c in checkpoints}
    try:
        rescored = [rescore_checkpoint(c, episodes) for c in checkpoints]
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
