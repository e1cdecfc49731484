"""Ctrl-C and SIGTERM during ``rlplat train``: finish the iteration, checkpoint, stop.

Tune's own Ctrl-C handler ends the run at once: trials lose everything since their last periodic
checkpoint. rlplat's first signal instead lets every running trial finish its current iteration
and write a checkpoint, then ends the run through Tune's handler (which saves the run's state, so
``--resume`` continues from those checkpoints). A second signal calls Tune's handler right away.
SIGTERM (what Kubernetes and batch schedulers send before killing) counts as a first Ctrl-C.
A single trial run by rlplat's own loop (``rlplat.run.loop``) keeps the same promises with
``LoopStopSignals``.

The ``Watchdog`` looks for a trial that stopped reporting: when a running trial's iteration
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
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console

from rlplat.callbacks.progress import ConsoleCallback
from rlplat.metrics import ENV_STEPS, ENV_STEPS_TRAINED, lookup
from rlplat.util.signals import STOPPING, signal_handlers_kept

SHOULD_CHECKPOINT = "should_checkpoint"  # a result key Tune reads after its callbacks ran
RUNNING = "RUNNING"
MIN_WATCHDOG_S = 300.0
SLOWEST_ITERATION_FACTOR = 10.0
WATCH_PERIOD_S = 0.25  # how often the loop's watchdog thread looks at its trial
FIRST_SIGNAL = (
    "{signal}: stopping after the current iteration with a final checkpoint of each running "
    "trial (Ctrl-C again to stop at once)."
)
STOPPING_NOW = "Stopping now; trials continue from their previous checkpoint on --resume."


class Watchdog:
    """What the watchdog knows of each trial (by a key of the caller's): when it last reported,
    its slowest training iteration, its env steps, whether it has a checkpoint."""

    def __init__(self, watchdog_s: float | None = None):
        self.watchdog_s = watchdog_s  # None: from the trial's slowest iteration
        self._last_report: dict[str, float] = {}  # trial -> monotonic time of its last news
        self._slowest: dict[str, float] = {}  # trial -> its slowest training iteration, s
        self._env_steps: dict[str, int] = {}  # trial -> env steps sampled so far
        self._checkpointed: set[str] = set()  # trials with at least one checkpoint
        self._stalled: set[str] = set()
        self._lock = threading.Lock()  # rlplat's loop watches from a thread of its own

    def __getstate__(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def started(self, trial: str) -> None:
        with self._lock:
            self._last_report[trial] = time.monotonic()

    def result(self, trial: str, result: dict) -> None:
        with self._lock:
            self._result(trial, result)

    def _result(self, trial: str, result: dict) -> None:
        now = time.monotonic()
        started = self._last_report.get(trial, now)
        if _trained(result):
            self._slowest[trial] = max(self._slowest.get(trial, 0.0), now - started)
        steps = lookup(result, ENV_STEPS)
        if steps is not None:
            self._env_steps[trial] = int(steps)
        self._last_report[trial] = now
        self._stalled.discard(trial)

    def checkpointed(self, trial: str) -> None:
        self._checkpointed.add(trial)

    @property
    def stops_at_once(self) -> bool:
        """Whether a first signal should stop at once: every stalled trial can resume."""
        return bool(self._stalled) and self._stalled <= self._checkpointed

    def limit_s(self, trial: str) -> float:
        """How long an iteration of this trial may take before the watchdog speaks."""
        if self.watchdog_s is not None:
            return self.watchdog_s
        slowest = self._slowest.get(trial, 0.0)
        return max(MIN_WATCHDOG_S, SLOWEST_ITERATION_FACTOR * slowest)

    def warnings(self, running: dict[str, str]) -> list[str]:
        """The warning for each running trial (key -> its name in print) newly found in one
        iteration for longer than its limit."""
        with self._lock:
            return self._warnings(running)

    def _warnings(self, running: dict[str, str]) -> list[str]:
        now = time.monotonic()
        lines = []
        for trial, name in running.items():
            since = self._last_report.get(trial)
            if since is None or trial in self._stalled:
                continue
            waited = now - since
            if waited < self.limit_s(trial):
                continue
            self._stalled.add(trial)
            verdict, advice = self._verdict(trial, name, waited), self._advice(trial)
            lines.append(f"[yellow]watchdog:[/] {verdict} {advice}")
        return lines

    def _verdict(self, trial: str, name: str, waited: float) -> str:
        slowest = self._slowest.get(trial)
        if slowest is None:
            return (
                f"{name} has been in one iteration for {waited:.0f} s and none of its "
                "iterations has trained yet: the first one with learner updates (after an "
                "off-policy warm-up, say) can take far longer than those before it, so this may "
                "be slow rather than stuck."
            )
        return (
            f"{name} has been in one iteration for {waited:.0f} s (its slowest training "
            f"iteration so far took {slowest:.1f} s): its env or learner may be stuck (an env "
            "that fails on every step, a deadlock, a node that is gone). rlplat train --verbose "
            "shows Ray's worker logs."
        )

    def _advice(self, trial: str) -> str:
        if trial in self._checkpointed:
            return (
                "Ctrl-C now stops at once; the trial continues from its last checkpoint on "
                "--resume (what it did since is lost)."
            )
        steps = self._env_steps.get(trial)
        done = f"its {steps:,} env steps" if steps else "everything it has done"
        return (
            f"It has no checkpoint yet: stopping it now would lose {done}. Ctrl-C waits for "
            "this iteration to end and checkpoints it; a second Ctrl-C stops at once."
        )


class GracefulStop(ConsoleCallback):
    """Installed in Tune's ``setup`` (the main thread, right after Tune set its own handler).

    ``requested`` tells ``rlplat train`` afterwards that the run was stopped by a signal.
    """

    def __init__(self, console: Console, watchdog_s: float | None = None):
        self.console = console
        self.watchdog = Watchdog(watchdog_s)
        self.requested = False
        self._tune_handler: Any = None
        self._previous_term: Any = None
        self._owing: set[str] = set()  # trials asked for a final checkpoint, not yet written
        self._saved: set[str] = set()  # trials whose final checkpoint is written
        self._stopping = False

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks with the run (for --resume); signal handlers do not pickle.
        return {**super().__getstate__(), "_tune_handler": None, "_previous_term": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        if "watchdog" not in state:  # pickled by rlplat before the watchdog was its own class
            self.watchdog = Watchdog(state.get("watchdog_s"))

    def setup(self, **info: Any) -> None:
        self._tune_handler = signal.getsignal(signal.SIGINT)
        try:
            signal.signal(signal.SIGINT, self._on_signal)
            self._previous_term = signal.signal(signal.SIGTERM, self._on_signal)
        except ValueError:
            self._tune_handler = None  # not the main thread: Tune's behaviour stays

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.requested or self.watchdog.stops_at_once:
            self._say(STOPPING_NOW)
            self._stop_tune()
            return
        self.requested = True
        self._say(FIRST_SIGNAL.format(signal=signal.Signals(signum).name))

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.watchdog.started(trial.trial_id)

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        self.watchdog.result(trial.trial_id, result)
        if self.requested and trial.trial_id not in self._saved:
            result[SHOULD_CHECKPOINT] = True
            self._owing.add(trial.trial_id)

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info):
        self.watchdog.checkpointed(trial.trial_id)
        if trial.trial_id in self._owing:
            self._owing.discard(trial.trial_id)
            self._saved.add(trial.trial_id)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        running = {t.trial_id: str(t) for t in trials if t.status == RUNNING}
        for line in self.watchdog.warnings(running):
            self._say(line)
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


class StopNow(BaseException):  # noqa: N818 - a request, as KeyboardInterrupt is
    """Raised in the main thread by :class:`LoopStopSignals` to end the iteration at once."""


class LoopStopSignals:
    """Ctrl-C and SIGTERM for a trial trained by this process's own loop: the first asks the loop
    to stop after the current iteration with a checkpoint (``requested``), the second (or the
    first, once the watchdog found the trial stuck and it has a checkpoint) raises ``StopNow``
    in the main thread. A watchdog thread watches the iteration meanwhile."""

    def __init__(self, console: Console, watchdog_s: float | None, trial: str):
        self.console = console
        self.watchdog = Watchdog(watchdog_s)
        self.trial = trial
        self.requested = False
        self._in_iteration = False
        self._settled = False

    def settle(self) -> None:
        """The trial's outcome is known: from now on a signal stops nothing (what is left, the
        algorithm's shutdown, ends by itself)."""
        self._settled = True

    @contextmanager
    def installed(self) -> Iterator[LoopStopSignals]:
        """The handlers and the watchdog thread, for the block; the handlers from before after."""
        watching = threading.Event()
        with signal_handlers_kept():
            if threading.current_thread() is threading.main_thread():
                for number in STOPPING:
                    signal.signal(number, self._on_signal)
            thread = threading.Thread(target=self._watch, args=(watching,), daemon=True)
            thread.start()
            try:
                yield self
            finally:
                watching.set()

    @contextmanager
    def iteration(self) -> Iterator[None]:
        """Around one iteration: the watchdog watches it."""
        self.watchdog.started(self.trial)
        self._in_iteration = True
        try:
            yield
        finally:
            self._in_iteration = False

    def _watch(self, watching: threading.Event) -> None:
        while not watching.wait(WATCH_PERIOD_S):
            if self._in_iteration:
                for line in self.watchdog.warnings({self.trial: self.trial}):
                    self.console.print(line, highlight=False)

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._settled:
            return
        if self.requested or self.watchdog.stops_at_once:
            self.console.print(STOPPING_NOW, highlight=False)
            raise StopNow
        self.requested = True
        self.console.print(FIRST_SIGNAL.format(signal=signal.Signals(signum).name), highlight=False)


def _trained(result: dict) -> bool:
    """Whether this trial's learners have trained at all by this result."""
    return bool(lookup(result, ENV_STEPS_TRAINED))
