"""Canaries of rlplat/seams/tune.py: Tune's private state, controller, loggers and storage
that its seams rely on."""

from __future__ import annotations

import importlib
import inspect

from ray.train._internal import storage
from ray.tune import Trainable
from ray.tune.execution.tune_controller import TuneController
from ray.tune.experiment.trial import _TrainingRunMetadata
from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
from ray.tune.result_grid import ResultGrid
from ray.tune.schedulers import HyperBandScheduler

from tests.seam_canary import has, holds

SEAM = "rlplat.seams.tune."


def test_resume_points():
    seam = SEAM + "resume_points"
    has(seam, _TrainingRunMetadata, "from_json_state", params=("json_state",))
    has(seam, _TrainingRunMetadata, "checkpoint_manager")


def test_newest_state():
    from rlplat.seams.tune import _EXPERIMENT_STATES

    seam = SEAM + "newest_state"
    template = has(seam, TuneController, "CKPT_FILE_TMPL")
    holds(
        seam,
        template.format("*") == _EXPERIMENT_STATES,
        f"Tune names its saved experiment states {_EXPERIMENT_STATES}",
    )
    state = importlib.import_module("ray.tune.execution.experiment_state")
    newest = has(seam, state, "_find_newest_experiment_checkpoint", params=("experiment_path",))
    holds(
        seam,
        "max(" in inspect.getsource(newest),
        "Tune restores from the newest state by name",
    )


def test_forget_checkpoint():
    from ray.train._internal.checkpoint_manager import _CheckpointManager

    seam = SEAM + "forget_checkpoint"
    has(seam, _CheckpointManager, "_checkpoint_results")
    has(seam, _TrainingRunMetadata, "invalidate_cache", params=())


def test_drop_stale_decisions():
    seam = SEAM + "drop_stale_decisions"
    source = inspect.getsource(TuneController)
    for key in ("_cached_trial_decisions", "_queued_trial_decisions"):
        holds(seam, f"self.{key}" in source, f"Tune's controller saves {key} in its state")


def test_failed_in_this_process():
    from ray.tune.experiment import Trial

    seam = SEAM + "failed_in_this_process"
    has(seam, ResultGrid, "_experiment_analysis")
    holds(seam, Trial.ERROR == "ERROR", "a failed trial's status is 'ERROR'")
    holds(seam, isinstance(Trial.local_path, property), "a trial has its staging local_path")


def test_hyper_band_scheduler():
    seam = SEAM + "HyperBandScheduler"
    has(seam, TuneController, "_mark_trial_to_checkpoint", params=("trial",))
    has(seam, HyperBandScheduler, "on_trial_remove", params=("tune_controller", "trial"))


def test_hyper_band_for_bohb():
    from ray.tune.schedulers import HyperBandForBOHB

    seam = SEAM + "HyperBandForBOHB"
    has(seam, TuneController, "_mark_trial_to_checkpoint", params=("trial",))
    has(seam, HyperBandForBOHB, "on_trial_remove", params=("tune_controller", "trial"))


def test_trial_storage_path():
    seam = SEAM + "trial_storage_path"
    has(seam, Trainable, "_storage")
    has(seam, storage.StorageContext, "trial_fs_path")


def test_fitting():
    seam = SEAM + "fitting"
    usage = importlib.import_module("ray.air._internal.usage")
    has(seam, usage, "tag_callbacks", params=("callbacks",))
    has(seam, storage, "_FilesystemSyncer")
    has(
        seam, storage._FilesystemSyncer, "_sync_up_command", params=("local_path", "uri", "exclude")
    )
    has(seam, storage, "_upload_to_fs_path", params=("local_path", "fs", "fs_path", "exclude"))


def test_set_tune_switches():
    seam = SEAM + "set_tune_switches"
    output = inspect.getsource(importlib.import_module("ray.tune.experimental.output"))
    holds(
        seam,
        'os.environ.get("RAY_AIR_NEW_OUTPUT", "1") == "0"' in output,
        "RAY_AIR_NEW_OUTPUT=0 turns Tune's new output engine off",
    )
    holds(
        seam,
        '"TUNE_DISABLE_STRICT_METRIC_CHECKING"' in inspect.getsource(TuneController),
        "Tune's controller reads TUNE_DISABLE_STRICT_METRIC_CHECKING",
    )


def test_restore_hook():
    seam = SEAM + "RestoreHook"
    for logger in (JsonLoggerCallback, CSVLoggerCallback):
        has(seam, logger, "_restore_from_remote", params=("file_name", "trial"))


def test_csv_logger_hooks():
    seam = SEAM + "CSVLoggerHooks"
    for name in ("_trial_files", "_trial_csv", "_trial_continue"):
        has(seam, CSVLoggerCallback, name)
    has(seam, CSVLoggerCallback, "_setup_trial", params=("trial",))
