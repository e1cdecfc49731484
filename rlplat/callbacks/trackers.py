"""Experiment trackers (``loggers.mlflow``, ``loggers.wandb``) fed from the same scalars as
TensorBoard.

Tune's ``MLflowLoggerCallback`` and ``WandbLoggerCallback`` log every result key against the
training iteration and open new runs when a run resumes. rlplat's trackers take the scalars of
rlplat's TensorBoard files (``short_scalars``, same names) with env steps as the step, keep one
tracker run per trial across ``--resume`` and put a search's trials under one parent run (MLflow)
or group (W&B). A tracker that fails mid-run is dropped with one warning: training, TensorBoard
and checkpoints never depend on it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from rlplat.callbacks.observers import FINISHED, KeepsConsole, Observer, TrialView
from rlplat.callbacks.tensorboard import short_scalars
from rlplat.callbacks.tracking import Tracker, TrialRun, run_tags
from rlplat.errors import first_line
from rlplat.experiment.schema import Experiment
from rlplat.metrics import ENV_STEPS, Throughput, finite, lookup

FAILURES_TO_DROP = 3  # a tracker failing this many calls in a row is not called again


class TrackerObserver(KeepsConsole, Observer):
    """Feeds every tracker of the run; drops a failing one with a single warning.

    Tune pickles its callbacks with the run (``--resume`` unpickles them): the trackers, which
    hold connections, are made in ``run_started`` each time a fit starts, and the active
    observer is kept in this module for :func:`close_trackers`.
    """

    def __init__(self, experiment: Experiment, run_dir: Path, grouped: bool, console: Console):
        self.loggers = experiment.loggers
        self.name = experiment.name
        self.tags = run_tags(experiment, run_dir)
        self.run_dir = run_dir
        self.grouped = grouped
        self.console = console
        self._fresh()

    def _fresh(self) -> None:
        self.trackers: list[Tracker] = []
        self._throughput = Throughput()
        self._trials: dict[str, TrialRun] = {}
        self._logged: dict[tuple[str, str], int] = {}  # (tracker, trial) -> last env step sent
        self._failures: dict[str, int] = {}  # tracker -> failed calls in a row
        self._warned: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        return {key: state[key] for key in ("loggers", "name", "tags", "run_dir", "grouped")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._fresh()

    def run_started(self) -> None:
        global _active
        _active = self
        self._fresh()
        loggers = self.loggers
        if loggers.mlflow is not None:
            from rlplat.callbacks.mlflow_tracker import MlflowTracker  # noqa: PLC0415

            self._add(
                "MLflow",
                lambda: MlflowTracker(
                    loggers.mlflow, self.name, self.run_dir, self.tags, self.grouped
                ),
            )
        if loggers.wandb is not None:
            from rlplat.callbacks.wandb_tracker import WandbTracker  # noqa: PLC0415

            self._add(
                "W&B", lambda: WandbTracker(loggers.wandb, self.run_dir, self.tags, self.grouped)
            )

    def _add(self, label: str, make: Callable[[], Tracker]) -> None:
        try:
            self.trackers.append(make())
        except Exception as exc:  # noqa: BLE001 - a tracker never stops the run
            self._warn(label, exc)

    def _warn(self, label: str, exc: Exception) -> None:
        reason = first_line(exc)[:300]
        self.console.print(
            f"[yellow]warning:[/yellow] {label} failed ({reason}); the run goes on (TensorBoard "
            f"files and checkpoints are not affected), and after {FAILURES_TO_DROP} failed "
            f"calls in a row without {label}.",
            highlight=False,
        )

    def _guarded(self, tracker: Tracker, action: Callable[[], Any]) -> Any:
        failures = self._failures.get(tracker.label, 0)
        try:
            result = action()
        except Exception as exc:  # noqa: BLE001 - any tracker failure only costs the tracker
            self._failures[tracker.label] = failures + 1
            if tracker.label not in self._warned:
                self._warned.add(tracker.label)
                self._warn(tracker.label, exc)
            if failures + 1 >= FAILURES_TO_DROP:
                self.trackers = [t for t in self.trackers if t is not tracker]
            return None
        self._failures[tracker.label] = 0
        return result

    def trial_started(self, trial: TrialView) -> None:
        if trial.name in self._trials:  # its actor restarted (PBT, a paused trial): same runs
            return
        run = self._trials[trial.name] = TrialRun(trial)
        for tracker in list(self.trackers):
            step = self._guarded(tracker, lambda t=tracker: t.start(run))
            self._logged[(tracker.label, trial.name)] = step or 0

    def trial_result(self, trial: TrialView, result: dict[str, Any]) -> None:
        run = self._trials.get(trial.name)
        if run is None:
            return
        step = int(finite(lookup(result, ENV_STEPS)) or 0)
        scalars = short_scalars(result, self._throughput.update(trial.name, result))
        for tracker in list(self.trackers):
            key = (tracker.label, trial.name)
            if step <= self._logged.get(key, 0):
                continue  # a resumed trial repeating steps the tracker already holds
            self._guarded(tracker, lambda t=tracker: t.log(run, scalars, step))
            self._logged[key] = step

    def _end(self, name: str, status: str) -> None:
        run = self._trials.pop(name, None)
        if run is not None:
            for tracker in list(self.trackers):
                self._guarded(tracker, lambda t=tracker: t.end(run, status))

    def trial_ended(self, trial: TrialView, outcome: str) -> None:
        self._end(trial.name, "FINISHED" if outcome == FINISHED else "FAILED")

    def close(self, status: str) -> None:
        """The end of the command: trials still open end too (KILLED: stopped before their
        end), then each tracker's run."""
        for name in list(self._trials):
            self._end(name, "KILLED")
        for tracker in list(self.trackers):
            self._guarded(tracker, lambda t=tracker: t.close(self.run_dir, status))
        self.trackers = []


_active: TrackerObserver | None = None


def close_trackers(status: str) -> None:
    """End the tracker runs of the fit that just ended (``status``: FINISHED, FAILED, KILLED)."""
    global _active
    if _active is not None:
        _active.close(status)
        _active = None


def check_trackers(experiment: Experiment, locate: Callable[[str], str]) -> None:
    """Refuse, before Ray starts, a tracker that is not installed, an MLflow store that does
    not answer and a W&B online run without credentials."""
    loggers = experiment.loggers
    if loggers.mlflow is not None:
        from rlplat.callbacks import mlflow_tracker  # noqa: PLC0415 - optional

        mlflow_tracker.check(loggers.mlflow, locate("loggers.mlflow.tracking_uri"))
    if loggers.wandb is not None:
        from rlplat.callbacks import wandb_tracker  # noqa: PLC0415 - optional

        wandb_tracker.check(loggers.wandb, locate("loggers.wandb.mode"))
