"""Every read and edit of Ray Tune's private state, in one place.

Tune saves its controller and each trial's checkpoint list in the run directory
(``experiment_state-*.json``) and keeps them in objects whose attributes start with ``_``. rlplat
reads them to know which checkpoint a ``--resume`` continues from, and edits them where Tune's
behaviour would lose work or grow without bound. Ray is pinned to one minor version
(pyproject.toml); a Ray upgrade is checked here first.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ray.air._internal import usage as air_usage
from ray.train._internal import storage as train_storage
from ray.tune.experiment.trial import _TrainingRunMetadata
from ray.tune.logger import CSVLoggerCallback
from ray.tune.schedulers import HyperBandForBOHB as _TuneHyperBandForBOHB
from ray.tune.schedulers import HyperBandScheduler as _TuneHyperBandScheduler

from rlplat.util.atomic import write_atomic

__all__ = [
    "CSVLoggerHooks",
    "HyperBandForBOHB",
    "HyperBandScheduler",
    "RestoreHook",
    "drop_stale_decisions",
    "failed_in_this_process",
    "fitting",
    "forget_checkpoint",
    "newest_state",
    "resume_points",
    "set_tune_switches",
    "trial_storage_path",
]

_EXPERIMENT_STATES = "experiment_state-*.json"  # TuneController.CKPT_FILE_TMPL, any session


def newest_state(run_dir: Path) -> Path | None:
    """The experiment state file Tune restores a run from: the newest by name (one per session).

    Tune's public API restores or reads a run's state (``Tuner.restore``, ``ExperimentAnalysis``)
    but does not say which file that is; it finds it by the name pattern of its controller's
    ``CKPT_FILE_TMPL`` (in the private ``_find_newest_experiment_checkpoint``)."""
    return max(run_dir.glob(_EXPERIMENT_STATES), default=None)


def resume_points(run_dir: Path) -> dict[str, Path] | None:
    """Each trial's checkpoint that ``--resume`` restores: the latest one in Tune's newest saved
    state in the run directory (by trial directory name; a trial without one starts over).
    None when that state cannot be read. Tune reads its saved trials with the private
    ``_TrainingRunMetadata``; the public ``ExperimentAnalysis`` loads every result instead."""
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
    experiment state it saves every second: a state file growing by megabytes on long runs.
    The list is the checkpoint manager's private ``_checkpoint_results``."""
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
    """The trials of a finished ``Tuner.fit()`` that failed in this process, by directory name
    (each with its local staging directory, ``trial.local_path``): when the run directory's
    disk failed, the state and error reports saved there are older than this.

    ``ResultGrid``'s public API does not serve: a ``Result``'s ``error`` is read back from the run
    directory (None when its disk failed), and it has no trial status or staging directory;
    ``grid.num_errors`` counts the failed trials without saying which. Tune's public
    ``Callback.on_trial_error`` would see them, but a resumed run's callbacks are the ones
    pickled when it started. The trial objects are in the grid's private
    ``_experiment_analysis``."""
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


def trial_storage_path(trainable: Any) -> str:
    """Where Tune stores a trainable's trial: its checkpoints and results in the run directory
    (``Trainable._storage.trial_fs_path``; the public ``trial_dir`` is the trial's local
    staging directory, which is not where its checkpoints end up)."""
    return trainable._storage.trial_fs_path


def set_tune_switches() -> None:
    """Tune's legacy console output and no error for a result without the run's metric, in this
    process, unless the user chose otherwise.

    Tune's legacy output engine is the one ``verbose=0`` silences: its new one would print its
    own progress tables between rlplat's. A run's metric is often the windowed return, which appears
    once the first episode ends; until then Tune would fail the trial for a result without it,
    and with the check off a scheduler waits. Tune takes neither as a parameter: they are
    environment variables it reads while it runs (``RAY_AIR_NEW_OUTPUT``,
    ``TUNE_DISABLE_STRICT_METRIC_CHECKING``), which a Ray upgrade can drop without a word."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")


@contextmanager
def fitting() -> Iterator[None]:
    """Around ``Tuner.fit()``: Tune as it is, less one cost and one race.

    Tune's usage telemetry imports every tracker integration it knows (MLflow, W&B, Comet, Aim:
    about 1.4 s) only to count the run's callbacks by class name; that count is not taken.

    The race: Tune's copy of its staging directory into the run directory now writes the
    experiment state last (:func:`_upload_state_last`).

    Private names, swapped for the block: ``ray.air._internal.usage.tag_callbacks`` and
    ``ray.train._internal.storage._FilesystemSyncer._sync_up_command``.
    """
    tag_callbacks = air_usage.tag_callbacks
    upload = train_storage._FilesystemSyncer._sync_up_command
    air_usage.tag_callbacks = _no_usage_tags
    train_storage._FilesystemSyncer._sync_up_command = _sync_up_state_last
    try:
        yield
    finally:
        air_usage.tag_callbacks = tag_callbacks
        train_storage._FilesystemSyncer._sync_up_command = upload


def _no_usage_tags(callbacks: Any) -> bool:
    return False


def _sync_up_state_last(
    syncer: Any, local_path: str, uri: str, exclude: list[str] | None = None
) -> tuple[Any, dict]:
    return _upload_state_last, {
        "local_path": local_path,
        "fs": syncer.storage_filesystem,
        "fs_path": uri,
        "exclude": exclude,
    }


def _upload_state_last(
    local_path: str, fs: Any, fs_path: str, exclude: list[str] | None = None
) -> None:
    """Tune's upload of a staging directory, with the experiment state after everything else.

    Tune copies the files of one upload in parallel, in no set order. The state names each
    trial's latest checkpoint; copied before the trial's result.json, a kill between the two
    left a run whose resumed log lacked the iterations up to that checkpoint."""
    states = sorted(Path(local_path).glob(_EXPERIMENT_STATES)) if os.path.isdir(local_path) else []
    if not states:
        train_storage._upload_to_fs_path(local_path, fs, fs_path, exclude)
        return
    train_storage._upload_to_fs_path(
        local_path, fs, fs_path, [*(exclude or []), _EXPERIMENT_STATES]
    )
    for state in states:
        train_storage._upload_to_fs_path(str(state), fs, f"{fs_path}/{state.name}")


class RestoreHook:
    """Logger-callback mixin (before Tune's JSON or CSV logger): ``restored_from_run_dir``
    runs just after Tune copied a restarted trial's file back from the run directory, before it
    appends to it. Tune does the copy in the private ``_restore_from_remote``, with no hook."""

    def _restore_from_remote(self, file_name: str, trial: Any) -> None:
        super()._restore_from_remote(file_name, trial)  # type: ignore[misc]
        self.restored_from_run_dir(file_name, trial)

    def restored_from_run_dir(self, file_name: str, trial: Any) -> None:
        """``file_name`` of ``trial`` is back in its local directory; nothing by default."""


class CSVLoggerHooks(CSVLoggerCallback):
    """Tune's progress.csv logger with its per-trial file and writer under public names:
    Tune keeps them in ``_trial_files``, ``_trial_csv`` and ``_trial_continue`` and opens them
    in ``_setup_trial``, all private."""

    def appends_without_header(self, trial: Any) -> bool:
        """Whether the logger is about to append rows to a restarted trial's file without a
        header (its writer is made from the first row's columns)."""
        if trial not in self._trial_files:
            self._setup_trial(trial)
        return self._trial_csv[trial] is None and self._trial_continue[trial]

    def reopen(self, trial: Any, path: Path, fields: Callable[[Path], list[str]]) -> None:
        """Close the trial's file, let ``fields(path)`` rewrite it and name its columns, and
        append to it from now on with a writer of those columns."""
        self._trial_files[trial].close()
        columns = fields(path)
        self._trial_files[trial] = path.open("a", newline="")
        self._trial_csv[trial] = csv.DictWriter(self._trial_files[trial], columns)
