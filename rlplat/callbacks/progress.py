"""Terminal progress: one line per trial result (at most one a second), and the final summary."""

from __future__ import annotations

import time
from typing import Any

from ray import tune
from ray.tune import Callback
from rich.console import Console

from rlplat.callbacks.observers import FINISHED, LOST, KeepsConsole, Observer, TrialView
from rlplat.experiment.schema import StopSpec
from rlplat.metrics import (
    ENV_CRASHES,
    ENV_STEPS,
    HEALTHY_RUNNERS,
    ITERATION,
    POLICY_RETURNS,
    RESTORED_REPLAY_STEPS,
    RETURN_MEAN,
    RUNNER_RESTARTS,
    TIME_TOTAL,
    Throughput,
    finite,
    lookup,
    member_returns,
)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return (
        f"{hours}h{minutes:02d}m"
        if hours
        else (f"{minutes}m{secs:02d}s" if minutes else f"{secs}s")
    )


def eta(result: dict[str, Any], stop: StopSpec) -> tuple[float, str] | None:
    """(seconds, the budget that ends the run then) for the nearest budget stop; None when
    unknown. A return or score target may end it sooner: ``eta_text`` says so."""
    elapsed = finite(result.get(TIME_TOTAL))
    if not elapsed:
        return None
    remaining: list[tuple[float, str]] = []
    steps = finite(lookup(result, ENV_STEPS))
    if stop.env_steps and steps:
        seconds = max(stop.env_steps - steps, 0) * elapsed / steps
        remaining.append((seconds, f"{stop.env_steps:,} env steps"))
    iteration = finite(result.get(ITERATION))
    if stop.iterations and iteration:
        seconds = max(stop.iterations - iteration, 0) * elapsed / iteration
        remaining.append((seconds, f"iteration {stop.iterations}"))
    if stop.time_s:
        remaining.append((max(stop.time_s - elapsed, 0.0), f"{format_duration(stop.time_s)}"))
    return min(remaining) if remaining else None


def eta_text(result: dict[str, Any], stop: StopSpec) -> str | None:
    """``ETA 5m53s at 300,000 env steps`` (``, sooner at return 475``), naming what stops the
    run first; None when unknown."""
    found = eta(result, stop)
    if found is None:
        return None
    seconds, budget = found
    targets = [
        f"{name} {value:g}"
        for name, value in (("return", stop.episode_return_mean), ("score", stop.game_score_mean))
        if value is not None
    ]
    sooner = f", sooner at {' or '.join(targets)}" if targets else ""
    return f"ETA {format_duration(seconds)} at {budget}{sooner}"


class ConsoleCallback(KeepsConsole, Callback):
    """A Tune callback that prints to ``self.console``."""


class ProgressPrinter(KeepsConsole, Observer):
    """Prints ``iter | env steps | return | steps/s | elapsed | ETA`` for each trial."""

    def __init__(self, stop: StopSpec, console: Console, min_interval_s: float = 1.0):
        self.stop = stop
        self.console = console
        self.min_interval_s = min_interval_s
        self.best_return: dict[str, float] = {}
        self._throughput = Throughput()
        self._printed_at: dict[str, float] = {}
        self._pending: dict[str, str] = {}
        self._restarts: dict[str, int] = {}
        self._crashes: dict[str, int] = {}

    def line(self, trial_id: str, result: dict[str, Any], rate: float | None) -> str:
        ret = finite(lookup(result, RETURN_MEAN))
        best = self.best_return.get(trial_id)
        eta = eta_text(result, self.stop)
        parts = [
            f"[bold]{trial_id}[/bold]",
            f"iter {int(result.get(ITERATION, 0)):>4}",
            f"steps {int(finite(lookup(result, ENV_STEPS)) or 0):>9,}",
            f"return {ret:>8.2f}" if ret is not None else "return      n/a",
            f"best {best:>8.2f}" if best is not None else "best      n/a",
            f"{rate:>7,.0f} steps/s" if rate is not None else "      ? steps/s",
            f"elapsed {format_duration(finite(result.get(TIME_TOTAL)))}",
        ]
        if eta is not None:
            parts.append(eta)
        policies = member_returns(lookup(result, POLICY_RETURNS) or {})
        if policies:
            parts.append(f"policies {policies}")
        return " | ".join(parts)

    def trial_result(self, trial: TrialView, result: dict[str, Any]) -> None:
        trial_id = trial.name
        ret = finite(lookup(result, RETURN_MEAN))
        if ret is not None and ret > self.best_return.get(trial_id, float("-inf")):
            self.best_return[trial_id] = ret
        self._report_restore(trial_id, result)
        self._report_restarts(trial_id, result)
        self._report_crashes(trial_id, result)
        text = self.line(trial_id, result, self._throughput.update(trial_id, result))
        now = time.monotonic()
        if now - self._printed_at.get(trial_id, 0.0) >= self.min_interval_s:
            self.console.print(text, highlight=False)
            self._printed_at[trial_id] = now
            self._pending.pop(trial_id, None)
        else:
            self._pending[trial_id] = text

    def trial_started(self, trial: TrialView) -> None:
        point = trial.resumes_from
        if point is not None:
            self.console.print(
                f"{trial}: continues from {point.checkpoint.name} (iteration {point.iteration}, "
                f"{point.env_steps:,} env steps)",
                highlight=False,
            )

    def _report_restore(self, trial_id: str, result: dict[str, Any]) -> None:
        restored = finite(lookup(result, RESTORED_REPLAY_STEPS))
        if restored is not None:
            self.console.print(
                f"{trial_id}: replay buffer restored ({int(restored):,} env steps)", highlight=False
            )

    def _report_crashes(self, trial_id: str, result: dict[str, Any]) -> None:
        """Say when the env raised and RLlib rebuilt it, dropping the episode in progress."""
        crashes = int(finite(lookup(result, ENV_CRASHES)) or 0)
        if crashes > self._crashes.get(trial_id, 0):
            self.console.print(
                f"[yellow]{trial_id}: the env raised; rebuilt, its episode dropped[/yellow] "
                f"({crashes} so far)",
                highlight=False,
            )
        self._crashes[trial_id] = crashes

    def _report_restarts(self, trial_id: str, result: dict[str, Any]) -> None:
        """Say when Ray restarted a lost env runner (a node lost, a process killed)."""
        restarts = int(finite(lookup(result, RUNNER_RESTARTS)) or 0)
        if restarts > self._restarts.get(trial_id, 0):
            healthy = finite(lookup(result, HEALTHY_RUNNERS))
            self.console.print(
                f"[yellow]{trial_id}: env runner restarted[/yellow] ({restarts} so far"
                + (f", {int(healthy)} healthy" if healthy is not None else "")
                + ")",
                highlight=False,
            )
        self._restarts[trial_id] = restarts

    def trial_ended(self, trial: TrialView, outcome: str) -> None:
        if outcome == FINISHED:
            if trial.name in self._pending:
                self.console.print(self._pending.pop(trial.name), highlight=False)
            self.console.print(f"[green]{trial} finished[/green]")
            return
        self._pending.pop(trial.name, None)
        if outcome == LOST:  # restarted at the end of the fit, if restarts are left
            self.console.print(f"[yellow]{trial} lost its process or node[/yellow]")
        else:
            self.console.print(f"[red]{trial} failed[/red]")


class NoTuneTable(tune.ProgressReporter):
    """Tune's own progress output, off. Tune prints nothing at ``verbose=0`` in a terminal, but in
    a Jupyter kernel it falls back to its notebook table, which clears the cell's outputs (rlplat's
    progress display among them) and shows an empty HTML table."""

    def should_report(self, trials: list[Any], done: bool = False) -> bool:
        return False

    def report(self, trials: list[Any], done: bool, *sys_info: Any) -> None:
        pass
