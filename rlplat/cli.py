"""The ``rlplat`` command line."""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from typer.exceptions import Abort, Exit, TyperException

from rlplat.cluster.connect import FIXED_HASH_SEED, quiet_ray_logs, start_ray
from rlplat.errors import Interrupted, RlplatError, UserError
from rlplat.util.project import project_code, project_paths, use_project_paths
from rlplat.util.versions import versions

if TYPE_CHECKING:
    from rlplat.experiment.load import LoadedExperiment
    from rlplat.run.summary import RunSummary
    from rlplat.util.timings import StageClock

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Train and evaluate RLlib agents from one YAML experiment file.",
)
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


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


Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Show Ray's and RLlib's logs.")]
Debug = Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")]
Last = Annotated[
    bool, typer.Option("--last", help="Newest checkpoint of a trial instead of the best.")
]


@app.command()
def train(
    experiment: Annotated[
        Path | None, typer.Argument(help="Experiment YAML file (not with --resume).")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Dotted overrides such as training.lr=0.0005 stop.env_steps=50000."),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="Continue an interrupted run in its directory: finished trials are kept, "
            "unfinished ones continue from their last checkpoint."
        ),
    ] = None,
    from_checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="Start a new run from this checkpoint's policy (or a trial/run directory's "
            "best): sets init.checkpoint. init.optimizer=true also takes the optimizer state.",
        ),
    ] = None,
    seeds: Annotated[
        int | None,
        typer.Option(
            help="Run each configuration on N seeds (seed, seed+1, ...): the override seeds=N.",
        ),
    ] = None,
    retry_errored: Annotated[
        bool,
        typer.Option("--retry-errored", help="With --resume: also continue trials that failed."),
    ] = False,
    address: Annotated[
        str | None,
        typer.Option(
            help="Join a running Ray cluster (auto or host:port) instead of starting one."
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Validate and print the resolved experiment only.")
    ] = False,
    timings: Annotated[
        bool,
        typer.Option(
            "--timings",
            help="Print the seconds of each stage (imports, validation, Ray's start, the trial's "
            "start, training, shutdown) at the end; run.json records them either way.",
        ),
    ] = False,
    verbose: Verbose = False,
    debug: Debug = False,
) -> None:
    """Validate an experiment, run it under Ray Tune, write checkpoints and TensorBoard logs.

    With a tune: section or search spaces in the file, runs a hyperparameter search.
    """
    # Imported per command: `rlplat eval` and `--help` start without loading Ray Tune and RLlib.
    from rlplat.cluster.connect import embedded  # noqa: PLC0415
    from rlplat.experiment.load import load_experiment  # noqa: PLC0415
    from rlplat.run.launch import resume as resume_run  # noqa: PLC0415
    from rlplat.run.launch import train as run_training  # noqa: PLC0415
    from rlplat.util.timings import StageClock  # noqa: PLC0415

    clock = StageClock()  # counts from the process's start
    quiet_ray_logs(verbose)
    if not verbose:
        warnings.filterwarnings("ignore")
    clock.lap("imports")
    started_here = embedded(address)
    if resume is not None:
        if experiment is not None or overrides or dry_run or from_checkpoint or seeds:
            raise UserError(
                "--resume continues a run with the experiment it started with: give only the run "
                "directory (rlplat train --resume <run dir>), no experiment file, overrides, "
                "--from, --seeds or --dry-run."
            )
        use_project_paths(project_paths(resume))
        summary = resume_run(
            resume,
            retry_errored=retry_errored,
            address=address,
            verbose=verbose,
            console=console,
            clock=clock,
        )
    else:
        if experiment is None:
            raise UserError(
                "give an experiment file (rlplat train experiments/cartpole_ppo.yaml), or "
                "--resume <run dir> to continue an interrupted run."
            )
        if from_checkpoint is not None:
            overrides = [*(overrides or []), f"init.checkpoint={from_checkpoint}"]
        if seeds is not None:
            overrides = [*(overrides or []), f"seeds={seeds}"]
        use_project_paths(project_paths(experiment))
        loaded = load_experiment(experiment, overrides or [])
        if dry_run:
            _print_dry_run(loaded, experiment)
            return
        summary = run_training(
            loaded, address=address, verbose=verbose, console=console, clock=clock
        )
    _finish_training(summary, clock, shutdown_ray=started_here, show_timings=timings)


def _print_dry_run(loaded: LoadedExperiment, experiment: Path) -> None:
    from rlplat.experiment.yaml_io import dump_yaml  # noqa: PLC0415
    from rlplat.prepare import prepare  # noqa: PLC0415

    console.print(dump_yaml(prepare(loaded).resolved()), highlight=False, end="")
    stepped = "built and stepped" if loaded.experiment.env.check else "built"
    console.print(
        f"# {experiment} is valid: every key checked, the env {stepped}, the RLlib "
        "config built. Nothing was run.",
        highlight=False,
    )


def _finish_training(
    summary: RunSummary, clock: StageClock, *, shutdown_ray: bool, show_timings: bool
) -> None:
    """The summary, Ray's shutdown (when this command started it), the stage timings in
    run.json (and on the terminal with --timings), then the exit status."""
    import ray  # noqa: PLC0415

    from rlplat.run.run_dir import record_timings  # noqa: PLC0415
    from rlplat.run.summary import print_summary, print_timings, raise_if_failed  # noqa: PLC0415

    print_summary(summary, console)
    if shutdown_ray:
        ray.shutdown()
    clock.lap("shutdown")
    record = clock.record()
    record_timings(Path(summary.run_dir), record)
    if show_timings:
        print_timings(record, console)
    raise_if_failed(summary)


@app.command()
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
    debug: Debug = False,
) -> None:
    """Show where each trial's env runners and learners would run, without training.

    Prints the bundles of one trial, the cluster's nodes, whether a trial fits and how many run
    at once; exits 2 when no node set can hold a trial (rlplat train refuses the same runs).
    """
    # Imported per command: `rlplat eval` and `--help` start without loading Ray Tune and RLlib.
    from rlplat.cluster.placement import cluster_nodes  # noqa: PLC0415
    from rlplat.experiment.load import load_experiment  # noqa: PLC0415
    from rlplat.prepare import prepare  # noqa: PLC0415
    from rlplat.prepare.run_spec import print_plan, refuse_if_impossible  # noqa: PLC0415

    quiet_ray_logs(verbose)
    if not verbose:
        warnings.filterwarnings("ignore")
    use_project_paths(project_paths(experiment))
    loaded = load_experiment(experiment, overrides or [])
    start_ray(address, verbose, project_code(loaded.experiment.env.user_modules))
    run = prepare(loaded, cluster_nodes())
    print_plan(run, console)
    refuse_if_impossible(run)


@app.command("eval")
def eval_(
    path: Annotated[
        Path,
        typer.Argument(
            help="A checkpoint, a trial/run/experiment directory (best checkpoint), or a "
            "directory written by rlplat export."
        ),
    ],
    episodes: Annotated[int, typer.Option("--episodes", "-n", help="Episodes to play.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the first episode (episode i: seed + i).")] = 0,
    explore: Annotated[
        bool, typer.Option("--explore", help="Sample actions instead of taking the greedy one.")
    ] = False,
    render: Annotated[
        str | None,
        typer.Option(
            help="gif or mp4: write videos; ansi: print frames; human: open a window.",
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Directory for --render gif/mp4 files.")] = Path(
        "videos"
    ),
    one_file: Annotated[
        bool, typer.Option("--one-file", help="One video with all episodes instead of one each.")
    ] = False,
    last: Last = False,
    max_steps: Annotated[
        int | None, typer.Option(help="Cut episodes after this many steps.")
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the results as JSON on stdout.")
    ] = False,
    record: Annotated[
        Path | None,
        typer.Option(
            help="Write the episodes to this new directory as a dataset for offline training "
            "(RLlib's Parquet columns plus dataset.json)."
        ),
    ] = None,
    random: Annotated[
        list[str] | None,
        typer.Option(
            "--random",
            help="Multi-agent: this policy acts uniformly at random instead of as trained "
            "(repeat for several), to score the others against a random side.",
        ),
    ] = None,
    verbose: Verbose = False,
    debug: Debug = False,
) -> None:
    """Roll out a trained policy (or its ONNX export) without Ray: statistics, and videos or
    terminal frames."""
    import json  # noqa: PLC0415 - only rlplat eval --json needs it

    # Imported per command: `rlplat eval` loads no Ray Tune (start-up time).
    from rlplat.policy.evaluate import EvalOptions, evaluate, print_report  # noqa: PLC0415
    from rlplat.policy.exported import is_export  # noqa: PLC0415

    if not is_export(path):  # an ONNX export plays without RLlib (and torch)
        quiet_ray_logs(verbose)
    if not verbose:
        warnings.filterwarnings("ignore")
    report_console = err_console if json_output else console
    use_project_paths(project_paths(path))
    options = EvalOptions(
        episodes=episodes,
        seed=seed,
        explore=explore,
        render=render,
        out=out,
        one_file=one_file,
        last=last,
        max_steps=max_steps,
        record=record,
        random=list(random or []),
    )
    report = evaluate(
        path,
        options,
        say=lambda line: report_console.print(line, highlight=False),
        show_frame=lambda frame: console.print(frame, highlight=False, markup=False),
    )
    if json_output:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print_report(report, console)


@app.command("export")
def export_(
    path: Annotated[
        Path,
        typer.Argument(help="A checkpoint, or a trial/run/experiment directory (best checkpoint)."),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            help="Output directory (default exported/<experiment name>); an existing one is "
            "kept and the export gets a new sibling name."
        ),
    ] = None,
    episodes: Annotated[
        int, typer.Option("--episodes", "-n", help="Seeded episodes of the parity check.")
    ] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the first parity episode.")] = 0,
    tolerance: Annotated[
        float,
        typer.Option(help="Largest difference at which two continuous actions agree."),
    ] = 1e-4,
    min_agreement: Annotated[
        float,
        typer.Option(
            "--min-agreement",
            help="Fraction of visited observations whose actions must agree (1: all).",
        ),
    ] = 1.0,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify/--no-verify",
            help="Play the parity episodes (--no-verify: no certificate; the manifest says so).",
        ),
    ] = True,
    last: Last = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the parity certificate as JSON on stdout.")
    ] = False,
    verbose: Verbose = False,
    debug: Debug = False,
) -> None:
    """Export a trained policy to ONNX (runs without Ray or torch) with a parity certificate."""
    import json  # noqa: PLC0415 - only --json needs it

    # Imported per command: torch, RLlib and onnx load only for rlplat export.
    from rlplat.export import load_exporter  # noqa: PLC0415

    quiet_ray_logs(verbose)
    if not verbose:
        warnings.filterwarnings("ignore")
    report_console = err_console if json_output else console
    use_project_paths(project_paths(path))
    exporter = load_exporter()
    options = exporter.ExportOptions(
        out=out,
        episodes=episodes,
        seed=seed,
        tolerance=tolerance,
        min_agreement=min_agreement,
        verify=verify,
        last=last,
    )
    report = exporter.export(
        path, options, say=lambda line: report_console.print(line, highlight=False)
    )
    if json_output:
        print(json.dumps(report.to_json(), indent=2))
    else:
        exporter.print_export(report, console)


@app.command()
def serve(
    path: Annotated[
        Path | None,
        typer.Argument(
            help="A checkpoint, a trial/run/experiment directory (best checkpoint), or a "
            "directory written by rlplat export. Not with --stop."
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address to listen on; other than 127.0.0.1 needs --token-env.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="HTTP port.")] = 8000,
    replicas: Annotated[
        int | None, typer.Option(help="Policy replicas (default 1; not with --autoscale).")
    ] = None,
    autoscale: Annotated[
        str | None, typer.Option(help="MIN:MAX replicas, scaled by Ray Serve with the load.")
    ] = None,
    replica_resources: Annotated[
        str | None,
        typer.Option(
            "--replica-resources",
            help="Each replica's resources, as under resources: in an experiment, e.g. "
            "'{cpus: 1, custom: {npu: 1}}' (default {cpus: 1}).",
        ),
    ] = None,
    max_batch_size: Annotated[
        int, typer.Option(help="Requests one graph run answers at most (1: no batching).")
    ] = 32,
    batch_wait_ms: Annotated[
        float, typer.Option(help="How long a batch waits to fill, in milliseconds.")
    ] = 2.0,
    backend: Annotated[
        str, typer.Option(help="onnx (onnxruntime, no torch) or torch (checkpoints only).")
    ] = "onnx",
    token_env: Annotated[
        str | None,
        typer.Option(help="Environment variable holding the bearer token requests must carry."),
    ] = None,
    max_body: Annotated[int, typer.Option(help="Largest request body in bytes (larger: 413).")] = 1
    << 20,
    max_sessions: Annotated[
        int, typer.Option(help="Recurrent policies: episode sessions kept at most.")
    ] = 10_000,
    session_ttl: Annotated[
        float, typer.Option(help="Recurrent policies: seconds a session lives without requests.")
    ] = 600.0,
    address: Annotated[
        str | None,
        typer.Option(help="Deploy onto a running Ray cluster (auto or host:port) and return."),
    ] = None,
    name: Annotated[str, typer.Option(help="Ray Serve application name.")] = "rlplat",
    stop: Annotated[
        bool, typer.Option("--stop", help="Remove the application --name from the cluster.")
    ] = False,
    episodes: Annotated[
        int, typer.Option("--episodes", "-n", help="Parity episodes when serving a checkpoint.")
    ] = 10,
    last: Last = False,
    verbose: Verbose = False,
    debug: Debug = False,
) -> None:
    """Serve a trained policy over HTTP with Ray Serve (embedded until Ctrl-C, or on a
    cluster with --address)."""
    # Imported per command: Ray Serve loads only for rlplat serve.
    from rlplat.serve.launch import ServeOptions, serve_policy, stop_application  # noqa: PLC0415

    quiet_ray_logs(verbose)
    if not verbose:
        warnings.filterwarnings("ignore")
    options = ServeOptions(
        host=host,
        port=port,
        replicas=replicas,
        autoscale=autoscale,
        replica_resources=replica_resources,
        max_batch_size=max_batch_size,
        batch_wait_ms=batch_wait_ms,
        backend=backend,
        token_env=token_env,
        max_body=max_body,
        max_sessions=max_sessions,
        session_ttl_s=session_ttl,
        address=address,
        name=name,
        episodes=episodes,
        last=last,
        verbose=verbose,
    )

    def say(line: str) -> None:
        console.print(line, highlight=False, markup=False)

    if stop:
        if path is not None:
            raise UserError("--stop removes the application --name; it takes no path.")
        stop_application(options, say)
        return
    if path is None:
        raise UserError(
            "rlplat serve needs a path: a checkpoint, a run directory of rlplat train, or a "
            "directory written by rlplat export (or --stop to remove a deployed application)."
        )
    use_project_paths(project_paths(path))
    serve_policy(path, options, say)


@app.command()
def report(
    runs: Annotated[
        list[Path],
        typer.Argument(help="Run directories of rlplat train (experiment directory: its newest)."),
    ],
    out: Annotated[
        Path | None,
        typer.Option(help="Output directory (default reports/<names>-<time>; never overwritten)."),
    ] = None,
    metric: Annotated[
        str | None,
        typer.Option(
            help="What to report: episode_return_mean (team return), policy_return_mean/<p>, "
            "agent_return_mean/<a>, or any logged result (default: the runs' tune.metric)."
        ),
    ] = None,
    x: Annotated[str, typer.Option(help="Curves against env_steps or time_s.")] = "env_steps",
    eval_episodes: Annotated[
        int, typer.Option(help="Greedy episodes that score each seed's checkpoint.")
    ] = 20,
    eval_seed: Annotated[int, typer.Option(help="Seed of the first scoring episode.")] = 0,
    checkpoint: Annotated[
        str, typer.Option(help="last, or best (by the run's own checkpoint.score).")
    ] = "last",
    score: Annotated[
        str,
        typer.Option(help="eval (greedy episodes) or training (the run's last windowed value)."),
    ] = "eval",
    target: Annotated[
        float | None,
        typer.Option(help="Score for the optimality gap and time to target (default: stop's)."),
    ] = None,
    bootstrap_seed: Annotated[int, typer.Option(help="Seed of the bootstrap resampling.")] = 0,
    marl_eval: Annotated[
        bool, typer.Option("--marl-eval", help="Also write marl_eval.json (marl-eval's layout).")
    ] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print report.json on stdout.")
    ] = False,
    verbose: Verbose = False,
    debug: Debug = False,
) -> None:
    """Compare runs over seeds: IQM, mean, median and optimality gap with 95% bootstrap
    intervals, probability of improvement, learning curves (report.md, report.json, PNG/SVG)."""
    import json  # noqa: PLC0415 - only --json needs it

    # Imported per command: scipy, matplotlib and the policy code load only for rlplat report.
    from rlplat.report.render import print_report  # noqa: PLC0415
    from rlplat.report.report import ReportOptions, make_report  # noqa: PLC0415

    quiet_ray_logs(verbose)
    if not verbose:
        warnings.filterwarnings("ignore")
    report_console = err_console if json_output else console
    for run in runs:
        use_project_paths(project_paths(run))
    options = ReportOptions(
        out=out,
        metric=metric,
        x=x,
        eval_episodes=eval_episodes,
        eval_seed=eval_seed,
        checkpoint=checkpoint,
        score=score,
        target=target,
        bootstrap_seed=bootstrap_seed,
        marl_eval=marl_eval,
    )
    result = make_report(
        runs, options, say=lambda line: report_console.print(line, highlight=False)
    )
    if json_output:
        print(json.dumps(result.to_json(), indent=2))
        return
    print_report(result, console)


@app.command()
def dataset(
    path: Annotated[
        Path,
        typer.Argument(
            help="A checkpoint, or a trial/run/experiment directory (newest checkpoint)."
        ),
    ],
    out: Annotated[Path, typer.Option(help="New dataset directory (never overwritten).")],
    from_replay: Annotated[
        bool,
        typer.Option(
            "--from-replay",
            help="Write the run's replay memory (DQN, SAC): every transition it kept. To record a "
            "policy's episodes use rlplat eval --record.",
        ),
    ] = False,
    best: Annotated[
        bool, typer.Option("--best", help="The best checkpoint of a trial instead of the newest.")
    ] = False,
    debug: Debug = False,
) -> None:
    """Write a dataset for offline training (BC, MARWIL, CQL, IQL) from a run's replay memory."""
    from rlplat.policy.replay_dataset import export_replay  # noqa: PLC0415

    if not from_replay:
        raise UserError(
            "rlplat dataset: say where the data comes from: --from-replay (the run's replay "
            "memory). To record a policy's episodes use `rlplat eval <checkpoint> --record DIR`."
        )
    quiet_ray_logs(False)
    warnings.filterwarnings("ignore")
    use_project_paths(project_paths(path))
    writer = export_replay(path, out, best=best)
    info = writer.info
    returns = info.returns
    console.print(
        f"Dataset: {out} ({info.episodes} episode(s), {info.env_steps:,} env steps) from "
        f"{info.source['checkpoint']}",
        highlight=False,
    )
    if returns:
        console.print(
            f"  returns of its {returns['episodes']} complete episode(s): mean "
            f"{returns['mean']:.2f}, min {returns['min']:.2f}, max {returns['max']:.2f}",
            highlight=False,
        )


@app.command("runs")
def runs_(
    directory: Annotated[
        Path, typer.Argument(help="Where runs are (default checkpoints/; or an experiment dir).")
    ] = Path("checkpoints"),
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the runs as JSON on stdout.")
    ] = False,
    debug: Debug = False,
) -> None:
    """List the runs under a directory, the newest first: status, trials, best score, steps."""
    import json  # noqa: PLC0415 - only --json needs it

    from rlplat.report.runs import list_runs, print_runs  # noqa: PLC0415

    records = list_runs(directory)
    if json_output:
        print(json.dumps([record.to_json() for record in records], indent=2))
    else:
        print_runs(records, directory, console)


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


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors print one paragraph and exit 2; ``--debug`` shows tracebacks."""
    if argv is None:
        fix_hash_seed()
    args = sys.argv[1:] if argv is None else argv
    try:
        app(args=args, standalone_mode=False)
    except RlplatError as exc:
        if "--debug" in args:
            raise
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


if __name__ == "__main__":
    main()
