"""One trial in the command's process: RLlib's ``Algorithm`` trained in a plain loop, no Tune.

The common case (one trial on one machine: README's main job, the Python API) needs nothing of
Tune's controller. The loop builds the algorithm, calls ``train()`` until the stop condition,
writes a checkpoint when one is due, and tells the run's observers of each step. It writes the
trial directory a Tune trial writes (``params.json``, ``result.json``, ``progress.csv``, the
TensorBoard files, ``checkpoint_NNNNNN``), so every reader of runs reads it the same way, and
nothing of Tune's own state: ``--resume`` continues from the trial's newest complete checkpoint.

Signals: the first Ctrl-C or SIGTERM ends the run after the current iteration with a checkpoint;
a second one stops at once (``rlplat.callbacks.interrupt.LoopStopSignals``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from ray import cloudpickle
from ray.tune.utils import flatten_dict
from ray.tune.utils.util import SafeFallbackEncoder
from rich.console import Console

from rlplat.callbacks.checkpoints import complete_checkpoint
from rlplat.callbacks.history import PROGRESS_CSV, trim_trial_history, widen_progress
from rlplat.callbacks.interrupt import LoopStopSignals, StopNow
from rlplat.callbacks.observers import FAILED, FINISHED, Observer, ResumePoint, TrialView
from rlplat.checkpoints import (
    RESULTS_JSON,
    SUMMARY,
    CheckpointInfo,
    best_and_last,
    obsolete_checkpoints,
    read_results,
)
from rlplat.experiment.load import trial_experiment
from rlplat.metrics import ITERATION, TIME_TOTAL, finite, lookup
from rlplat.prepare import PreparedRun, trial_config
from rlplat.prepare.run_spec import trial_resources
from rlplat.run.summary import TrialOutcome
from rlplat.run.trials import trainable_for
from rlplat.util.atomic import remove_partial_files
from rlplat.util.generators import GeneratorStates, swapped

TRIAL = "trial_00000"  # the directory name Tune gives a run's first trial
PARAMS_JSON, PARAMS_PICKLE = "params.json", "params.pkl"
ERROR_REPORT = "error.txt"
CHECKPOINT_PREFIX = "checkpoint_"


@dataclass(frozen=True)
class LoopSettings:
    """What the loop needs of the experiment beyond building the algorithm."""

    stop: dict[str, float]  # metric path -> value that ends the run once reached
    checkpoint_every: int | None
    checkpoint_at_end: bool
    keep: int | None
    score_metric: str
    mode: str
    watchdog_s: float | None


def settings_of(run: PreparedRun, stop: dict[str, float]) -> LoopSettings:
    exp = run.experiment
    return LoopSettings(
        stop=stop,
        checkpoint_every=exp.checkpoint.every,
        checkpoint_at_end=exp.checkpoint.at_end,
        keep=exp.checkpoint.keep,
        score_metric=exp.score_metric(),
        mode=exp.checkpoint.mode,
        watchdog_s=exp.watchdog_s,
    )


def ended_trial(run_dir: Path, retry_errored: bool) -> TrialOutcome | None:
    """A loop run's trial as it ended, when resuming has nothing to train: it finished (its last
    summary says so), or it failed (its error.txt, which a retry removes) and
    ``--retry-errored`` was not given."""
    trial_dir = run_dir / TRIAL
    report = trial_dir / ERROR_REPORT
    try:
        [trial] = json.loads((run_dir / SUMMARY).read_text())["trials"]
        finished = trial["status"] == "finished"
    except (OSError, ValueError, KeyError, TypeError):
        finished = False  # no summary (a killed run) or one unread
    failed = report.is_file() and not retry_errored
    if not (finished or failed):
        return None
    results = read_results(trial_dir)
    return TrialOutcome(
        path=trial_dir,
        status="finished" if finished else "error",
        last_result=results[-1] if results else {},
        experiment=trial_experiment(json.loads((trial_dir / PARAMS_JSON).read_text())),
        error=None if finished else report.read_text(),
    )


def resume_point_in(trial_dir: Path) -> tuple[ResumePoint | None, dict[str, Any]]:
    """The trial's newest complete checkpoint (None: it has none) and the result it logged at
    that iteration (its training seconds, its last result), from one read of result.json."""
    newest = best_and_last(trial_dir)[1]
    info = (CheckpointInfo.read(newest) if newest else None) or CheckpointInfo()
    iteration = info.iteration or 0
    rows = [row for row in read_results(trial_dir) if row.get(ITERATION) == iteration]
    point = newest and ResumePoint(newest, iteration, info.env_steps or 0)
    return point, rows[-1] if rows else {}


def reached(result: dict[str, Any], stop: dict[str, float]) -> bool:
    """Whether the result ends the run: RLlib or rlplat said done, or a stop value is reached
    (a metric not reported yet stops nothing, as with Tune's strict metric check off)."""
    if result.get("done"):
        return True
    for path, value in stop.items():
        found = finite(lookup(result, path))
        if found is not None and found >= value:
            return True
    return False


class TrialLog(Observer):
    """``result.json`` (one JSON line per result) and ``progress.csv`` (the flattened result),
    appended to as Tune's loggers do; a resumed trial's files were trimmed to its checkpoint."""

    def __init__(self, trial_dir: Path):
        self.trial_dir = trial_dir
        self._columns: list[str] | None = None

    def trial_result(self, trial: TrialView, result: dict[str, Any]) -> None:
        with (self.trial_dir / RESULTS_JSON).open("a") as out:
            out.write(json.dumps(result, cls=SafeFallbackEncoder) + "\n")
        row = flatten_dict({k: v for k, v in result.items() if k != "config"}, delimiter="/")
        path = self.trial_dir / PROGRESS_CSV
        if self._columns is None:
            has_rows = path.is_file() and path.stat().st_size > 0
            self._columns = widen_progress(path, list(row)) if has_rows else list(row)
            if not has_rows:
                path.write_text(_csv_line(self._columns, None))
        with path.open("a", newline="") as out:
            out.write(_csv_line(self._columns, row))


def _csv_line(columns: list[str], row: dict[str, Any] | None) -> str:
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, columns, extrasaction="ignore")
    if row is None:
        writer.writeheader()
    else:
        writer.writerow(row)
    return out.getvalue()


def write_params(trial_dir: Path, experiment: dict[str, Any]) -> None:
    """The trial's experiment, as Tune writes a trial's config."""
    text = json.dumps(experiment, indent=2, sort_keys=True, cls=SafeFallbackEncoder)
    (trial_dir / PARAMS_JSON).write_text(text)
    (trial_dir / PARAMS_PICKLE).write_bytes(cloudpickle.dumps(experiment))


def next_checkpoint_dir(trial_dir: Path) -> Path:
    """``checkpoint_NNNNNN``, numbered after every checkpoint directory the trial has."""
    numbers = [
        int(path.name.removeprefix(CHECKPOINT_PREFIX))
        for path in trial_dir.glob(CHECKPOINT_PREFIX + "*")
        if path.name.removeprefix(CHECKPOINT_PREFIX).isdigit()
    ]
    return trial_dir / f"{CHECKPOINT_PREFIX}{max(numbers, default=-1) + 1:06d}"


@contextmanager
def own_streams(generators: GeneratorStates, threads: int) -> Iterator[None]:
    """The algorithm's random streams, apart from those of the observers in this process (a
    training video's episode draws too), and torch on the trial's CPUs, as in a trial actor."""
    own = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with swapped(generators):
            yield
    finally:
        torch.set_num_threads(own)


class SingleTrialLoop:
    """Train the run's one trial in this process until its stop condition, a signal or an error.

    ``observers`` are told of the run, the trial, each result and checkpoint, and its end, in
    their order, after this loop's own ``TrialLog``."""

    def __init__(
        self,
        run: PreparedRun,
        run_dir: Path,
        settings: LoopSettings,
        observers: list[Observer],
        console: Console,
    ):
        self.run = run
        self.settings = settings
        self.console = console
        self.trial_dir = run_dir / TRIAL
        self.experiment: dict[str, Any] = run.search.param_space
        self.observers = [TrialLog(self.trial_dir), *observers]
        self.stops = LoopStopSignals(console, settings.watchdog_s, TRIAL)
        self._last_result: dict[str, Any] = {}

    def train(self, *, resuming: bool = False) -> TrialOutcome:
        """The trial from its start, or (``resuming``) from its newest complete checkpoint."""
        self.trial_dir.mkdir(parents=True, exist_ok=True)
        point, earlier_s = None, 0.0
        if resuming:
            point, self._last_result = resume_point_in(self.trial_dir)
            earlier_s = float(self._last_result.get(TIME_TOTAL) or 0.0)
            iteration, env_steps = (point.iteration, point.env_steps) if point else (0, 0)
            remove_partial_files(self.trial_dir)
            trim_trial_history(self.trial_dir, iteration, env_steps)
            (self.trial_dir / ERROR_REPORT).unlink(missing_ok=True)
        write_params(self.trial_dir, self.experiment)
        view = self._view(point)
        for observer in self.observers:
            observer.run_started()
        status, error, ended = "not finished", None, None
        algo, at_once = None, False
        with self.stops.installed():
            try:
                if point is not None:
                    self.stops.watchdog.checkpointed(TRIAL)
                algo = self._build(point, earlier_s)
                for observer in self.observers:
                    observer.trial_started(view)
                status = self._iterate(algo, earlier_s)
                ended = FINISHED if status == "finished" else None
            except StopNow:
                # Left as it is, as a trial actor's unfinished call: its iteration may be stuck
                # in an env runner, which stopping the algorithm would wait for. Its Ray actors
                # end with this driver's connection.
                at_once = True
            except Exception as exc:  # noqa: BLE001 - the trial failed: its summary says why
                error = "".join(traceback.format_exception(exc))
                status, ended = "error", FAILED
            finally:
                self.stops.settle()  # the outcome is known: later signals wait for the end
            if error is not None:
                with suppress(OSError):  # a full disk: the summary still has the error
                    (self.trial_dir / ERROR_REPORT).write_text(error)
            if ended is not None:
                for observer in self.observers:
                    observer.trial_ended(self._view(None), ended)
            if algo is not None and not at_once:
                self._stop(algo)
        return TrialOutcome(
            path=self.trial_dir,
            status=status,
            last_result=self._last_result,
            experiment=trial_experiment(self.experiment),
            error=error,
        )

    def _view(self, point: ResumePoint | None) -> TrialView:
        return TrialView(
            name=TRIAL,
            path=self.trial_dir,
            staging=self.trial_dir,
            experiment=self.experiment,
            last_result=self._last_result,
            resumes_from=point,
        )

    def _build(self, point: ResumePoint | None, earlier_s: float) -> Any:
        threads = max(1, int(trial_resources(self.run).head_cpus))
        self._streams = (GeneratorStates.capture(), threads)
        cls = trainable_for(self.run.experiment.algorithm)
        with own_streams(*self._streams):
            algo = cls(config=trial_config(self.run))
            algo.trial_dir = self.trial_dir
            algo.earlier_training_s = earlier_s
            remove_unused_logdir(algo)
            if point is not None:
                algo.restore(str(point.checkpoint))
        return algo

    def _iterate(self, algo: Any, earlier_s: float) -> str:
        """Train until the run ends; its status."""
        settings = self.settings
        if reached(self._last_result, settings.stop):
            # Resumed from the checkpoint of the result that ended it (the command was killed
            # before its summary was written): nothing is left to train.
            return "finished"
        while True:
            with self.stops.iteration(), own_streams(*self._streams):
                result = algo.train()
            result[TIME_TOTAL] = float(result.get(TIME_TOTAL) or 0.0) + earlier_s
            done = reached(result, settings.stop)
            if done:
                result["done"] = True  # as Tune marks the result that stops a trial
            self._last_result = result
            self.stops.watchdog.result(TRIAL, result)
            view = self._view(None)
            for observer in self.observers:
                observer.trial_result(view, result)
            iteration = int(result.get(ITERATION) or 0)
            every = settings.checkpoint_every
            due = bool(every) and iteration % every == 0
            if due or self.stops.requested or (done and settings.checkpoint_at_end):
                self._checkpoint(algo, result)
            if done:
                return "finished"
            if self.stops.requested:
                return "not finished"

    def _checkpoint(self, algo: Any, result: dict[str, Any]) -> None:
        """A checkpoint of this iteration, completed with rlplat's files; then the trial's
        checkpoints beyond ``checkpoint.keep`` go (the newest, a resume's start, stays)."""
        settings = self.settings
        path = next_checkpoint_dir(self.trial_dir)
        with own_streams(*self._streams):
            algo.save(str(path))
        complete_checkpoint(path, self.experiment, result, settings.score_metric, settings.mode)
        self.stops.watchdog.checkpointed(TRIAL)
        view = self._view(None)
        for observer in self.observers:
            observer.trial_checkpointed(view, path)
        for old in obsolete_checkpoints(self.trial_dir, settings.keep):
            shutil.rmtree(old, ignore_errors=True)

    def _stop(self, algo: Any) -> None:
        try:
            with own_streams(*self._streams):
                algo.stop()
        except (Exception, StopNow):  # noqa: BLE001 - the trial's outcome is known already
            pass


def remove_unused_logdir(algo: Any) -> None:
    """A Trainable made without Tune's storage makes itself an empty log directory under
    ``~/ray_results`` that nothing writes to (rlplat writes the trial directory): remove it,
    and ``~/ray_results`` too where that was all it held."""
    logdir = Path(algo.logdir)
    for directory in (logdir, logdir.parent):
        try:
            os.rmdir(directory)
        except OSError:
            return
