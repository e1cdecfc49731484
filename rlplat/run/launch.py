"""``rlplat train``: prepare the experiment on the cluster, train it (one trial in rlplat's own
loop, a search or several seeds through Ray Tune), summarise."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ray import tune
from ray.exceptions import RayActorError
from ray.tune.logger import CSVLoggerCallback
from rich.console import Console

from rlplat.callbacks.checkpoints import checkpoint_recorder, prune_checkpoints
from rlplat.callbacks.health import TrainingDoctor
from rlplat.callbacks.history import (
    ExperimentJsonLogger,
    TrimHistoryOnRestart,
    TrimmingCSVLogger,
    TrimmingJsonLogger,
)
from rlplat.callbacks.interrupt import GracefulStop
from rlplat.callbacks.observers import Observer, TuneObservers
from rlplat.callbacks.progress import NoTuneTable, ProgressPrinter
from rlplat.callbacks.search_report import LiveTrialTable, PopulationLog
from rlplat.callbacks.tensorboard import TensorBoardWriter
from rlplat.callbacks.timing import TrainingClock, reset_training_window, training_window
from rlplat.callbacks.trackers import TrackerObserver, check_trackers, close_trackers
from rlplat.callbacks.videos import TrainingVideos
from rlplat.checkpoints import (
    RESOLVED_EXPERIMENT,
    checkpoints_in,
    trials_in,
)
from rlplat.cluster.connect import embedded, start_ray, stop_ray
from rlplat.cluster.placement import Node, cluster_nodes, local_machine
from rlplat.errors import RlplatError, UserError
from rlplat.experiment.load import LoadedExperiment, load_experiment
from rlplat.experiment.schema import Experiment, TuneSpec
from rlplat.experiment.spaces import describe
from rlplat.export import load_exporter
from rlplat.metrics import metric_path
from rlplat.prepare import PreparedRun, prepare, trial_config
from rlplat.prepare.run_spec import (
    print_dry_run,
    print_plan,
    refuse_if_impossible,
    runs_in_command,
    storage_note,
    trial_count,
    trial_resources,
)
from rlplat.prepare.search import POPULATION_SCHEDULERS, scheduler_name
from rlplat.run.loop import (
    SingleTrialLoop,
    ended_trial,
    settings_of,
)
from rlplat.run.options import TrainOptions
from rlplat.run.rescore import rescore_run
from rlplat.run.run_dir import (
    create_run_dir,
    is_loop_run,
    record_driver,
    record_restarts,
    record_timings,
    write_run_files,
    write_summary,
)
from rlplat.run.stacked_loop import StackedTrialsLoop
from rlplat.run.stages import first_stage, mark_next_stage_started, next_stage, write_next_stage
from rlplat.run.storage import atomic_filesystem, storage_failed
from rlplat.run.summary import (
    RunSummary,
    TrialOutcome,
    print_summary,
    print_timings,
    raise_if_failed,
    report_search,
    summarize,
    unfinished_trials,
)
from rlplat.run.trials import trainable_for
from rlplat.run.tune_results import tune_outcomes
from rlplat.seams.ray_internals import kv_put
from rlplat.seams.tune import drop_stale_decisions, fitting, set_tune_switches
from rlplat.util.atomic import remove_partial_files
from rlplat.util.disk import storage_reason
from rlplat.util.notebook import in_jupyter_kernel
from rlplat.util.project import project_code
from rlplat.util.signals import signal_handlers_kept
from rlplat.util.timings import StageClock

STATE_PERIOD_VARIABLE = "TUNE_GLOBAL_CHECKPOINT_S"
AUTO_LOGGERS_VARIABLE = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"
USER_STATE_PERIOD = os.environ.get(STATE_PERIOD_VARIABLE)


def stop_criteria(exp: Experiment) -> dict[str, float]:
    return {metric_path(k): v for k, v in exp.stop.model_dump().items() if v is not None}


def claim_on_cluster(name: str) -> bool:
    """Reserve a run directory name on the connected Ray cluster; False when another run has
    it. Tune stages a run's trial files on the cluster's nodes under the run directory's name
    (and the second its driver started), so two runs of one name at once, even in different
    output directories, would write into each other's trials."""
    existed = kv_put(f"run-dir/{name}", b"", overwrite=False, namespace="rlplat")
    return not existed


def trial_dirname(trial: Any) -> str:
    return f"trial_{trial.trial_id.rsplit('_', 1)[-1]}"


def train(
    loaded: LoadedExperiment,
    *,
    address: str | None = None,
    verbose: bool = False,
    console: Console | None = None,
    clock: StageClock | None = None,
    on_run_dir: Callable[[Path], None] | None = None,
) -> RunSummary:
    """Train the experiment (one trial in rlplat's own loop, or on Ray Tune the search its
    ``tune`` section and spaces declare, or its seeds) and summarise it. ``clock`` gets the
    seconds of the command's stages; ``on_run_dir`` is called with the run directory once its
    files are written."""
    console = console or Console()
    clock = clock or StageClock()
    code = project_code(loaded.experiment.env.user_modules)
    if embedded(address):
        # An embedded Ray takes this machine as it is: plan on it (and refuse what cannot run
        # there) before paying for Ray's start.
        run = prepare_on_cluster(loaded, console, local_machine())
        clock.lap("validation")
        _say_note(start_ray(None, verbose, code), console)
        clock.lap("ray_start")
    else:
        _say_note(start_ray(address, verbose, code), console)
        clock.lap("ray_start")
        run = prepare_on_cluster(loaded, console, cluster_nodes())
        clock.lap("validation")
    in_command = runs_in_command(run)
    exp = run.experiment
    tune_spec = exp.tune or TuneSpec()
    run_dir = create_run_dir(Path(exp.output_dir).resolve() / exp.name, claim_on_cluster)
    trial_process = {"trial_process": "command" if in_command else "actor"}
    write_run_files(run_dir, run.resolved(), address, cluster={**run.record(), **trial_process})
    if on_run_dir is not None:
        on_run_dir(run_dir)
    console.print(f"Run directory: [bold]{run_dir}[/bold]", highlight=False)
    if run.spaces:
        console.print(
            "Searching: " + "; ".join(describe(space) for space in run.spaces), highlight=False
        )

    if in_command:
        return _conclude(_loop(run, run_dir, console).train, run, run_dir, console, clock)
    _quiet_tune_output(exp)
    tuner = tune.Tuner(
        tune.with_resources(trainable_for(exp.algorithm), trial_resources(run)),
        param_space=trial_config(run),
        tune_config=tune.TuneConfig(
            metric=metric_path(tune_spec.metric),
            mode=tune_spec.mode,
            search_alg=run.search.searcher,
            scheduler=run.search.scheduler,
            num_samples=run.search.num_samples,
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
                checkpoint_frequency=exp.checkpoint.every,
                checkpoint_at_end=exp.checkpoint.at_end,
            ),
            callbacks=_callbacks(run, run_dir, console),
            verbose=0,
            progress_reporter=NoTuneTable() if in_jupyter_kernel() else None,
        ),
    )
    return _conclude(_with_tune(tuner, run, run_dir, console), run, run_dir, console, clock)


def resume(
    run_dir: Path,
    *,
    retry_errored: bool = False,
    address: str | None = None,
    verbose: bool = False,
    console: Console | None = None,
    clock: StageClock | None = None,
) -> RunSummary:
    """Continue an interrupted run in its own directory: finished trials are kept, unfinished
    ones continue from their last checkpoint, errored ones too with ``retry_errored``."""
    console = console or Console()
    clock = clock or StageClock()
    run_dir = run_dir.expanduser().resolve()
    if not (run_dir / RESOLVED_EXPERIMENT).is_file() or not resumable(run_dir):
        raise UserError(
            f"{run_dir} is not a run directory that can be resumed: it needs the "
            f"{RESOLVED_EXPERIMENT} and run.json that rlplat train writes when a run starts (and, "
            "for a run on Tune, Tune's state: tuner.pkl). Give the "
            "<output_dir>/<name>/<timestamp> directory printed as 'Run directory:'."
        )
    if not retry_errored and not trials_in(run_dir):
        raise UserError(
            f"{run_dir} has nothing to resume from: none of its trials wrote a checkpoint before "
            "the run stopped, so a resumed run would start again from its first iteration. "
            f"Start it again as a new run: rlplat train {run_dir / RESOLVED_EXPERIMENT}."
        )
    loaded = load_experiment(run_dir / RESOLVED_EXPERIMENT)
    code = project_code(loaded.experiment.env.user_modules)
    _say_note(start_ray(address, verbose, code), console)
    clock.lap("ray_start")
    run = prepare_on_cluster(loaded, console, cluster_nodes())
    clock.lap("validation")
    console.print(f"Resuming [bold]{run_dir}[/bold]", highlight=False)
    record_driver(run_dir)
    if is_loop_run(run_dir) and run.experiment.stacked:
        stacked = _loop(run, run_dir, console)
        resumed = lambda: stacked.train(resuming=True, retry_errored=retry_errored)  # noqa: E731
        return _conclude(resumed, run, run_dir, console, clock)
    if is_loop_run(run_dir):
        ended = ended_trial(run_dir, retry_errored)
        if ended is not None:
            return _conclude(lambda: [ended], run, run_dir, console, clock)
        loop = _loop(run, run_dir, console)
        return _conclude(lambda: loop.train(resuming=True), run, run_dir, console, clock)
    _quiet_tune_output(run.experiment)
    tuner = _restored_tuner(run, run_dir, retry_errored)
    return _conclude(_with_tune(tuner, run, run_dir, console), run, run_dir, console, clock)


def resumable(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run ``--resume`` can continue: one trained by rlplat's own
    loop, or one Tune can restore."""
    return is_loop_run(run_dir) or tune.Tuner.can_restore(str(run_dir))


def _restart_lost_trials(grid: Any, run: PreparedRun, run_dir: Path, console: Console) -> Any:
    """Trials whose process or node was lost (Ray's ``RayActorError``: the actor died, or its
    node did), restarted from their last checkpoints through Tune's restore, which continues
    result.json, progress.csv and TensorBoard from the checkpoint's iteration as ``--resume``
    does; at most ``fault_tolerance.trial_restarts`` times. A trial's own exception is not a
    loss. Tune's restore retries every errored trial of a search, so one that failed by itself
    beside a lost one is retried too, within the same count."""
    allowed = run.experiment.trial_restarts()
    for restart in range(1, allowed + 1):
        lost = {Path(result.path): result.error for result in grid
                if isinstance(result.error, RayActorError)}  # fmt: skip
        if not lost:
            break
        for trial, error in lost.items():
            start = "its last checkpoint" if checkpoints_in(trial) else "its start (no checkpoint)"
            console.print(
                f"{trial.name}: lost its process or node ({_last_line(error)}); restarting from "
                f"{start} (restart {restart} of {allowed}: fault_tolerance.trial_restarts)",
                highlight=False,
            )
        record_restarts(run_dir, [trial.name for trial in lost])
        grid = _fit_once(_restored_tuner(run, run_dir, retry_errored=True))
    return grid


def _fit_once(tuner: Any) -> Any:
    """``tuner.fit()``, with the signal handlers as they were before it once it returns."""
    with fitting(), signal_handlers_kept():
        return tuner.fit()


def _last_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def _restored_tuner(run: PreparedRun, run_dir: Path, retry_errored: bool) -> Any:
    """Tune's run in ``run_dir`` again: unfinished trials continue from their last checkpoints,
    errored ones too with ``retry_errored``."""
    remove_partial_files(run_dir)
    drop_stale_decisions(run_dir)
    return tune.Tuner.restore(
        str(run_dir),
        trainable=tune.with_resources(
            trainable_for(run.experiment.algorithm), trial_resources(run)
        ),
        resume_unfinished=True,
        resume_errored=retry_errored,
        storage_filesystem=atomic_filesystem(),
    )


def train_command(
    experiment: Path | None,
    overrides: list[str],
    options: TrainOptions,
    *,
    verbose: bool,
    console: Console,
    clock: StageClock,
    stay_connected: bool = False,
    loaded: LoadedExperiment | None = None,
    commands: bool = True,
) -> RunSummary | None:
    """``rlplat train``: check the experiment (``dry_run``: only that; None), or continue the run
    ``resume`` names, then :func:`finish`; the run's summary. At the end the command leaves a
    local Ray (a warm one stays up), unless ``stay_connected`` (rlplat.train: later calls in
    this process use it again). ``loaded``: the file with its overrides as the caller loaded
    it (it is read once). ``commands``: the summary ends with the commands to run next (the
    CLI's; rlplat.train's caller has the Run in hand instead)."""
    local = embedded(options.address)
    started_here = local and not stay_connected
    common = {"address": options.address, "verbose": verbose, "console": console, "clock": clock}
    if options.resume is not None:
        given = (
            options.dry_run, options.from_checkpoint, options.seed, options.seeds, options.stacked
        )
        if experiment or overrides or any(value not in (None, False) for value in given):
            raise UserError(
                "--resume continues a run with the experiment it started with: give only the run "
                "directory (rlplat train --resume <run dir>), no experiment file, overrides, "
                "--from, --seed, --seeds, --stacked or --dry-run."
            )
        summary = resume(options.resume, retry_errored=options.retry_errored, **common)
        summary, clock = _then(summary, started_here, options, common, commands)
    elif experiment is None:
        raise UserError(
            "give an experiment file (rlplat train experiments/cartpole_ppo.yaml), or "
            "--resume <run dir> to continue an interrupted run."
        )
    else:
        loaded = loaded or load_experiment(experiment, options.with_overrides(overrides))
        first = first_stage(loaded)
        if options.dry_run:
            nodes = local_machine() if local else None  # the capacity it will ask for
            if first is not None:
                console.print(f"First stage: {first.locate.source}", highlight=False)
                print_dry_run(first, Path(first.locate.source), console, nodes)
                console.print("Then:", highlight=False)
            print_dry_run(loaded, experiment, console, nodes)
            return None
        if first is None:
            summary = train(loaded, **common)
        else:
            if local:  # this file is checked before the first stage trains
                refuse_if_impossible(prepare(loaded, local_machine()))
            console.print(
                f"First stage: {first.locate.source} (init.experiment), then {experiment}",
                highlight=False,
            )
            summary = train(
                first, on_run_dir=lambda run_dir: write_next_stage(run_dir, loaded.data), **common
            )
            summary, clock = _then(summary, started_here, options, common, commands)
    finish(
        summary,
        clock,
        console,
        shutdown_ray=started_here,
        show_timings=options.timings,
        commands=commands,
    )
    return summary


def _then(
    summary: RunSummary,
    started_here: bool,
    options: TrainOptions,
    common: dict[str, Any],
    commands: bool,
) -> tuple[RunSummary, StageClock]:
    """After a first stage (``init.experiment``) that finished: train the experiment that
    follows it from its checkpoint, or resume that run where it has started already; that run's
    summary and the clock of its stages. Other runs, and first stages that failed or were
    stopped, are returned as they are, with the command's clock."""
    stage = next_stage(Path(summary.run_dir))
    if stage is None or unfinished_trials(summary) or any(t.error for t in summary.trials):
        return summary, common["clock"]
    console = common["console"]
    finish(
        summary,
        common["clock"],
        console,
        shutdown_ray=started_here,
        show_timings=options.timings,
        commands=commands,
    )
    clock = StageClock(started=time.time())
    common = {**common, "clock": clock}
    if stage.run_dir is not None and resumable(stage.run_dir):
        return resume(stage.run_dir, retry_errored=options.retry_errored, **common), clock
    console.print(f"\nNext stage: {stage.experiment}", highlight=False)
    first_run = Path(summary.run_dir)
    following = train(
        load_experiment(stage.experiment),
        on_run_dir=lambda run_dir: mark_next_stage_started(first_run, run_dir),
        **common,
    )
    return following, clock


def plan_command(
    loaded: LoadedExperiment, address: str | None, verbose: bool, console: Console
) -> None:
    """``rlplat plan``: where one trial's env runners and learners would run on the cluster (a
    local one by default), and a UserError (exit 2) where no node set can hold a trial."""
    code = project_code(loaded.experiment.env.user_modules)
    _say_note(start_ray(address, verbose, code), console)
    run = prepare(loaded, cluster_nodes())
    print_plan(run, console)
    refuse_if_impossible(run)


def finish(
    summary: RunSummary,
    clock: StageClock,
    console: Console,
    *,
    shutdown_ray: bool,
    show_timings: bool,
    commands: bool = True,
) -> None:
    """The end of ``rlplat train``: the summary, Ray's shutdown (when the command started it),
    the stage timings in run.json (and on the terminal with ``show_timings``), then the exit
    status (an error for failed trials)."""
    print_summary(summary, console, commands=commands)
    if shutdown_ray:
        stop_ray()
    clock.lap("shutdown")
    record = clock.record()
    record_timings(Path(summary.run_dir), record)
    if show_timings:
        print_timings(record, console)
    raise_if_failed(summary)


def _say_note(note: str | None, console: Console) -> None:
    if note:
        console.print(note, highlight=False)


def prepare_on_cluster(
    loaded: LoadedExperiment, console: Console, nodes: list[Node]
) -> PreparedRun:
    """Prepare the run on the cluster's ``nodes`` (resource preferences resolved); refuse a
    trial no node set can hold (Tune would keep it PENDING forever)."""
    run = prepare(loaded, nodes)
    refuse_if_impossible(run)
    check_trackers(run.experiment, run.locate)
    notes = [f"Default: {note}" for note in run.notes]
    lines = [choice.describe() for choice in run.choices] + notes
    for line in [*lines, run.sampling_line(), run.learner_line(), storage_note(run)]:
        if line:
            console.print(line, highlight=False)
    return run


def _callbacks(run: PreparedRun, run_dir: Path, console: Console) -> list:
    exp = run.experiment
    search = bool(run.spaces) or (exp.tune is not None and exp.tune.num_samples > 1)
    population = scheduler_name(exp) in POPULATION_SCHEDULERS
    # Trimming a restarted trial's history comes before the loggers reopen its files; the
    # loggers trim again what they copy back. Population-based trials are never trimmed.
    if population:
        callbacks: list = [ExperimentJsonLogger(), CSVLoggerCallback()]
    else:
        callbacks = [TrimHistoryOnRestart(), TrimmingJsonLogger(), TrimmingCSVLogger()]
    callbacks += [
        GracefulStop(console, exp.watchdog_s),
        # Completes each checkpoint with the files the observers read (its experiment).
        checkpoint_recorder(
            exp.score_metric(),
            exp.checkpoint.mode,
            exp.checkpoint.keep,
            prune_while_running=not population,
        ),
        TuneObservers(_observers(run, run_dir, console, search)),
    ]
    if search:
        callbacks.append(LiveTrialTable(run.spaces, console, seeded=bool(exp.seeds)))
    if population:
        callbacks.append(PopulationLog(run_dir, run.spaces, console))
    return callbacks


def _observers(run: PreparedRun, run_dir: Path, console: Console, search: bool) -> list[Observer]:
    """What watches each trial's results and checkpoints, in the order it is told of them."""
    exp = run.experiment
    tensorboard = TensorBoardWriter(hparams=[p for s in run.spaces for p in s.value_paths])
    observers: list[Observer] = [
        TrainingClock(),
        ProgressPrinter(exp.stop, console, min_interval_s=10.0 if search else 1.0),
        tensorboard,
        TrainingDoctor(console, tensorboard),
    ]
    if exp.video.every:
        observers.append(TrainingVideos(exp.video, tensorboard))
    if exp.loggers.mlflow or exp.loggers.wandb:
        grouped = bool(run.spaces) or trial_count(exp, run.spaces) > 1
        observers.append(TrackerObserver(exp, run_dir, grouped=grouped, console=console))
    return observers


def _quiet_tune_output(exp: Experiment) -> None:
    # Tune's legacy output, which verbose=0 silences, and results allowed to lack the metric
    # until the first episode ends (set_tune_switches says why).
    set_tune_switches()
    # rlplat gives Tune its result.json and progress.csv loggers, and writes TensorBoard itself.
    os.environ[AUTO_LOGGERS_VARIABLE] = "1"
    # Tune records which checkpoint each trial resumes from every ~10 s by default; a run killed
    # in between resumes from an older checkpoint (or from scratch). On local storage saving that
    # small file every second costs nothing.
    if USER_STATE_PERIOD is None:
        os.environ[STATE_PERIOD_VARIABLE] = "1"


def export_at_end(run_dir: Path, episodes: int, console: Console) -> dict[str, Any]:
    """``export.at_end``: the run's best checkpoint into ``<run dir>/export``."""
    console.print("Exporting the best checkpoint (export.at_end)...", highlight=False)
    try:
        exporter = load_exporter()
        report = exporter.export(
            run_dir,
            exporter.ExportOptions(out=run_dir / "export", episodes=episodes),
            say=lambda _: None,
        )
    except RlplatError as exc:
        return {"error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - the trained run stands; its summary says why
        return {"error": f"{type(exc).__name__}: {exc}"}
    certificate = report.certificate
    return {
        "directory": str(report.directory),
        "passed": True,
        "agreement": certificate.agreement,
        "compared_actions": certificate.compared_actions,
    }


def tracker_status(summary: RunSummary) -> str:
    """How the run ended, in the trackers' words."""
    if any(trial.status == "error" for trial in summary.trials):
        return "FAILED"
    return "KILLED" if unfinished_trials(summary) else "FINISHED"


def _loop(
    run: PreparedRun, run_dir: Path, console: Console
) -> SingleTrialLoop | StackedTrialsLoop:
    """rlplat's own loop for the run's one trial, or for its stacked seeds, in this process."""
    stacked = run.experiment.stacked
    settings = settings_of(run, stop_criteria(run.experiment))
    observers = _observers(run, run_dir, console, search=stacked)
    loop = StackedTrialsLoop if stacked else SingleTrialLoop
    return loop(run, run_dir, settings, observers, console)


def _with_tune(
    tuner: Any, run: PreparedRun, run_dir: Path, console: Console
) -> Callable[[], list[TrialOutcome]]:
    """Training on Tune: ``tuner.fit()``, lost trials restarted; how each trial ended."""

    def fit() -> list[TrialOutcome]:
        grid = _restart_lost_trials(_fit_once(tuner), run, run_dir, console)
        return tune_outcomes(grid, run_dir)

    return fit


def _conclude(
    train_trials: Callable[[], list[TrialOutcome] | TrialOutcome],
    run: PreparedRun,
    run_dir: Path,
    console: Console,
    clock: StageClock,
) -> RunSummary:
    """Train the trials (``train_trials``: Tune's fit, or rlplat's loop), then what follows:
    the checkpoints pruned, the summary, re-scoring, a search's report, the export at the end."""
    started = time.monotonic()
    reset_training_window()
    status = "FAILED"
    try:
        trained = train_trials()
        outcomes = trained if isinstance(trained, list) else [trained]
        window = training_window()
        if window.first_iteration_started is not None:
            clock.lap("trial_start", window.first_iteration_started)
            clock.lap("training", window.last_result)
        else:  # no trial reported a result (all failed to start, or all had finished)
            clock.lap("trial_start")
        prune_checkpoints(run_dir, run.experiment.checkpoint.keep)
        summary = summarize(outcomes, run, run_dir, time.monotonic() - started)
        clock.lap("shutdown")  # the algorithm's (or Tune's) last save and teardown
        # An unfinished run is re-scored when its resumed run ends.
        if not unfinished_trials(summary) and rescore_run(run_dir, run.experiment, console):
            summary = summarize(outcomes, run, run_dir, time.monotonic() - started)
        clock.lap("rescore")
        if summary.search is not None:
            report_search(summary, run, run_dir, console)
        if run.experiment.export.at_end and not unfinished_trials(summary):
            summary.export = export_at_end(run_dir, run.experiment.export.episodes, console)
        write_summary(run_dir, asdict(summary))
        status = tracker_status(summary)
    except Exception as exc:
        reason = storage_reason(exc)
        if reason is None:
            raise
        raise storage_failed(run_dir, reason) from exc
    finally:
        close_trackers(status)
    return summary
