"""``rlplat train``: run a validated experiment through Ray Tune and report where it went."""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from rlplat.checkpoints import best_and_last, checkpoint_recorder, prune_checkpoints
from rlplat.config.load import LoadedExperiment
from rlplat.config.schema import Experiment, TuneSpec
from rlplat.config.spaces import describe
from rlplat.errors import Interrupted, RlplatError, UserError
from rlplat.metrics import (
    AGENT_RETURNS,
    ENV_CRASHES,
    ENV_STEPS,
    POLICY_RETURNS,
    RETURN_MEAN,
    RUNNER_RESTARTS,
    finite,
    lookup,
    member_returns,
    metric_path,
)
from rlplat.progress import ProgressPrinter, format_duration
from rlplat.run_dir import RESOLVED_EXPERIMENT, create_run_dir, write_run_files, write_summary
from rlplat.search import POPULATION_SCHEDULERS, scheduler_entry
from rlplat.search_report import TrialRow

if TYPE_CHECKING:
    from rlplat.plan import ResolvedRun


STATE_PERIOD_VARIABLE = "TUNE_GLOBAL_CHECKPOINT_S"


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
    error: str | None = None
    user_error: bool = False  # the trial failed on bad input (exit code 2), not at run time
    policy_returns: dict[str, float] = field(default_factory=dict)  # multi-agent, windowed
    agent_returns: dict[str, float] = field(default_factory=dict)
    env_runner_restarts: int = 0  # processes Ray restarted since the trial last started
    env_crashes: int = 0  # env steps/resets that raised; each dropped the episodes in progress


@dataclass
class RunSummary:
    run_dir: str
    wall_time_s: float
    trials: list[TrialSummary] = field(default_factory=list)
    search: list[TrialRow] | None = None  # a search's trials, best first
    best_yaml: str | None = None


def stop_criteria(exp: Experiment) -> dict[str, float]:
    return {metric_path(k): v for k, v in exp.stop.model_dump().items() if v is not None}


def trial_dirname(trial: Any) -> str:
    return f"trial_{trial.trial_id.rsplit('_', 1)[-1]}"


def _scheduler_name(exp: Experiment) -> str:
    return scheduler_entry(exp.tune or TuneSpec())[0]


def _callbacks(loaded: LoadedExperiment, run_dir: Path, console: Console) -> list:
    from rlplat.history import TrimHistoryOnRestart, TrimmingCSVLogger, TrimmingJsonLogger
    from rlplat.interrupt import GracefulStop
    from rlplat.search_report import LiveTrialTable, PopulationLog
    from rlplat.tensorboard import EnvStepTensorBoardLogger
    from rlplat.videos import TrainingVideos

    exp = loaded.experiment
    search = bool(loaded.spaces) or (exp.tune is not None and exp.tune.num_samples > 1)
    population = _scheduler_name(exp) in POPULATION_SCHEDULERS
    progress = ProgressPrinter(exp.stop, console, min_interval_s=10.0 if search else 1.0)
    tensorboard = EnvStepTensorBoardLogger(hparams=[s.path for s in loaded.spaces])
    # Trimming a restarted trial's history comes before the loggers reopen its files; the
    # loggers trim again what they copy back. Population-based trials are never trimmed.
    trimming = [TrimHistoryOnRestart(), TrimmingJsonLogger(), TrimmingCSVLogger()]
    callbacks = [] if population else trimming
    callbacks += [
        GracefulStop(console),
        progress,
        tensorboard,
        checkpoint_recorder(
            exp.checkpoint.score,
            exp.checkpoint.mode,
            exp.checkpoint.keep,
            prune_while_running=not population,
        ),
    ]
    if exp.video.every:
        callbacks.append(TrainingVideos(exp.video, tensorboard))
    if search:
        callbacks.append(LiveTrialTable(loaded.spaces, console))
    if population:
        callbacks.append(PopulationLog(run_dir, loaded.spaces, console))
    return callbacks


def train(
    loaded: LoadedExperiment,
    *,
    address: str | None = None,
    verbose: bool = False,
    console: Console | None = None,
) -> RunSummary:
    """Run the experiment through Ray Tune (one trial, or the search its ``tune`` section and
    spaces declare) and summarise it."""
    from ray import tune

    from rlplat.cluster import start_ray
    from rlplat.storage import atomic_filesystem
    from rlplat.trainable import trainable_for

    console = console or Console()
    start_ray(address, verbose)
    planned = _checked_plan(loaded, console)
    loaded = planned.loaded
    exp = loaded.experiment
    search = loaded.search
    tune_spec = exp.tune or TuneSpec()
    trainable = trainable_for(exp.algorithm)
    run_dir = create_run_dir(Path(exp.output_dir).resolve() / exp.name)
    write_run_files(run_dir, loaded.resolved(), address, cluster=planned.record())
    console.print(f"Run directory: [bold]{run_dir}[/bold]", highlight=False)
    if loaded.spaces:
        console.print(
            "Searching: " + "; ".join(describe(space) for space in loaded.spaces), highlight=False
        )

    _quiet_tune_output(exp)
    score = metric_path(exp.checkpoint.score)
    tuner = tune.Tuner(
        trainable,
        param_space=search.param_space,
        tune_config=tune.TuneConfig(
            metric=metric_path(tune_spec.metric),
            mode=tune_spec.mode,
            search_alg=search.searcher,
            scheduler=search.scheduler,
            num_samples=tune_spec.num_samples,
            trial_name_creator=trial_dirname,
            trial_dirname_creator=trial_dirname,
        ),
        run_config=tune.RunConfig(
            name=run_dir.name,
            storage_path=str(run_dir.parent),
            storage_filesystem=atomic_filesystem(),
            stop=stop_criteria(exp),
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=None,  # rlplat's checkpoint_recorder keeps checkpoint.keep
                checkpoint_score_attribute=score,
                checkpoint_score_order=exp.checkpoint.mode,
                checkpoint_frequency=exp.checkpoint.every,
                checkpoint_at_end=exp.checkpoint.at_end,
            ),
            callbacks=_callbacks(loaded, run_dir, console),
            verbose=0,
        ),
    )
    return _fit(tuner, loaded, run_dir, console)


def resume(
    run_dir: Path,
    *,
    retry_errored: bool = False,
    address: str | None = None,
    verbose: bool = False,
    console: Console | None = None,
) -> RunSummary:
    """Continue an interrupted run in its own directory: finished trials are kept, unfinished
    ones continue from their last checkpoint, errored ones too with ``retry_errored``."""
    from ray import tune

    from rlplat.atomic import remove_partial_files
    from rlplat.cluster import start_ray
    from rlplat.config.load import load_experiment
    from rlplat.storage import atomic_filesystem
    from rlplat.trainable import trainable_for

    console = console or Console()
    run_dir = run_dir.expanduser().resolve()
    if not (run_dir / RESOLVED_EXPERIMENT).is_file() or not tune.Tuner.can_restore(str(run_dir)):
        raise UserError(
            f"{run_dir} is not a run directory that can be resumed: it needs the "
            f"{RESOLVED_EXPERIMENT} and the Tune state (tuner.pkl) that rlplat train writes when "
            "a run starts. Give the <output_dir>/<name>/<timestamp> directory printed as 'Run "
            "directory:'."
        )
    loaded = load_experiment(run_dir / RESOLVED_EXPERIMENT)
    start_ray(address, verbose)
    _checked_plan(loaded, console)
    console.print(f"Resuming [bold]{run_dir}[/bold]", highlight=False)
    _quiet_tune_output(loaded.experiment)
    remove_partial_files(run_dir)
    drop_stale_decisions(run_dir)
    tuner = tune.Tuner.restore(
        str(run_dir),
        trainable=trainable_for(loaded.experiment.algorithm),
        resume_unfinished=True,
        resume_errored=retry_errored,
        storage_filesystem=atomic_filesystem(),
    )
    return _fit(tuner, loaded, run_dir, console)


def drop_stale_decisions(run_dir: Path) -> None:
    """Clear the decisions Tune's saved state holds for saves in flight when it was taken.

    Tune saves its controller with them (``_cached_trial_decisions``: what to do with a trial
    once its checkpoint is written). A trial that failed while saving left "STOP" there; the
    resumed run applied it to the first checkpoint of the retried trial, which then ended as
    finished one iteration after it was resumed. A new process has no save in flight.
    """
    from rlplat.atomic import write_atomic
    from rlplat.checkpoints import newest_state

    state_file = newest_state(run_dir)
    if state_file is None:
        return
    state = json.loads(state_file.read_text())
    runner = state.get("runner_data", {})
    stale = ("_cached_trial_decisions", "_queued_trial_decisions")
    if any(runner.get(key) for key in stale):
        runner.update({key: {} for key in stale})
        write_atomic(state_file, json.dumps(state))


def _checked_plan(loaded: LoadedExperiment, console: Console) -> ResolvedRun:
    """Resolve resource preferences on the connected cluster; refuse a trial no node set can
    hold (Tune would keep it PENDING forever)."""
    from rlplat.plan import plan_run, refuse_if_impossible, storage_note

    planned = plan_run(loaded)
    refuse_if_impossible(planned)
    for line in [choice.describe() for choice in planned.choices] + [storage_note(planned)]:
        if line:
            console.print(line, highlight=False)
    return planned


USER_STATE_PERIOD = os.environ.get(STATE_PERIOD_VARIABLE)


def _quiet_tune_output(exp: Experiment) -> None:
    # Tune's own progress tables would interleave with ours; verbose=0 silences the old engine.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Tune records which checkpoint each trial resumes from every ~10 s by default; a run killed
    # in between resumes from an older checkpoint (or from scratch). On local storage saving that
    # small file every second costs nothing. Not with HyperBand (and BOHB): with states saved that
    # often, a trial it paused was left paused when the search ended.
    if USER_STATE_PERIOD is None:
        if _scheduler_name(exp) == "hyperband":
            os.environ.pop(STATE_PERIOD_VARIABLE, None)
        else:
            os.environ[STATE_PERIOD_VARIABLE] = "1"
    # The windowed return appears once the first episode ends; until then a scheduler waits.
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")


def _fit(tuner: Any, loaded: LoadedExperiment, run_dir: Path, console: Console) -> RunSummary:
    from rlplat.storage import storage_failed, storage_reason

    started = time.monotonic()
    try:
        grid = tuner.fit()
        prune_checkpoints(run_dir, loaded.experiment.checkpoint.keep)
        summary = summarize(grid, loaded, run_dir, time.monotonic() - started)
        if summary.search is not None:
            report_search(summary, loaded, run_dir, console)
        write_summary(run_dir, asdict(summary))
    except Exception as exc:
        reason = storage_reason(exc)
        if reason is None:
            raise
        raise storage_failed(run_dir, reason) from exc
    return summary


def summarize(grid: Any, loaded: LoadedExperiment, run_dir: Path, wall_time_s: float) -> RunSummary:
    """One TrialSummary per trial, and for a search the ranked rows of results.csv."""
    from ray.tune import ExperimentAnalysis

    from rlplat.config.spaces import value_at
    from rlplat.search_report import TARGET_REACHED, TrialRow, rank_rows, stop_reason
    from rlplat.trainable import trial_experiment

    exp = loaded.experiment
    tune_spec = exp.tune or TuneSpec()
    metric = metric_path(tune_spec.metric)
    scheduler = _scheduler_name(exp)
    # Tune's own record of each trial: its status, and its config (PBT changes it as it runs).
    trials = {Path(trial.path).name: trial for trial in ExperimentAnalysis(str(run_dir)).trials}
    # The trials that failed in this process: the record above is older when the run
    # directory's disk failed, and so is the error report copied there.
    failed = {Path(t.path).name: t for t in grid._experiment_analysis.trials if t.status == "ERROR"}
    summary = RunSummary(run_dir=str(run_dir), wall_time_s=wall_time_s)
    rows = []
    for result in grid:
        metrics = result.metrics or {}
        trial_path = Path(result.path)
        best, last = best_and_last(trial_path)
        trial = trials.get(trial_path.name)
        error = result.error
        if error is None and trial_path.name in failed:
            error = _staged_error(failed[trial_path.name])
        status = _status(trial.status if trial else None, error)
        history = _column(result, metric)
        summary.trials.append(
            TrialSummary(
                name=trial_path.name,
                path=str(trial_path),
                status=status,
                iterations=metrics.get("training_iteration"),
                env_steps=int(finite(lookup(metrics, ENV_STEPS)) or 0) or None,
                final_return=finite(lookup(metrics, RETURN_MEAN)),
                best_return=_extreme(_column(result, RETURN_MEAN), "max"),
                best_checkpoint=str(best) if best else None,
                last_checkpoint=str(last) if last else None,
                error=_first_line(error) if error else None,
                user_error=bool(error) and _is_user_error(error),
                policy_returns=dict(lookup(metrics, POLICY_RETURNS) or {}),
                agent_returns=dict(lookup(metrics, AGENT_RETURNS) or {}),
                env_runner_restarts=int(finite(lookup(metrics, RUNNER_RESTARTS)) or 0),
                env_crashes=int(finite(lookup(metrics, ENV_CRASHES)) or 0),
            )
        )
        experiment = trial_experiment(trial.config if trial else {})
        rows.append(
            TrialRow(
                name=trial_path.name,
                status=status,
                stop_reason=stop_reason(status, metrics, exp.stop, scheduler),
                iterations=metrics.get("training_iteration"),
                env_steps=summary.trials[-1].env_steps,
                final=finite(lookup(metrics, metric)),
                best=_extreme(history, tune_spec.mode),
                time_s=finite(metrics.get("time_total_s")),
                params={s.dotted: value_at(experiment, s.path) for s in loaded.spaces},
                experiment=experiment,
                best_checkpoint=summary.trials[-1].best_checkpoint,
            )
        )
    summary.trials.sort(key=lambda t: t.name)
    if len(rows) > 1 or loaded.spaces:
        by_return = metric == RETURN_MEAN and tune_spec.mode == "max"
        summary.search = rank_rows(rows, tune_spec.mode, TARGET_REACHED if by_return else None)
    return summary


def _status(tune_status: str | None, error: Any) -> str:
    if error or tune_status == "ERROR":
        return "error"
    return "finished" if tune_status == "TERMINATED" else "not finished"


def _staged_error(trial: Any) -> str | None:
    """A failed trial's error report in Tune's local staging directory: the copy in the run
    directory is missing when that directory's disk was what failed."""
    try:
        return Path(trial.local_path, "error.txt").read_text() or None
    except OSError:
        return None


def _column(result: Any, path: str) -> list[float]:
    """Every finite value a trial reported for ``path`` (its progress.csv column)."""
    frame = result.metrics_dataframe
    if frame is None or path not in frame:
        return []
    return [v for v in (finite(x) for x in frame[path].tolist()) if v is not None]


def _extreme(values: list[float], mode: str) -> float | None:
    if not values:
        return None
    return max(values) if mode == "max" else min(values)


def report_search(
    summary: RunSummary, loaded: LoadedExperiment, run_dir: Path, console: Console
) -> None:
    """The ranked table, results.csv and best.yaml of a search."""
    from rlplat.search_report import print_table, ranked_table, write_best_yaml, write_results_csv

    exp = loaded.experiment
    tune_spec = exp.tune or TuneSpec()
    rows = summary.search or []
    print_table(console, ranked_table(rows, tune_spec.metric, "Trials, best first"))
    csv_path = write_results_csv(run_dir, rows, tune_spec.metric)
    console.print(f"All trials: {csv_path}", highlight=False)
    winner = next((row for row in rows if row.status != "error" and row.final is not None), None)
    if winner is not None:
        population = _scheduler_name(exp) in POPULATION_SCHEDULERS
        best = write_best_yaml(run_dir, winner, tune_spec.metric, population)
        summary.best_yaml = str(best)
        console.print(
            f"Best trial {winner.name}: {best} (rlplat train {best} runs it as one trial)",
            highlight=False,
        )


RLPLAT_ERROR = re.compile(r"rlplat\.errors\.(\w+): (.+)")


def _first_line(error: BaseException) -> str:
    """rlplat's own message when a trial raised one (Ray wraps it in a traceback), else the
    error's last line."""
    own = RLPLAT_ERROR.search(str(error))
    if own:
        return own.group(2).strip()
    text = str(error).strip().splitlines()
    return text[-1] if text else type(error).__name__


def _is_user_error(error: BaseException) -> bool:
    from rlplat import errors

    own = RLPLAT_ERROR.search(str(error))
    cls = getattr(errors, own.group(1), None) if own else None
    return isinstance(cls, type) and issubclass(cls, UserError)


def print_summary(summary: RunSummary, console: Console) -> None:
    """What happened, where the checkpoints are, and what to run next.

    A search's trials are in its ranked table already: only failures and the winner are listed.
    """
    run_dir = Path(summary.run_dir)
    console.print(
        f"\nRun {'stopped' if _unfinished(summary) else 'finished'} after "
        f"{format_duration(summary.wall_time_s)}: {run_dir}",
        highlight=False,
    )
    shown = summary.trials
    if summary.search is not None:
        winner = summary.search[0].name if summary.search else None
        shown = [t for t in summary.trials if t.error or t.name == winner]
    for trial in shown:
        if trial.error:
            report = Path(trial.path) / "error.txt"
            where = f"\n  full traceback: {report}" if report.is_file() else ""
            console.print(
                f"  [red]{trial.name} failed[/red]: {escape(trial.error)}{where}", highlight=False
            )
            continue
        best = f"{trial.best_return:.2f}" if trial.best_return is not None else "n/a"
        final = f"{trial.final_return:.2f}" if trial.final_return is not None else "n/a"
        console.print(
            f"  {trial.name}: {trial.iterations} iterations, {trial.env_steps or 0:,} env steps, "
            f"final return {final}, best return {best}",
            highlight=False,
        )
        for label, returns in (("policies", trial.policy_returns), ("agents", trial.agent_returns)):
            values = member_returns(returns)
            if values:
                console.print(f"    final {label}: {values}", highlight=False)
        if trial.env_runner_restarts:
            console.print(
                f"    env runner restarts: {trial.env_runner_restarts}", highlight=False
            )
        if trial.env_crashes:
            console.print(
                f"    env crashes (episodes dropped): {trial.env_crashes}", highlight=False
            )
        console.print(f"    best checkpoint: {trial.best_checkpoint}", highlight=False)
        console.print(f"    last checkpoint: {trial.last_checkpoint}", highlight=False)
    console.print("Next:", highlight=False)
    if any(trial.best_checkpoint for trial in summary.trials):
        console.print(
            f"  rlplat eval {run_dir}                     # 10 greedy episodes", highlight=False
        )
        console.print(f"  rlplat eval {run_dir} -n 1 --render gif   # watch one", highlight=False)
    if summary.best_yaml:
        console.print(
            f"  rlplat train {summary.best_yaml}   # the best trial again", highlight=False
        )
    console.print(f"  tensorboard --logdir {run_dir.parent}", highlight=False)


def _unfinished(summary: RunSummary) -> list[str]:
    return [t.name for t in summary.trials if t.status == "not finished"]


def raise_if_failed(summary: RunSummary) -> None:
    """Exit 1 when a trial failed, 130 when the run was stopped before its end."""
    from rlplat.storage import storage_failed, storage_reason

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
    unfinished = _unfinished(summary)
    if unfinished:
        raise Interrupted(
            f"{len(unfinished)} trial(s) did not finish ({', '.join(unfinished)}); continue "
            f"with: rlplat train --resume {summary.run_dir}"
        )
