"""Ctrl-C and SIGTERM during ``rlplat train``: finish the iteration, checkpoint, stop.

Tune's own Ctrl-C handler ends the run at once: trials lose everything since their last periodic
checkpoint. rlplat's first signal instead lets every running trial finish its current iteration
and write a checkpoint, then ends the run through Tune's handler (which saves the run's state, so
``--resume`` continues from those checkpoints). A second signal calls Tune's handler right away.
SIGTERM (what Kubernetes and batch schedulers send before killing) counts as a first Ctrl-C.

A trial running inside the command's process (``resources.driver.process``) holds the main
thread for a whole iteration: the watchdog then looks from a thread of its own, and stopping at
once ends the iteration from the signal handler (``StopAtOnce``).

The same callback watches for a trial that stopped reporting: when a running trial's iteration
has taken longer than ``watchdog_s`` (default: 10x its slowest training iteration so far, at
least ``MIN_WATCHDOG_S``) it says so, and from then on the first Ctrl-C stops at once, since
the iteration it would wait for may never end, but only when the trial has a checkpoint to
continue from: otherwise the first Ctrl-C still waits, and the warning says what stopping now
would lose. Iterations that trained nothing (an off-policy algorithm's warm-up) do not count
as "slowest": the first iteration with learner updates may take far longer, and until one has
finished the warning says it cannot tell slow from stuck.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from rich.console import Console

from rlplat.callbacks.progress import ConsoleCallback
from rlplat.metrics import ENV_STEPS, ENV_STEPS_TRAINED, lookup
from rlplat.seams.tune import (
    StopAtOnce,
    hold_iterations,
    trial_call_under_way,
    trials_run_in_this_process,
)

SHOULD_CHECKPOINT = "should_checkpoint"  # a result key Tune reads after its callbacks ran
RUNNING = "RUNNING"
MIN_WATCHDOG_S = 300.0
SLOWEST_ITERATION_FACTOR = 10.0
WATCH_PERIOD_S = 0.25  # how often the watchdog looks at in-process trials


class GracefulStop(ConsoleCallback):
    """Installed in Tune's ``setup`` (the main thread, right after Tune set its own handler).

    ``requested`` tells ``rlplat train`` afterwards that the run was stopped by a signal.
    """

    def __init__(self, console: Console, watchdog_s: float | None = None):
        self.console = console
        self.watchdog_s = watchdog_s  # None: from the trial's slowest iteration
        self._trials: list = []
        self._watching: threading.Event | None = None
        self._last_report: dict[str, float] = {}  # trial id -> monotonic time of its last news
        self._slowest: dict[str, float] = {}  # trial id -> its slowest training iteration, s
        self._env_steps: dict[str, int] = {}  # trial id -> env steps sampled so far
        self._checkpointed: set[str] = set()  # trials with at least one checkpoint
        self._stalled: set[str] = set()
        self.requested = False
        self._tune_handler: Any = None
        self._previous_term: Any = None
        self._owing: set[str] = set()  # trials asked for a final checkpoint, not yet written
        self._saved: set[str] = set()  # trials whose final checkpoint is written
        self._stopping = False

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks with the run (for --resume); signal handlers, threads and
        # the live trials do not pickle.
        unpicklable = {"_tune_handler": None, "_previous_term": None, "_watching": None}
        return {**super().__getstate__(), **unpicklable, "_trials": []}

    def setup(self, **info: Any) -> None:
        self._tune_handler = signal.getsignal(signal.SIGINT)
        try:
            signal.signal(signal.SIGINT, self._on_signal)
            self._previous_term = signal.signal(signal.SIGTERM, self._on_signal)
        except ValueError:
            self._tune_handler = None  # not the main thread: Tune's behaviour stays
        if trials_run_in_this_process():
            self._watching = threading.Event()
            threading.Thread(target=self._watch_meanwhile, name="watchdog", daemon=True).start()

    def _watch_meanwhile(self) -> None:
        while self._watching is not None and not self._watching.wait(WATCH_PERIOD_S):
            self._watch(list(self._trials))

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.requested or (self._stalled and self._stalled <= self._checkpointed):
            self._say("Stopping now; trials continue from their previous checkpoint on --resume.")
            self._stop_tune()
            return
        self.requested = True
        name = signal.Signals(signum).name
        self._say(
            f"{name}: stopping after the current iteration with a final checkpoint of each "
            "running trial (Ctrl-C again to stop at once)."
        )

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._trials = trials
        self._last_report[trial.trial_id] = time.monotonic()

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        now = time.monotonic()
        started = self._last_report.get(trial.trial_id, now)
        if _trained(result):
            slowest = max(self._slowest.get(trial.trial_id, 0.0), now - started)
            self._slowest[trial.trial_id] = slowest
        steps = lookup(result, ENV_STEPS)
        if steps is not None:
            self._env_steps[trial.trial_id] = int(steps)
        self._last_report[trial.trial_id] = now
        self._stalled.discard(trial.trial_id)
        if self.requested and trial.trial_id not in self._saved:
            result[SHOULD_CHECKPOINT] = True
            self._owing.add(trial.trial_id)
            hold_iterations()  # an in-process trial: no iteration after this one's checkpoint

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info):
        self._checkpointed.add(trial.trial_id)
        if trial.trial_id in self._owing:
            self._owing.discard(trial.trial_id)
            self._saved.add(trial.trial_id)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        self._watch(trials)
        if not self.requested or self._owing:
            return
        if all(t.status != RUNNING or t.trial_id in self._saved for t in trials):
            self._stop_tune()

    def limit_s(self, trial_id: str) -> float:
        """How long an iteration of this trial may take before the watchdog speaks."""
        if self.watchdog_s is not None:
            return self.watchdog_s
        slowest = self._slowest.get(trial_id, 0.0)
        return max(MIN_WATCHDOG_S, SLOWEST_ITERATION_FACTOR * slowest)

    def _watch(self, trials: list) -> None:
        now = time.monotonic()
        for trial in trials:
            since = self._last_report.get(trial.trial_id)
            if trial.status != RUNNING or since is None or trial.trial_id in self._stalled:
                continue
            waited = now - since
            if waited < self.limit_s(trial.trial_id):
                continue
            self._stalled.add(trial.trial_id)
            self._say(f"[yellow]watchdog:[/] {self._verdict(trial, waited)} {self._advice(trial)}")

    def _verdict(self, trial: Any, waited: float) -> str:
        slowest = self._slowest.get(trial.trial_id)
        if slowest is None:
            return (
                f"{trial} has been in one iteration for {waited:.0f} s and none of its "
                "iterations has trained yet: the first one with learner updates (after an "
                "off-policy warm-up, say) can take far longer than those before it, so this may "
                "be slow rather than stuck."
            )
        return (
            f"{trial} has been in one iteration for {waited:.0f} s (its slowest training "
            f"iteration so far took {slowest:.1f} s): its env or learner may be stuck (an env "
            "that fails on every step, a deadlock, a node that is gone). rlplat train --verbose "
            "shows Ray's worker logs."
        )

    def _advice(self, trial: Any) -> str:
        if trial.trial_id in self._checkpointed:
            return (
                "Ctrl-C now stops at once; the trial continues from its last checkpoint on "
                "--resume (what it did since is lost)."
            )
        steps = self._env_steps.get(trial.trial_id)
        done = f"its {steps:,} env steps" if steps else "everything it has done"
        return (
            f"It has no checkpoint yet: stopping it now would lose {done}. Ctrl-C waits for "
            "this iteration to end and checkpoints it; a second Ctrl-C stops at once."
        )

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        if self._watching is not None:
            self._watching.set()
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
            if trial_call_under_way():  # Tune's step is the trial's iteration, in this thread
                raise StopAtOnce
        else:
            raise KeyboardInterrupt


def _trained(result: dict) -> bool:
    """Whether this trial's learners have trained at all by this result."""
    return bool(lookup(result, ENV_STEPS_TRAINED))
