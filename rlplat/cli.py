"""The ``rlplat`` command line: Typer's view of the stages.

A command maps its arguments onto its stage and calls the stage's function and printer. A stage's
options are declared once, with their defaults and help, in the stage's options dataclass
(``rlplat.util.options``); :func:`command` offers them as the command's options. Every command
starts with :func:`_start` and takes ``--debug``, which :func:`main` reads.

Stages are imported inside the commands: ``rlplat eval`` and ``--help`` start without loading
Ray Tune and RLlib.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from typer.exceptions import Abort, Exit, TyperException

from rlplat.checkpoints import existing
from rlplat.cluster import forkserver, warm
from rlplat.cluster.connect import cluster_address, quiet_ray_logs
from rlplat.errors import Interrupted, RlplatError, UserError
from rlplat.export.options import ExportOptions
from rlplat.policy.options import DatasetOptions, EvalOptions
from rlplat.report.options import ReportOptions
from rlplat.run.options import TrainOptions
from rlplat.serve.options import ServeOptions
from rlplat.util.frames import skip_module_search_for_frames_below
from rlplat.util.options import from_values, typer_parameters
from rlplat.util.process import FIXED_HASH_SEED, exit_code_of, exit_without_teardown
from rlplat.util.project import project_paths, use_project_paths
from rlplat.util.streams import StdoutOrStderr, stdout_to_stderr
from rlplat.util.timings import StageClock
from rlplat.util.versions import versions

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Train and evaluate RLlib agents from one YAML experiment file.",
)
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Show Ray's and RLlib's logs.")]
Debug = Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")]


def _json_flag(what: str) -> Any:
    """--json: print ``what`` on stdout (progress lines then go to stderr)."""
    return Annotated[bool, typer.Option("--json", help=f"Print {what} on stdout.")]


EvalJson = _json_flag("the results as JSON")
ExportJson = _json_flag("the parity certificate as JSON")
ReportJson = _json_flag("report.json")
RunsJson = _json_flag("the runs as JSON")
DoctorJson = _json_flag("the diagnoses as JSON")
KEYWORD = inspect.Parameter.KEYWORD_ONLY
_debug = False  # the running command's --debug: main() then shows its error's traceback


def _print_versions(value: bool) -> None:
    if value:
        console.print(
            "  ".join(f"{name} {version}" for name, version in versions().items()), highlight=False
        )
        raise typer.Exit()


@app.callback()
def _commands(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_versions,
            is_eager=True,
            help="Print the versions of rlplat, Ray, torch, Gymnasium, PettingZoo and exit.",
        ),
    ] = False,
) -> None:
    """Train and evaluate RLlib agents from one YAML experiment file."""


def command(
    name: str | None = None, *, options: type | None = None, before: tuple[str, str] | None = None
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a command: its own parameters, ``--debug``, and, where its ``options`` parameter
    stands, the options of its stage's ``options`` dataclass, which it receives built.
    ``before=(mine, field)`` lists its parameter ``mine`` before the option ``field`` in --help."""

    def register(function: Callable[..., None]) -> Callable[..., None]:
        params: list[inspect.Parameter] = []
        for param in inspect.signature(function, eval_str=True).parameters.values():
            if param.name == "options" and options is not None:
                params += typer_parameters(options, KEYWORD)
            else:
                params.append(param.replace(kind=KEYWORD))
        if before is not None:
            names = [param.name for param in params]
            moved = params.pop(names.index(before[0]))
            params.insert([param.name for param in params].index(before[1]), moved)
        params.append(inspect.Parameter("debug", KEYWORD, default=False, annotation=Debug))

        @functools.wraps(function)
        def run(**values: Any) -> None:
            global _debug
            _debug = values.pop("debug")
            if options is not None:
                values["options"] = from_values(options, values)
            function(**values)

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        run.__annotations__ = {param.name: param.annotation for param in params}
        return app.command(name)(run)

    return register


def _start(verbose: bool, *paths: Path | None, ray: bool = True) -> None:
    """The start of every command that loads a policy or runs Ray, once its modules are
    imported: Ray's and RLlib's log lines (``ray``: where Ray is used) and Python's warnings only
    with --verbose, the user's code importable from the project of each of ``paths``, and a warm
    interpreter started for the next command if none runs."""
    if ray:
        quiet_ray_logs(verbose)
    forkserver.start_for_next_command()
    if not verbose:
        warnings.filterwarnings("ignore")
    for path in paths:
        if path is not None:
            use_project_paths(project_paths(path))


def _say(json_output: bool) -> Callable[[str], None]:
    """Progress lines: on stdout, or on stderr where stdout carries --json."""
    where = err_console if json_output else console
    return lambda line: where.print(line, highlight=False)


def _show(result: Any, json_output: bool, printer: Callable[[Any, Console], None]) -> None:
    """A command's result: with --json as JSON on stdout (its ``to_json()`` where it has one),
    else through its stage's printer."""
    if json_output:
        print(json.dumps(result.to_json() if hasattr(result, "to_json") else result, indent=2))
    else:
        printer(result, console)


@command(options=TrainOptions)
def train(
    experiment: Annotated[
        Path | None, typer.Argument(help="Experiment YAML file (not with --resume).")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Dotted overrides such as training.lr=0.0005 stop.env_steps=50000."),
    ] = None,
    *,
    options: TrainOptions,
    verbose: Verbose = False,
) -> None:
    """Validate an experiment, run it under Ray Tune, write checkpoints and TensorBoard logs.

    With a tune: section or search spaces in the file, runs a hyperparameter search.
    """
    loaded = None
    if experiment is not None and options.resume is None:
        from rlplat.experiment.load import load_experiment  # noqa: PLC0415

        # The file, its overrides and its schema are refused before RLlib and Tune load.
        loaded = load_experiment(experiment, options.with_overrides(overrides or []))
    if not options.dry_run and cluster_address(options.address) is None and warm.enabled():
        warm.take_lease()  # a warm Ray's keeper, if it must start, starts while RLlib loads
    from rlplat.run.launch import train_command  # noqa: PLC0415 - Ray Tune and RLlib load here

    clock = StageClock()  # counts from the process's start
    _start(verbose, options.resume or experiment)
    clock.lap("imports")
    train_command(
        experiment,
        overrides or [],
        options,
        verbose=verbose,
        console=console,
        clock=clock,
        loaded=loaded,
    )


@command()
def plan(
    experiment: Annotated[Path, typer.Argument(help="Experiment YAML file.")],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="Dotted overrides, as for rlplat train.")
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(help="Plan on a running Ray cluster (auto or host:port) instead of locally."),
    ] = None,
    verbose: Verbose = False,
) -> None:
    """Show where each trial's env runners and learners would run, without training.

    Prints the bundles of one trial, the cluster's nodes, whether a trial fits and how many run
    at once; exits 2 when no node set can hold a trial (rlplat train refuses the same runs).
    """
    from rlplat.experiment.load import load_experiment  # noqa: PLC0415

    loaded = load_experiment(experiment, overrides or [])  # slips refused before RLlib loads
    from rlplat.run.launch import plan_command  # noqa: PLC0415 - RLlib loads here

    _start(verbose, experiment)
    plan_command(loaded, address, verbose, console)


@command("eval", options=EvalOptions, before=("json_output", "record"))
def eval_(
    path: Annotated[
        Path,
        typer.Argument(
            help="A checkpoint, a trial/run/experiment directory (best checkpoint), or a "
            "directory written by rlplat export."
        ),
    ],
    options: EvalOptions,
    json_output: EvalJson = False,
    verbose: Verbose = False,
) -> None:
    """Roll out a trained policy (or its ONNX export) without Ray: statistics, and videos or
    terminal frames."""
    existing(path)
    from rlplat.policy.evaluate import evaluate, print_report  # noqa: PLC0415
    from rlplat.policy.exported import is_export  # noqa: PLC0415

    _start(verbose, path, ray=not is_export(path))  # an ONNX export plays without RLlib
    with stdout_to_stderr() if json_output else contextlib.nullcontext():
        report = evaluate(
            path,
            options,
            say=_say(json_output),
            show_frame=lambda frame: console.print(frame, highlight=False, markup=False),
        )
    _show(report, json_output, print_report)


@command("export", options=ExportOptions)
def export_(
    path: Annotated[
        Path,
        typer.Argument(help="A checkpoint, or a trial/run/experiment directory (best checkpoint)."),
    ],
    options: ExportOptions,
    json_output: ExportJson = False,
    verbose: Verbose = False,
) -> None:
    """Export a trained policy to ONNX (runs without Ray or torch) with a parity certificate."""
    existing(path)
    from rlplat.export import load_exporter  # noqa: PLC0415 - torch, RLlib and onnx load here

    _start(verbose, path)
    exporter = load_exporter()
    _show(exporter.export(path, options, say=_say(json_output)), json_output, exporter.print_export)


@command(options=ServeOptions)
def serve(
    path: Annotated[
        Path | None,
        typer.Argument(
            help="A checkpoint, a trial/run/experiment directory (best checkpoint), or a "
            "directory written by rlplat export. Not with --stop."
        ),
    ] = None,
    *,
    options: ServeOptions,
    verbose: Verbose = False,
) -> None:
    """Serve a trained policy over HTTP with Ray Serve (embedded until Ctrl-C, or on a
    cluster with --address)."""
    if path is not None and not options.stop:
        existing(path)  # a wrong path is refused before Ray Serve loads
    from rlplat.serve.launch import serve_command  # noqa: PLC0415 - Ray Serve loads here

    _start(verbose, None if options.stop else path)
    options.verbose = verbose
    serve_command(path, options, lambda line: console.print(line, highlight=False, markup=False))


@command(options=ReportOptions)
def report(
    runs: Annotated[
        list[Path],
        typer.Argument(help="Run directories of rlplat train (experiment directory: its newest)."),
    ],
    options: ReportOptions,
    json_output: ReportJson = False,
    verbose: Verbose = False,
) -> None:
    """Compare runs over seeds: IQM, mean, median and optimality gap with 95% bootstrap
    intervals, probability of improvement, learning curves (report.md, report.json, PNG/SVG)."""
    from rlplat.report.runs import resolve_run  # noqa: PLC0415

    for run in runs:  # a wrong path is refused before the heavy imports below
        resolve_run(run)
    # Imported per command: scipy, matplotlib and the policy code load only for rlplat report.
    from rlplat.report.render import print_report  # noqa: PLC0415
    from rlplat.report.report import make_report  # noqa: PLC0415

    _start(verbose, *runs)
    _show(make_report(runs, options, say=_say(json_output)), json_output, print_report)


@command(options=DatasetOptions)
def dataset(
    path: Annotated[
        Path,
        typer.Argument(
            help="A checkpoint, or a trial/run/experiment directory (newest checkpoint)."
        ),
    ],
    options: DatasetOptions,
) -> None:
    """Write a dataset for offline training (BC, MARWIL, CQL, IQL) from a run's replay memory."""
    from rlplat.policy.replay_dataset import export_replay, print_dataset  # noqa: PLC0415

    if not options.from_replay:
        raise UserError(
            "rlplat dataset: say where the data comes from: --from-replay (the run's replay "
            "memory). To record a policy's episodes use `rlplat eval <checkpoint> --record DIR`."
        )
    _start(False, path)
    print_dataset(export_replay(path, options.out, best=options.best), console)


@command("runs")
def runs_(
    directory: Annotated[
        Path, typer.Argument(help="Where runs are (default checkpoints/; or an experiment dir).")
    ] = Path("checkpoints"),
    json_output: RunsJson = False,
) -> None:
    """List the runs under a directory, the newest first: status, trials, best score, steps."""
    from rlplat.report.runs import list_runs, print_runs  # noqa: PLC0415

    records = list_runs(directory)
    if json_output:
        print(json.dumps([record.to_json() for record in records], indent=2))
    else:
        print_runs(records, directory, console)


@command("doctor")
def doctor_(
    run: Annotated[
        Path, typer.Argument(help="A run directory (or an experiment directory: its newest run).")
    ],
    json_output: DoctorJson = False,
) -> None:
    """What is wrong with a run's learning: the training-health diagnoses (docs/doctor.md)
    replayed over each trial's results; any run directory, older ones included."""
    from rlplat.report.doctor import doctor, print_doctor  # noqa: PLC0415

    report = doctor(run)
    if json_output:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print_doctor(report, console)


NO_WARM_RAY = "No warm local Ray runs for this Python in this directory."


class RayAction(str, Enum):
    status = "status"
    stop = "stop"


@command("ray")
def ray_(
    action: Annotated[RayAction, typer.Argument(help="status: the warm local Ray; stop: stop it.")],
    force: Annotated[
        bool, typer.Option("--force", help="Stop it even while commands are using it.")
    ] = False,
) -> None:
    """The local Ray and the warm interpreter that rlplat commands keep between them
    (RLPLAT_RAY_IDLE_S seconds after the last one; 0 turns them off)."""
    if action is RayAction.stop:
        stopped = warm.stop(force=force)
        console.print(
            f"Stopped the warm local Ray at {stopped}." if stopped else NO_WARM_RAY, highlight=False
        )
        if forkserver.stop(forkserver.directory()):
            console.print(f"Stopped the warm interpreter of {sys.prefix}.", highlight=False)
        return
    record = warm.status()
    if record is None:
        console.print(NO_WARM_RAY, highlight=False)
    else:
        users = ", ".join(str(lease["pid"]) for lease in record["leases"]) or "none"
        console.print(
            f"Warm local Ray {record['ray']} at {record['address']} (keeper process "
            f"{record['keeper']['pid']}, up {time.time() - record['since']:.0f} s, stops after "
            f"{warm.describe_idle(record['idle_s'])} idle); commands using it: {users}.",
            highlight=False,
        )
    interpreter = forkserver.status(forkserver.directory())
    if interpreter is not None:
        console.print(
            f"Warm interpreter of {sys.prefix} (process {interpreter['keeper']['pid']}, up "
            f"{time.time() - interpreter['since']:.0f} s): commands start in it with torch, Ray, "
            "RLlib and Tune loaded.",
            highlight=False,
        )


def fix_hash_seed() -> None:
    """Restart this command once with ``PYTHONHASHSEED`` set, unless the user set it.

    RLlib keeps a multi-agent episode's agent ids in sets, and the order of a set of strings
    changes with each interpreter's hash seed: agents then draw their sampled actions in a
    different order, and the same seed gives different episodes. Nothing heavy is imported yet,
    so the restart costs a few milliseconds.
    """
    if "PYTHONHASHSEED" not in os.environ:
        os.environ["PYTHONHASHSEED"] = FIXED_HASH_SEED
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def main(argv: list[str] | None = None, *, warm: bool = True) -> None:
    """Entry point of ``python -m rlplat.cli``: the command runs in the warm interpreter where
    one serves it (``warm``), else here (:func:`run_here`); ``argv``: the arguments, run in this
    process (default: ``sys.argv``)."""
    if argv is None:
        code = forkserver.run_command(sys.argv, entry="rlplat.cli:run_here") if warm else None
        if code is not None:
            sys.exit(code)
        fix_hash_seed()
    run_here(argv)


def main_process(*, warm: bool = True) -> NoReturn:
    """:func:`main` as a process's whole life (``python -m rlplat.cli``, the ``rlplat``
    command): at its end the process exits without Python's teardown of every module
    (``exit_without_teardown``: a first ``rlplat train`` ended 1.7 s after its last line)."""
    try:
        main(warm=warm)
    except SystemExit as exc:
        exit_without_teardown(exit_code_of(exc))
    exit_without_teardown(0)


def _print_traceback(exc: BaseException) -> None:
    """``--debug``: the traceback of rlplat's error with the exceptions it stands for, which its
    paragraph hides (``raise ... from None`` keeps them as the context)."""
    link: BaseException | None = exc
    seen: set[int] = set()
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        link.__suppress_context__ = False
        link = link.__cause__ or link.__context__
    traceback.print_exception(exc, file=sys.stderr)


def run_here(argv: list[str] | None = None) -> None:
    """The command in this process: user errors print one paragraph and exit 2; ``--debug``
    shows tracebacks."""
    global _debug
    skip_module_search_for_frames_below()
    if argv is None:
        sys.stdout = StdoutOrStderr(sys.stdout, sys.stderr)
    _debug = False
    try:
        app(args=sys.argv[1:] if argv is None else argv, standalone_mode=False)
    except RlplatError as exc:
        if _debug:
            _print_traceback(exc)
        stopped = isinstance(exc, Interrupted)
        label = "[bold yellow]stopped:[/]" if stopped else "[bold red]error:[/]"
        err_console.print(f"{label} {escape(str(exc))}", highlight=False)
        sys.exit(exc.exit_code)
    except Exit as exc:
        sys.exit(exc.exit_code)
    except TyperException as exc:
        # Usage errors (unknown command or option, a value of the wrong type): Click's own
        # message with its "Did you mean", the command's usage line, exit code 2.
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            err_console.print(f"[bold red]error:[/] {escape(exc.format_message())}")
        sys.exit(2)
    except (KeyboardInterrupt, Abort):
        err_console.print("interrupted")
        sys.exit(130)
    finally:
        if argv is None:
            _ignore_signals_while_exiting()


def _ignore_signals_while_exiting() -> None:
    """The command has said how it ended: a Ctrl-C now (the second of a stop the first one
    already finished, say) would only interrupt Ray's shutdown at exit, which then dies with a
    traceback and a crash instead of the command's exit status."""
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN)


if __name__ == "__main__":
    main_process()
