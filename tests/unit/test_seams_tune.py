"""Canaries of rlplat/seams/tune.py: Tune's private state, controller, loggers and storage
that its seams rely on."""

from __future__ import annotations

import importlib
import inspect

from ray.air.execution._internal import RayActorManager
from ray.train._internal import storage
from ray.tune import Trainable
from ray.tune.execution import tune_controller
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
    has(SEAM + "failed_in_this_process", ResultGrid, "_experiment_analysis")


def test_hyper_band_scheduler():
    seam = SEAM + "HyperBandScheduler"
    has(seam, TuneController, "_mark_trial_to_checkpoint", params=("trial",))
    has(seam, HyperBandScheduler, "on_trial_remove", params=("tune_controller", "trial"))


def test_hyper_band_for_bohb():
    from ray.tune.schedulers import HyperBandForBOHB

    seam = SEAM + "HyperBandForBOHB"
    has(seam, TuneController, "_mark_trial_to_checkpoint", params=("trial",))
    has(seam, HyperBandForBOHB, "on_trial_remove", params=("tune_controller", "trial"))


def test_training_time_s():
    has(SEAM + "training_time_s", Trainable, "_time_total")


def test_trial_storage_path():
    seam = SEAM + "trial_storage_path"
    has(seam, Trainable, "_storage")
    has(seam, storage.StorageContext, "trial_fs_path")


def test_fitting():
    seam = SEAM + "fitting"
    has(seam, tune_controller, "RayActorManager")
    holds(
        seam,
        "RayActorManager(" in inspect.getsource(TuneController.__init__),
        "Tune's controller builds its actor manager from the module's RayActorManager",
    )
    has(seam, RayActorManager, "_try_kill_actor", params=())
    for name in ("_live_actors_to_kill", "_live_actors_to_ray_actors_resources"):
        has(seam, RayActorManager, name)
    has(seam, RayActorManager, "_cleanup_actor_futures", params=("tracked_actor",))
    has(seam, RayActorManager, "_actor_stop_resolved", params=("tracked_actor",))
    usage = importlib.import_module("ray.air._internal.usage")
    has(seam, usage, "tag_callbacks", params=("callbacks",))
    has(seam, storage, "_FilesystemSyncer")
    has(
        seam, storage._FilesystemSyncer, "_sync_up_command", params=("local_path", "uri", "exclude")
    )
    has(seam, storage, "_upload_to_fs_path", params=("local_path", "fs", "fs_path", "exclude"))


def test_restore_hook():
    seam = SEAM + "RestoreHook"
    for logger in (JsonLoggerCallback, CSVLoggerCallback):
        has(seam, logger, "_restore_from_remote", params=("file_name", "trial"))


def test_csv_logger_hooks():
    seam = SEAM + "CSVLoggerHooks"
    for name in ("_trial_files", "_trial_csv", "_trial_continue"):
        has(seam, CSVLoggerCallback, name)
    has(seam, CSVLoggerCallback, "_setup_trial", params=("trial",))
