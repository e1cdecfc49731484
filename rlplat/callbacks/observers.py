"""What watches a run: observers of each trial's start, results, checkpoints and end.

Terminal progress, TensorBoard files, the diagnoses, training videos, trackers and the training
clock are observers: plain objects that know a trial by a ``TrialView`` (its name, directories,
experiment, latest result and the checkpoint it continues from), not by a Tune ``Trial``.
``TuneObservers`` calls them, in their order, as one Tune callback.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray import cloudpickle
from ray.exceptions import RayActorError
from ray.tune import Callback
from rich.console import Console

from rlplat.metrics import ENV_STEPS, ITERATION, finite, lookup

FINISHED, FAILED, LOST = "finished", "failed", "lost"  # how a trial ended


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a (re)starting trial continues from."""

    checkpoint: Path
    iteration: int
    env_steps: int


@dataclass(frozen=True)
class TrialView:
    """A trial as its observers see it."""

    name: str  # trial_00000: the trial directory's name, in every line rlplat prints
    path: Path  # the trial's directory in the run directory
    staging: Path  # where its files are written while it runs (Tune's staging directory)
    experiment: dict[str, Any]  # its experiment, with the values a search chose for it
    last_result: dict[str, Any] = field(default_factory=dict)
    resumes_from: ResumePoint | None = None  # where it continues from, when it restarts

    def __str__(self) -> str:
        return self.name


class Observer:
    """Hooks called as a run goes; each does nothing unless a subclass overrides it."""

    def run_started(self) -> None:
        """A run starts, or a resumed one starts again (in the command that resumes it)."""

    def trial_started(self, trial: TrialView) -> None:
        """The trial starts, or starts again from a checkpoint."""

    def trial_result(self, trial: TrialView, result: dict[str, Any]) -> None:
        """The trial reported one training iteration's result."""

    def trial_checkpointed(self, trial: TrialView, checkpoint: Path) -> None:
        """The trial wrote ``checkpoint`` (complete with rlplat's files) after its last result."""

    def trial_ended(self, trial: TrialView, outcome: str) -> None:
        """The trial ended: FINISHED, FAILED (it raised) or LOST (its process or node died)."""


class KeepsConsole:
    """For an object pickled with the run (Tune's experiment state, which ``--resume`` unpickles)
    that prints to ``self.console``: a Console holds locks, so it is dropped and made again."""

    console: Console

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["console"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.console = Console(soft_wrap=True)


def trial_view(trial: Any) -> TrialView:
    """A Tune ``Trial`` as observers see it."""
    return TrialView(
        name=str(trial),
        path=Path(trial.path),
        staging=Path(trial.local_path),
        experiment=trial.config,
        last_result=trial.last_result or {},
        resumes_from=resume_point(trial),
    )


def resume_point(trial: Any) -> ResumePoint | None:
    """The checkpoint a (re)starting Tune trial continues from (its latest), or None."""
    saved = trial.latest_checkpoint_result
    if saved is None or saved.checkpoint is None:
        return None
    metrics = saved.metrics or {}
    return ResumePoint(
        checkpoint=Path(saved.checkpoint.path),
        iteration=int(metrics.get(ITERATION) or 0),
        env_steps=int(finite(lookup(metrics, ENV_STEPS)) or 0),
    )


def lost_its_actor(trial: Any) -> bool:
    """Whether a failed Tune trial's error is Ray's ``RayActorError`` (its process or node
    died). Tune pickles the error into the trial's local directory
    (``Trial.pickled_error_file``) before its callbacks hear of it; ``Trial.get_pickled_error``
    reads the run's storage, which gets the file later."""
    path = trial.pickled_error_file
    if not path or not Path(path).is_file():
        return False
    try:
        error = cloudpickle.loads(Path(path).read_bytes())
    except Exception:  # noqa: BLE001 - an error that does not unpickle here is not Ray's
        return False
    return isinstance(error, RayActorError)


class TuneObservers(Callback):
    """Observers as one Tune callback, called in their order."""

    def __init__(self, observers: list[Observer]):
        self.observers = observers

    def setup(self, **info: Any) -> None:
        for observer in self.observers:
            observer.run_started()

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        view = trial_view(trial)
        for observer in self.observers:
            observer.trial_started(view)

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        view = trial_view(trial)
        for observer in self.observers:
            observer.trial_result(view, result)

    def on_checkpoint(
        self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any
    ) -> None:
        if not Path(checkpoint.path).is_dir():
            return  # a checkpoint on remote storage: observers read local files
        view = trial_view(trial)
        for observer in self.observers:
            observer.trial_checkpointed(view, Path(checkpoint.path))

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._ended(trial, FINISHED)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._ended(trial, LOST if lost_its_actor(trial) else FAILED)

    def _ended(self, trial: Any, outcome: str) -> None:
        view = trial_view(trial)
        for observer in self.observers:
            observer.trial_ended(view, outcome)
