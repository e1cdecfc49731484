"""What a run did: per-trial summaries, a search's ranking, the final report and the exit code."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from rlplat import errors
from rlplat.callbacks.health import replay
from rlplat.callbacks.progress import format_duration
from rlplat.callbacks.search_report import (
    TARGET_REACHED,
    TrialRow,
    configuration_count,
    rank_rows,
    ranked_table,
    seeded,
    stop_reason,
    write_best_yaml,
    write_results_csv,
)
from rlplat.checkpoints import CheckpointInfo, best_and_last, describe_score, read_results
from rlplat.errors import Interrupted, RlplatError, UserError
from rlplat.experiment.schema import TuneSpec
from rlplat.experiment.spaces import value_at
from rlplat.metrics import (
    AGENT_RETURNS,
    ENV_CRASHES,
    ENV_STEPS,
    POLICY_RETURNS,
    RETURN_MEAN,
    RUNNER_RESTARTS,
    TIME_BUDGET_ENDED,
    finite,
    lookup,
    member_returns,
    metric_path,
)
from rlplat.prepare import PreparedRun
from rlplat.prepare.search import POPULATION_SCHEDULERS, scheduler_name
from rlplat.run.run_dir import trial_restarts
from rlplat.run.storage import storage_failed
from rlplat.util.disk import storage_reason
from rlplat.util.tables import new_table, print_table


@dataclass
class TrialSummary:
    name: str
    path: str
    status: str
    iterations: int | None
    env_steps: int | None
    final_return: float | None
    best_return: float | None
    best_checkpoint: str | None
    last_checkpoint: str | None
    best_checkpoint_score: str | None = None  # its score and what it is (describe_score)
    error: str | None = None
    user_error: bool = False  # the trial failed on bad input (exit code 2), not at run time
    policy_returns: dict[str, float] = field(default_factory=dict)  # multi-agent, windowed
    agent_returns: dict[str, float] = field(default_factory=dict)
    env_runner_restarts: int = 0  # processes Ray restarted since the trial last started
    restarts: int = 0  # times the trial restarted from a checkpoint after losing its node
    env_crashes: int = 0  # env steps/resets that raised; each dropped the episodes in progress
    time_s: float | None = None  # training time (time_total_s)
    # stop.time_s ended it early: another iteration would have ended past the budget
    time_budget_ended: bool = False
    diagnoses: list[str] = field(default_factory=list)  # "<rule>: <line>" (rlplat.health)


@dataclass
class RunSummary:
    run_dir: str
    wall_time_s: float
    trials: list[TrialSummary] = field(default_factory=list)
    search: list[TrialRow] | None = None  # a search's trials, best first
    best_yaml: str | None = None
    watch_with: str | None = None  # rlplat eval --render choice for this env, if it renders
    export: dict[str, Any] | None = None  # export.at_end: directory, passed, agreement, error


@dataclass(frozen=True)
class TrialOutcome:
    """How a trial ended, as the run's summary needs it, whichever loop ran it."""

    path: Path  # the trial directory
    status: str  # "finished", "error" or "not finished"
    last_result: dict[str, Any]  # its last result (empty when it reported none)
    experiment: dict[str, Any]  # its experiment (a population-based trial's, as it ended)
    error: str | None = None  # its error report when it failed


def summarize(
    outcomes: list[TrialOutcome], run: PreparedRun, run_dir: Path, wall_time_s: float
) -> RunSummary:
    """One TrialSummary per trial, and for a search the ranked rows of results.csv."""
    exp = run.experiment
    tune_spec = exp.tune or TuneSpec()
    metric = metric_path(tune_spec.metric)
    scheduler = scheduler_name(exp)
    summary = RunSummary(
        run_dir=str(run_dir), wall_time_s=wall_time_s, watch_with=run.env.watch_with
    )
    rows = []
    restarts = trial_restarts(run_dir)
    for outcome in outcomes:
        metrics = outcome.last_result
        trial_path = outcome.path
        best, last = best_and_last(trial_path)
        error, status, experiment = outcome.error, outcome.status, outcome.experiment
        results = read_results(trial_path)
        health = replay(results, experiment)
        summary.trials.append(
            TrialSummary(
                name=trial_path.name,
                path=str(trial_path),
                status=status,
                iterations=metrics.get("training_iteration"),
                env_steps=int(finite(lookup(metrics, ENV_STEPS)) or 0) or None,
                final_return=finite(lookup(metrics, RETURN_MEAN)),
                best_return=_extreme(_column(results, RETURN_MEAN), "max"),
                best_checkpoint=str(best) if best else None,
                last_checkpoint=str(last) if last else None,
                best_checkpoint_score=describe_score(CheckpointInfo.read(best)) if best else None,
                error=_first_line(error) if error else None,
                user_error=bool(error) and _is_user_error(error),
                policy_returns=dict(lookup(metrics, POLICY_RETURNS) or {}),
                agent_returns=dict(lookup(metrics, AGENT_RETURNS) or {}),
                env_runner_restarts=int(finite(lookup(metrics, RUNNER_RESTARTS)) or 0),
                restarts=restarts.get(trial_path.name, 0),
                env_crashes=int(finite(lookup(metrics, ENV_CRASHES)) or 0),
                time_s=finite(metrics.get("time_total_s")),
                time_budget_ended=bool(lookup(metrics, TIME_BUDGET_ENDED)),
                diagnoses=[f"{f.rule}: {f.message}" for f in health.findings],
            )
        )
        rows.append(
            TrialRow(
                name=trial_path.name,
                status=status,
                stop_reason=stop_reason(status, metrics, exp.stop, scheduler),
                iterations=metrics.get("training_iteration"),
                env_steps=summary.trials[-1].env_steps,
                final=finite(lookup(metrics, metric)),
                best=_extreme(_column(results, metric), tune_spec.mode),
                time_s=finite(metrics.get("time_total_s")),
                params={
                    ".".join(path): value_at(experiment, path)
                    for s in run.spaces
                    for path in s.value_paths
                },
                experiment=experiment,
                best_checkpoint=summary.trials[-1].best_checkpoint,
                seed=experiment.get("seed") if exp.seeds else None,
            )
        )
    summary.trials.sort(key=lambda t: t.name)
    if len(rows) > 1 or run.spaces:
        by_return = metric == RETURN_MEAN and tune_spec.mode == "max"
        summary.search = rank_rows(rows, tune_spec.mode, TARGET_REACHED if by_return else None)
    return summary


def _column(results: list[dict[str, Any]], path: str) -> list[float]:
    """Every finite value a trial reported for ``path``, in order."""
    return [v for v in (finite(lookup(row, path)) for row in results) if v is not None]


def _extreme(values: list[float], mode: str) -> float | None:
    if not values:
        return None
    return max(values) if mode == "max" else min(values)


def report_search(summary: RunSummary, run: PreparedRun, run_dir: Path, console: Console) -> None:
    """The ranked table, results.csv and best.yaml of a search (a run of one configuration on
    several seeds gets the table and results.csv)."""
    exp = run.experiment
    tune_spec = exp.tune or TuneSpec()
    rows = summary.search or []
    title = "Configurations, best first" if seeded(rows) else "Trials, best first"
    print_table(console, ranked_table(rows, tune_spec.metric, title))
    csv_path = write_results_csv(run_dir, rows, tune_spec.metric)
    console.print(f"All trials: {csv_path}", highlight=False)
    if exp.seeds:  # the best configuration whose every seed has a final value
        winner = next((row for row in rows if row.config_mean is not None), None)
    else:
        winner = next((r for r in rows if r.status != "error" and r.final is not None), None)
    one_configuration = bool(exp.seeds) and configuration_count(rows) == 1
    if winner is not None and not one_configuration:
        population = scheduler_name(exp) in POPULATION_SCHEDULERS
        best = write_best_yaml(run_dir, winner, tune_spec.metric, population, exp.seeds)
        summary.best_yaml = str(best)
        if exp.seeds:
            trials = ", ".join(row.name for row in rows if row.rank == winner.rank)
            console.print(
                f"Best configuration ({trials}): {best} (rlplat train {best} runs it again on "
                "the same seeds)",
                highlight=False,
            )
        else:
            console.print(
                f"Best trial {winner.name}: {best} (rlplat train {best} runs it as one trial)",
                highlight=False,
            )


RLPLAT_ERROR = re.compile(r"rlplat\.errors\.(\w+): (.+)")


def _first_line(error: str) -> str:
    """rlplat's own message when a trial raised one (Ray wraps it in a traceback), else the
    error's last line."""
    own = RLPLAT_ERROR.search(error)
    if own:
        return own.group(2).strip()
    text = error.strip().splitlines()
    return text[-1] if text else error


def _is_user_error(error: str) -> bool:
    own = RLPLAT_ERROR.search(error)
    cls = getattr(errors, own.group(1), None) if own else None
    return isinstance(cls, type) and issubclass(cls, UserError)


def print_summary(summary: RunSummary, console: Console, *, commands: bool = True) -> None:
    """What happened, where the checkpoints are, and (``commands``) what to run next.

    A search's trials are in its ranked table already: only failures and the winner are listed.
    """
    run_dir = Path(summary.run_dir)
    console.print(
        f"\nRun {'stopped' if unfinished_trials(summary) else 'finished'} after "
        f"{format_duration(summary.wall_time_s)}: {run_dir}",
        highlight=False,
    )
    shown = summary.trials
    if summary.search is not None and configuration_count(summary.search) > 1:
        winners = {row.name for row in summary.search if row.rank == 1}
        shown = [t for t in summary.trials if t.error or t.name in winners]
    for trial in shown:
        _print_trial(trial, console)
    if summary.export:
        console.print(f"  export: {describe_export(summary.export)}", highlight=False)
    if commands:
        _print_next(summary, run_dir, console)


def _print_next(summary: RunSummary, run_dir: Path, console: Console) -> None:
    """The commands that evaluate, watch, resume or train the run again."""
    console.print("Next:", highlight=False)
    failed = [trial for trial in summary.trials if trial.error]
    if failed:
        console.print(
            f"  rlplat train --resume {run_dir} --retry-errored   # once the cause above is "
            f"fixed: the {len(failed)} failed trial(s) again, from their last checkpoints",
            highlight=False,
        )
    if any(trial.best_checkpoint for trial in summary.trials if not trial.error):
        console.print(
            f"  rlplat eval {run_dir}                     # 10 greedy episodes", highlight=False
        )
        if summary.watch_with:
            console.print(
                f"  rlplat eval {run_dir} -n 1 --render {summary.watch_with}   # watch one",
                highlight=False,
            )
    if summary.best_yaml:
        console.print(f"  rlplat train {summary.best_yaml}   # the best again", highlight=False)
    console.print(f"  tensorboard --logdir {run_dir.parent}", highlight=False)


def _print_trial(trial: TrialSummary, console: Console) -> None:
    """One trial of the summary: why it failed, or its returns, faults and checkpoints."""
    if trial.error:
        report = Path(trial.path) / "error.txt"
        where = f"\n  full traceback: {report}" if report.is_file() else ""
        console.print(
            f"  [red]{trial.name} failed[/red]: {escape(trial.error)}{where}", highlight=False
        )
        return
    best = f"{trial.best_return:.2f}" if trial.best_return is not None else "n/a"
    final = f"{trial.final_return:.2f}" if trial.final_return is not None else "n/a"
    console.print(
        f"  {trial.name}: {trial.iterations or 0} iterations, {trial.env_steps or 0:,} env "
        f"steps, training return (exploring) final {final}, best {best}",
        highlight=False,
    )
    for label, returns in (("policies", trial.policy_returns), ("agents", trial.agent_returns)):
        values = member_returns(returns)
        if values:
            console.print(f"    final {label}: {values}", highlight=False)
    if trial.env_runner_restarts:
        console.print(f"    env runner restarts: {trial.env_runner_restarts}", highlight=False)
    if trial.restarts:
        console.print(
            f"    restarted {trial.restarts} time(s) from its last checkpoint after losing its "
            "process or node",
            highlight=False,
        )
    if trial.time_budget_ended:
        console.print(
            f"    ended after {trial.time_s or 0:.0f} s of training: another iteration would "
            "have ended past stop.time_s (+10%)",
            highlight=False,
        )
    if trial.env_crashes:
        console.print(f"    env crashes (episodes dropped): {trial.env_crashes}", highlight=False)
    for diagnosis in trial.diagnoses:
        console.print(f"    [yellow]diagnosis[/] {escape(diagnosis)}", highlight=False)
    score = f"\n      by {trial.best_checkpoint_score}" if trial.best_checkpoint_score else ""
    console.print(f"    best checkpoint: {trial.best_checkpoint or 'none'}{score}", highlight=False)
    console.print(f"    last checkpoint: {trial.last_checkpoint or 'none'}", highlight=False)


def unfinished_trials(summary: RunSummary) -> list[str]:
    return [t.name for t in summary.trials if t.status == "not finished"]


def describe_export(export: dict[str, Any]) -> str:
    if export.get("error"):
        return f"FAILED: {export['error']}"
    return (
        f"{export['directory']} (parity passed: actions agree on {export['agreement']:.2%} of "
        f"{export['compared_actions']} observations)"
    )


def print_timings(record: dict[str, Any], console: Console) -> None:
    """``rlplat train --timings``: each stage's seconds and share of the command's wall time."""
    total = record["total_s"] or 1.0
    table = new_table("Where the command's time went", ["stage"], ["seconds", "share"])
    for stage, seconds in record["stages_s"].items():
        table.add_row(stage.replace("_", " "), f"{seconds:.2f}", f"{100 * seconds / total:.0f} %")
    table.add_row("total", f"{record['total_s']:.2f}", "")
    print_table(console, table)


def raise_if_failed(summary: RunSummary) -> None:
    """Exit 1 when a trial (or the export at the end) failed, 130 when the run was stopped
    before its end."""
    failed = [t for t in summary.trials if t.error]
    reasons = [reason for t in failed if (reason := storage_reason(t.error))]
    if reasons:
        raise storage_failed(Path(summary.run_dir), reasons[0])
    if failed and all(t.user_error for t in failed):
        raise UserError(failed[0].error or "")
    if failed:
        raise RlplatError(
            f"{len(failed)} of {len(summary.trials)} trial(s) failed; see the error.txt in "
            + ", ".join(t.path for t in failed)
        )
    unfinished = unfinished_trials(summary)
    if unfinished:
        raise Interrupted(
            f"{len(unfinished)} trial(s) did not finish ({', '.join(unfinished)}); continue "
            f"with: rlplat train --resume {summary.run_dir}"
        )
    if summary.export and summary.export.get("error"):
        raise RlplatError(f"the export at the end of the run failed: {summary.export['error']}")
