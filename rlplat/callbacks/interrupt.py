"""Ctrl-C and SIGTERM during ``rlplat train``: finish the iteration, checkpoint, stop.

Tune's own Ctrl-C handler ends the run at once: trials lose everything since their last periodic
checkpoint. rlplat's first signal instead lets every running trial finish its current iteration
and write a checkpoint, then ends the run through Tune's handler (which saves the run's state, so
``--resume`` continues from those checkpoints). A second signal calls Tune's handler right away.
SIGTERM (what Kubernetes and batch schedulers send before killing) counts as a first Ctrl-C.
"""

from __future__ import annotations

import signal
from typing import Any

from rich.console import Console

from rlplat.callbacks.progress import ConsoleCallback

SHOULD_CHECKPOINT = "should_checkpoint"  # a result key Tune reads after its callbacks ran
RUNNING = "RUNNING"


class GracefulStop(ConsoleCallback):
    """Installed in Tune's ``setup`` (the main thread, right after Tune set its own handler).

    ``requested`` tells ``rlplat train`` afterwards that the run was stopped by a signal.
    """

    def __init__(self, console: Console):
        self.console = console
        self.requested = False
        self._tune_handler: Any = None
        self._previous_term: Any = None
        self._owing: set[str] = set()  # trials asked for a final checkpoint, not yet written
        self._saved: set[str] = set()  # trials whose final checkpoint is written
        self._stopping = False

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks with the run (for --resume); signal handlers do not pickle.
        return {**super().__getstate__(), "_tune_handler": None, "_previous_term": None}

    def setup(self, **info: Any) -> None:
        self._tune_handler = signal.getsignal(signal.SIGINT)
        try:
            signal.signal(signal.SIGINT, self._on_signal)
            self._previous_term = signal.signal(signal.SIGTERM, self._on_signal)
        except ValueError:
            self._tune_handler = None  # not the main thread: Tune's behaviour stays

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.requested:
            self._say("Stopping now; trials continue from their previous checkpoint on --resume.")
            self._stop_tune()
            return
        self.requested = True
        name = signal.Signals(signum).name
        self._say(
            f"{name}: stopping after the current iteration with a final checkpoint of each "
            "running trial (Ctrl-C again to stop at once)."
        )

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        if self.requested and trial.trial_id not in self._saved:
            result[SHOULD_CHECKPOINT] = True
            self._owing.add(trial.trial_id)

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info):
        if trial.trial_id in self._owing:
            self._owing.discard(trial.trial_id)
            self._saved.add(trial.trial_id)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        if not self.requested or self._owing:
            return
        if all(t.status != RUNNING or t.trial_id in self._saved for t in trials):
            self._stop_tune()

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        if self._previous_term is not None:
            signal.signal(signal.SIGTERM, self._previous_term)

    def _say(self, line: str) -> None:
        self.console.print(line, highlight=False)

    def _stop_tune(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        if callable(self._tune_handler):
            # Tune's handler ends its loop after the current step and restores the SIGINT
            # handler from before the run, so a third Ctrl-C raises KeyboardInterrupt.
            self._tune_handler(signal.SIGINT, None)
        else:
            raise KeyboardInterrupt
