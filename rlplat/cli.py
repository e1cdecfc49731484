"""The ``rlplat`` command line."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Annotated

import click
import typer
from rich.console import Console

from rlplat.errors import RlplatError

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Train and evaluate RLlib agents from one YAML experiment file.",
)
console = Console(soft_wrap=True)
err_console = Console(stderr=True)


@app.callback()
def _commands() -> None:
    """Train and evaluate RLlib agents from one YAML experiment file."""


Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Show Ray's and RLlib's logs.")]
Debug = Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")]


@app.command()
def train(
    experiment: Annotated[Path, typer.Argument(help="Experiment YAML file.")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="Dotted overrides such as training.lr=0.0005 stop.env_steps=50000."),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            help="Join a running Ray cluster (auto or host:port) instead of starting one."
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Validate and print the resolved experiment only.")
    ] = False,
    verbose: Verbose = False,
    debug: Debug = False,
) -> None:
    """Validate an experiment, run it under Ray Tune, write checkpoints and TensorBoard logs."""
    from rlplat.cluster import quiet_ray_logs
    from rlplat.config.load import load_experiment
    from rlplat.config.yaml_io import dump_yaml
    from rlplat.train import print_summary, raise_if_failed, resolve_experiment
    from rlplat.train import train as run_training

    quiet_ray_logs(verbose)
    if not verbose:
        warnings.filterwarnings("ignore")
    loaded = load_experiment(experiment, overrides or [])
    if dry_run:
        console.print(dump_yaml(resolve_experiment(loaded)), highlight=False, end="")
        return
    summary = run_training(loaded, address=address, verbose=verbose, console=console)
    print_summary(summary, console)
    raise_if_failed(summary)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors print one paragraph and exit 2; ``--debug`` shows tracebacks."""
    args = sys.argv[1:] if argv is None else argv
    try:
        app(args=args, standalone_mode=False)
    except RlplatError as exc:
        if "--debug" in args:
            raise
        err_console.print(f"[bold red]error:[/bold red] {exc}", highlight=False)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except (KeyboardInterrupt, click.exceptions.Abort):
        err_console.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
