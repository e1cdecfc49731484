"""Every read and edit of Ray Tune's private state, in one place.

Tune saves its controller and each trial's checkpoint list in the run directory
(``experiment_state-*.json``) and keeps them in objects whose attributes start with ``_``. rlplat
reads them to know which checkpoint a ``--resume`` continues from, and edits them where Tune's
behaviour would lose work or grow without bound. Ray is pinned to one minor version
(pyproject.toml); a Ray upgrade is checked here first.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ray.tune.experiment.trial import _TrainingRunMetadata
from ray.tune.schedulers import HyperBandForBOHB as _TuneHyperBandForBOHB
from ray.tune.schedulers import HyperBandScheduler as _TuneHyperBandScheduler

from rlplat.util.atomic import write_atomic


def newest_state(run_dir: Path) -> Path | None:
    """The experiment state file Tune restores a run from: the newest by name (one per session)."""
    return max(run_dir.glob("experiment_state-*.json"), default=None)


def resume_points(run_dir: Path) -> dict[str, Path] | None:
    """Each trial's checkpoint that ``--resume`` restores: the latest one in Tune's newest saved
    state in the run directory (by trial directory name; a trial without one starts over).
    None when that state cannot be read."""
    state = newest_state(run_dir)
    if state is None:
        return {}
    points = {}
    try:
        for _, metadata in json.loads(state.read_text())["trial_data"]:
            manager = _TrainingRunMetadata.from_json_state(metadata).checkpoint_manager
            if manager.latest_checkpoint_result is not None:
                path = Path(manager.latest_checkpoint_result.checkpoint.path)
                points[path.parent.name] = path
    except Exception:  # noqa: BLE001 - a damaged or foreign state: nothing is known
        return None
    return points


def forget_checkpoint(trial: Any, checkpoint: Path) -> None:
    """Drop a deleted checkpoint from Tune's list of the trial's checkpoints. Told to keep them
    all, Tune would keep every one, with the full result it was taken at (~40 KB each), in the
    experiment state it saves every second: a state file growing by megabytes on long runs."""
    manager = trial.run_metadata.checkpoint_manager
    kept = [r for r in manager._checkpoint_results if Path(r.checkpoint.path) != checkpoint]
    manager._checkpoint_results = kept
    trial.run_metadata.invalidate_cache()


def drop_stale_decisions(run_dir: Path) -> None:
    """Clear the decisions Tune's saved state holds for saves in flight when it was taken.

    Tune saves its controller with them (``_cached_trial_decisions``: what to do with a trial
    once its checkpoint is written). A trial that failed while saving left "STOP" there; the
    resumed run applied it to the first checkpoint of the retried trial, which then ended as
    finished one iteration after it was resumed. A new process has no save in flight.
    """

    state_file = newest_state(run_dir)
    if state_file is None:
        return
    state = json.loads(state_file.read_text())
    runner = state.get("runner_data", {})
    stale = ("_cached_trial_decisions", "_queued_trial_decisions")
    if any(runner.get(key) for key in stale):
        runner.update({key: {} for key in stale})
        write_atomic(state_file, json.dumps(state))


def failed_in_this_process(grid: Any) -> dict[str, Any]:
    """The trials of a finished ``Tuner.fit()`` that failed in this process, by directory name:
    when the run directory's disk failed, the state saved there is older than this."""
    return {Path(t.path).name: t for t in grid._experiment_analysis.trials if t.status == "ERROR"}


class _RecordStopsOfPausedTrials:
    """Tune's HyperBand schedulers stop the trials a bracket drops while those are paused; Tune
    then sets them TERMINATED without marking them for its next state save, so a save made while
    they were paused keeps saying PAUSED for good (the summary reads it, and a resume would
    restart them). Marking the trial when the scheduler removes it makes every later save right.
    """

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        super().on_trial_remove(tune_controller, trial)  # type: ignore[misc]
        tune_controller._mark_trial_to_checkpoint(trial)


class HyperBandScheduler(_RecordStopsOfPausedTrials, _TuneHyperBandScheduler):
    """Tune's HyperBandScheduler whose stopped paused trials are saved as stopped."""


class HyperBandForBOHB(_RecordStopsOfPausedTrials, _TuneHyperBandForBOHB):
    """Tune's HyperBandForBOHB whose stopped paused trials are saved as stopped."""


def training_time_s(trainable: Any) -> float:
    """Seconds a Tune trainable spent in its finished iterations (the ``time_total_s`` of its
    last result, a resumed trial's earlier sessions included)."""
    return float(trainable._time_total)
