"""The Tune callback that completes each checkpoint Tune writes and prunes the obsolete ones."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from ray.tune import Callback

from rlplat.checkpoints import (
    RESOLVED_EXPERIMENT,
    GreedyEvaluation,
    checkpoint_info_from_result,
    obsolete_checkpoints,
    trials_in,
)
from rlplat.experiment.load import trial_experiment
from rlplat.experiment.yaml_io import dump_yaml
from rlplat.seams.tune import forget_checkpoint, newest_state, resume_points
from rlplat.util.atomic import write_atomic


def checkpoint_recorder(
    score_metric: str, mode: str, keep: int | None, prune_while_running: bool = True
):  # -> ray.tune.Callback
    """A Tune callback that completes every checkpoint directory Tune writes, and keeps the
    ``keep`` best of each trial (Tune itself is told to keep them all).

    It adds the trial's experiment (a checkpoint copied away from its run still says how to
    rebuild its environment, with the values a search chose) and ``rlplat_checkpoint.json`` (what
    the run reported at that point, used to pick the best checkpoint and to compare with
    ``rlplat eval``), with the greedy evaluation the trial wrote into the checkpoint.

    Why rlplat deletes checkpoints rather than Tune: Tune deletes a trial's older checkpoint as
    soon as a newer one is written, but saves the experiment state (which checkpoint each trial
    resumes from) only every few seconds, and a full disk can stop it saving at all. A run killed
    in between resumes from a deleted checkpoint and the trial fails. Here a checkpoint is deleted
    only once the state saved in the run directory resumes its trial from a newer one (states are
    saved in order, so no later state goes back to it). Population-based training restores trials
    from other trials' checkpoints long after they were written: ``prune_while_running=False``
    keeps every checkpoint until the run ends (``prune_checkpoints``).
    """

    class RecordCheckpoints(Callback):
        def __init__(self) -> None:
            self._obsolete: dict[Path, Any] = {}  # checkpoint -> its Tune trial
            self._state_seen: tuple[Path, float] | None = None

        def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info):
            target = Path(checkpoint.path)
            if not target.is_dir():
                return
            complete_checkpoint(target, trial.config, trial.last_result or {}, score_metric, mode)
            if prune_while_running:
                for old in obsolete_checkpoints(target.parent, keep):
                    self._obsolete[old] = trial

        def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
            if not self._obsolete:
                return
            run_dir = next(iter(self._obsolete)).parent.parent
            newest = newest_state(run_dir)
            state = (newest, newest.stat().st_mtime) if newest else None
            if state is None or state == self._state_seen:
                return
            self._state_seen = state
            _delete_superseded(self._obsolete, run_dir)

    return RecordCheckpoints()


def complete_checkpoint(
    checkpoint: Path,
    experiment: dict[str, Any],
    last_result: dict[str, Any],
    score_metric: str,
    mode: str,
) -> None:
    """Add rlplat's files to a checkpoint the trial just wrote: its experiment, and what the
    run reported at that point with the greedy evaluation the trial wrote into it."""
    write_atomic(checkpoint / RESOLVED_EXPERIMENT, dump_yaml(trial_experiment(experiment)))
    evaluation = GreedyEvaluation.read(checkpoint)
    checkpoint_info_from_result(last_result, score_metric, mode, evaluation).write(checkpoint)


def _delete_superseded(obsolete: dict[Path, Any], run_dir: Path) -> None:
    """Delete each of the ``obsolete`` checkpoints (by its Tune trial) whose trial the state saved
    in ``run_dir`` resumes from a newer checkpoint; the others stay listed."""
    points = resume_points(run_dir) or {}
    for checkpoint, trial in list(obsolete.items()):
        point = points.get(checkpoint.parent.name)
        if point is not None and point.name > checkpoint.name:
            shutil.rmtree(checkpoint, ignore_errors=True)
            forget_checkpoint(trial, checkpoint)
            del obsolete[checkpoint]


def prune_checkpoints(run_dir: Path, keep: int | None) -> None:
    """Delete every trial's obsolete checkpoints once the run has stopped, except the ones Tune's
    saved state resumes from (older than the newest when a full disk stopped it saving)."""
    points = resume_points(run_dir)
    if points is None:
        return  # which checkpoint a resume needs is unknown: keep them all
    for trial in trials_in(run_dir):
        for checkpoint in obsolete_checkpoints(trial, keep):
            if checkpoint not in points.values():
                shutil.rmtree(checkpoint, ignore_errors=True)
