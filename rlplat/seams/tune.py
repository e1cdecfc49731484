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
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray
import torch
from ray.air._internal import usage as air_usage
from ray.air.execution._internal import RayActorManager
from ray.air.execution.resources import AcquiredResources, ResourceManager, ResourceRequest
from ray.exceptions import RayTaskError
from ray.train._internal import storage as train_storage
from ray.tune.execution import tune_controller
from ray.tune.experiment.trial import _TrainingRunMetadata
from ray.tune.logger import CSVLoggerCallback
from ray.tune.schedulers import HyperBandForBOHB as _TuneHyperBandForBOHB
from ray.tune.schedulers import HyperBandScheduler as _TuneHyperBandScheduler

from rlplat.util.atomic import write_atomic
from rlplat.util.generators import GeneratorStates, swapped

__all__ = [
    "CSVLoggerHooks",
    "HyperBandForBOHB",
    "HyperBandScheduler",
    "RestoreHook",
    "StopAtOnce",
    "drop_stale_decisions",
    "failed_in_this_process",
    "fitting",
    "forget_checkpoint",
    "newest_state",
    "resume_points",
    "set_tune_switches",
    "training_time_s",
    "trial_call_under_way",
    "trial_storage_path",
    "trials_run_in_this_process",
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


def training_time_s(trainable: Any) -> float:
    """Seconds a Tune trainable spent in its finished iterations (the ``time_total_s`` of its
    last result, a resumed trial's earlier sessions included): ``Trainable._time_total``, which
    has no public getter."""
    return float(trainable._time_total)


# Tune's trainable changes its process's working directory to the trial directory; the command's
# own process keeps the directory the user started it in.
_CHDIR_VARIABLE = "RAY_CHDIR_TO_TRIAL_DIR"


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
def fitting(*, trials_in_this_process: bool) -> Iterator[None]:
    """Around ``Tuner.fit()``: Tune as it is, less two costs and one race.

    Tune's usage telemetry imports every tracker integration it knows (MLflow, W&B, Comet, Aim:
    about 1.4 s) only to count the run's callbacks by class name; that count is not taken.

    ``trials_in_this_process``: Tune runs its trials' trainables in this process instead of one
    Ray actor each. Everything else is Tune's own: the controller, its callbacks and loggers,
    checkpoints, the experiment state ``--resume`` reads. Tune's actor manager builds the
    trainable here and reserves nothing (the trial has the machine; its env runners and learners
    are Ray actors scheduled as RLlib asks), and each "remote" call runs at once, its answer (or
    error) handed to Tune as a ready object ref. For one trial on one machine this saves a
    process that imports RLlib and torch again, and the placement group's round trips.

    The race: Tune's copy of its staging directory into the run directory now writes the
    experiment state last (:func:`_upload_state_last`).

    Private names, swapped for the block: ``tune_controller.RayActorManager`` (Tune builds its
    actor manager there, with no option for another), ``ray.air._internal.usage.tag_callbacks``
    and ``ray.train._internal.storage._FilesystemSyncer._sync_up_command``; the stand-in actor
    manager overrides ``RayActorManager._try_kill_actor``.
    """
    manager, tag_callbacks = tune_controller.RayActorManager, air_usage.tag_callbacks
    upload = train_storage._FilesystemSyncer._sync_up_command
    air_usage.tag_callbacks = _no_usage_tags
    train_storage._FilesystemSyncer._sync_up_command = _sync_up_state_last
    if trials_in_this_process:
        tune_controller.RayActorManager = _InProcessActorManager
    try:
        yield
    finally:
        _iterations_held.clear()
        tune_controller.RayActorManager, air_usage.tag_callbacks = manager, tag_callbacks
        train_storage._FilesystemSyncer._sync_up_command = upload


def trials_run_in_this_process() -> bool:
    """Whether the fit under way runs its trials in this process (:func:`fitting`).

    Tune has no such option, so none says it: :func:`fitting` swaps the actor manager Tune's
    controller builds (``tune_controller.RayActorManager``), and this reads the swap."""
    return tune_controller.RayActorManager is _InProcessActorManager


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


class _InProcessActorManager(RayActorManager):
    def __init__(self, resource_manager: ResourceManager):
        super().__init__(resource_manager=_NothingReserved())

    def _try_kill_actor(self) -> bool:
        # Tune's parent calls ray.kill, which takes only real actor handles.
        if not self._live_actors_to_kill:
            return False
        tracked_actor = self._live_actors_to_kill.pop()
        handle, _ = self._live_actors_to_ray_actors_resources[tracked_actor]
        handle.release()
        self._cleanup_actor_futures(tracked_actor)
        self._actor_stop_resolved(tracked_actor)
        return True


class _NothingReserved(ResourceManager):
    """Every request is ready at once: the in-process trial uses the machine as it is."""

    def __init__(self) -> None:
        self._requested: list[ResourceRequest] = []

    def request_resources(self, resource_request: ResourceRequest) -> None:
        self._requested.append(resource_request)

    def cancel_resource_request(self, resource_request: ResourceRequest) -> None:
        self._requested.remove(resource_request)

    def has_resources_ready(self, resource_request: ResourceRequest) -> bool:
        return resource_request in self._requested

    def acquire_resources(self, resource_request: ResourceRequest) -> AcquiredResources | None:
        if resource_request not in self._requested:
            return None
        self._requested.remove(resource_request)
        return _InThisProcess(resource_request=resource_request)

    def free_resources(self, acquired_resource: AcquiredResources) -> None:
        pass

    def clear(self) -> None:
        self._requested = []


class _InThisProcess(AcquiredResources):
    def annotate_remote_entities(self, entities: list[Any]) -> list[Any]:
        cpus = self.resource_request.head_cpus
        return [_InProcessClass(entity, max(1, int(cpus))) for entity in entities]


class _InProcessClass:
    """Stands in for the Ray actor class Tune starts a trial with: ``remote()`` builds the
    trainable here."""

    def __init__(self, actor_class: Any, threads: int):
        self._cls = actor_class.__ray_metadata__.modified_class.__ray_actor_class__
        self._threads = threads

    def remote(self, **kwargs: Any) -> _InProcessActor:
        return _InProcessActor(self._cls, kwargs, self._threads)


class _InProcessActor:
    """Stands in for a trial actor's handle: ``handle.method.remote(...)`` calls the method of
    the trainable in this process and returns its answer as a ready object ref (a failure as a
    ref that raises, as Ray's would). As between processes, arguments and answers are copied
    through Ray's object store, and the trainable draws from generators of its own (the
    callbacks of this process draw too: a training video's episode, say). torch runs on as many
    threads as the trial has CPUs, as Ray sets them for a trial actor (``OMP_NUM_THREADS``)."""

    def __init__(self, cls: type, kwargs: dict[str, Any], threads: int):
        self._instance: Any = None
        self._start_error: ray.ObjectRef | None = None
        self.generators = GeneratorStates.capture()
        self.threads = threads
        chdir = os.environ.get(_CHDIR_VARIABLE)
        os.environ[_CHDIR_VARIABLE] = "0"
        try:
            with swapped(self.generators), _torch_threads(threads):
                self._instance = cls(**_copied(kwargs))
        except Exception as exc:  # noqa: BLE001 - Tune reports it as the trial's failure
            self._start_error = _failure(cls.__name__, exc)
        finally:
            if chdir is None:
                os.environ.pop(_CHDIR_VARIABLE)
            else:
                os.environ[_CHDIR_VARIABLE] = chdir

    def __getattr__(self, name: str) -> _InProcessMethod:
        if name == "__ray_ready__":
            return _InProcessMethod(self, name, lambda: True)
        if name == "__ray_terminate__":
            return _InProcessMethod(self, name, self.release)
        if self._instance is None:  # it failed to start, or was released: nothing to call
            return _InProcessMethod(self, name, lambda *args, **kwargs: None)
        return _InProcessMethod(self, name, getattr(self._instance, name))

    def release(self) -> None:
        self._instance = None


class _InProcessMethod:
    def __init__(self, actor: _InProcessActor, name: str, method: Any):
        self._actor = actor
        self._name = name
        self._method = method

    def remote(self, *args: Any, **kwargs: Any) -> ray.ObjectRef:
        if self._actor._start_error is not None and self._name != "__ray_terminate__":
            return self._actor._start_error
        if self._name == "train" and _iterations_held:
            return ray.ObjectRef.from_random()  # as an iteration under way; see hold_iterations
        try:
            args, kwargs = _copied((args, kwargs))
            with swapped(self._actor.generators), _torch_threads(self._actor.threads):
                _calls_under_way.append(self._name)
                try:
                    answer = self._method(*args, **kwargs)
                finally:
                    _calls_under_way.pop()
            return ray.put(answer)
        except StopAtOnce:
            # Tune sees the call as still running, as a trial actor's unfinished iteration.
            return ray.ObjectRef.from_random()
        except Exception as exc:  # noqa: BLE001 - Tune handles it as a failed actor task
            return _failure(self._name, exc)


_calls_under_way: list[str] = []  # the in-process trainable's methods running now
_iterations_held: list[bool] = []  # hold_iterations() was called in the fit under way


def hold_iterations() -> None:
    """From now on, an in-process trial starts no new iteration (the stop that waits for a final
    checkpoint, :class:`rlplat.callbacks.interrupt.GracefulStop`).

    After a result that asks for a checkpoint, Tune's controller schedules the save and then the
    next ``train`` call before it hears of the save. A trial actor runs that iteration while
    Tune stops the run, and it is abandoned; an in-process "remote" call runs at once, so the
    stop would wait for a whole further iteration (minutes, for a slow off-policy one). Held, the
    call is answered as an iteration under way that never ends, as after :class:`StopAtOnce`."""
    _iterations_held.append(True)


def trial_call_under_way() -> bool:
    """Whether this process is inside a call of an in-process trainable (an iteration, a save).

    With trials in this process (:func:`fitting`) Tune's "remote" calls of the trainable (through
    its private ``RayActorManager._schedule_tracked_actor_task``) run in Tune's own loop; no
    public API says that loop is inside one."""
    return bool(_calls_under_way)


class StopAtOnce(BaseException):
    """Raised in the main thread (by a signal handler) to end an in-process trial's call at
    once: Tune then stops the run as it stops one whose trial actor is mid-iteration.

    A trial actor's call can be left unfinished; an in-process one cannot, and Tune has no
    public way to abandon it. The stand-in handle of :func:`fitting` answers the call with an
    object ref that never becomes ready (``ray.ObjectRef.from_random``), which Tune's private
    actor manager keeps waiting on as on a running iteration."""


@contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    own = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(own)


def _copied(value: Any) -> Any:
    return ray.get(ray.put(value))


def _failure(function_name: str, exc: Exception) -> ray.ObjectRef:
    """A ready ref that raises ``exc`` (as Ray's RayTaskError, with its traceback) on get."""
    trace = "".join(traceback.format_exception(exc))
    try:
        return ray.put(RayTaskError(function_name, trace, exc))
    except Exception:  # noqa: BLE001 - an exception that does not pickle: its text stays
        return ray.put(RayTaskError(function_name, trace, RuntimeError(str(exc))))


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
