"""rlplat from Python: the commands' pipeline as functions, for notebooks and scripts.

``train`` is ``rlplat train`` (the same checks, the same run directory, the same summary) and
returns a :class:`Run`; ``evaluate`` is ``rlplat eval``; ``load_policy`` gives a trained policy
that acts on one observation at a time. Ray is joined once per process (the warm local Ray, or
``address``) and stays connected between calls. Bad input raises :class:`rlplat.errors.UserError`
with the message the command prints.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from rich.console import Console

from rlplat.checkpoints import PickedCheckpoint, find_checkpoint
from rlplat.cluster.connect import quiet_ray_logs
from rlplat.errors import UserError, allowed_list, did_you_mean
from rlplat.policy.evaluate import EvalReport, PlayingPolicy
from rlplat.policy.evaluate import evaluate as evaluate_checkpoint
from rlplat.policy.evaluate import load_policy as load_playing_policy
from rlplat.policy.options import EvalOptions
from rlplat.run.launch import train_command
from rlplat.run.options import TrainOptions
from rlplat.run.summary import RunSummary, TrialSummary
from rlplat.util.frames import skip_module_search_for_frames_below
from rlplat.util.notebook import progress_stream
from rlplat.util.project import project_paths, use_project_paths
from rlplat.util.timings import StageClock


@dataclass(frozen=True)
class Run:
    """A finished ``train`` call: its run directory and what ``summary.json`` says of it."""

    directory: Path
    summary: RunSummary

    @property
    def trials(self) -> list[TrialSummary]:
        return self.summary.trials

    @property
    def best_checkpoint(self) -> Path:
        """The checkpoint ``rlplat eval <run>`` plays: the best trial's best by greedy score."""
        return self.pick().path

    @property
    def last_checkpoint(self) -> Path:
        return self.pick(last=True).path

    def pick(self, last: bool = False) -> PickedCheckpoint:
        """The best (or newest) checkpoint, with the sentence saying why it was picked."""
        return find_checkpoint(self.directory, last=last)

    def evaluate(self, **options: Any) -> EvalReport:
        """``evaluate(self.directory, **options)``."""
        return evaluate(self.directory, **options)

    def load_policy(self, last: bool = False) -> PlayingPolicy:
        return load_policy(self.directory, last=last)


def train(
    experiment: str | Path | Mapping[str, Any],
    *overrides: str,
    seed: int | None = None,
    seeds: int | None = None,
    address: str | None = None,
    quiet: bool = False,
    verbose: bool = False,
    **sections: Any,
) -> Run:
    """Train an experiment file (or an experiment given as a dict) as ``rlplat train`` does.

    ``overrides`` are the command's (``"training.lr=0.0005"``); keyword arguments override whole
    sections or keys of them (``stop={"env_steps": 20000}``, ``training={"lr": 5e-4}``).
    ``quiet`` hides the progress lines. Raises UserError for bad input, RlplatError when a
    trial fails.
    """
    for override in overrides:
        if not isinstance(override, str):
            raise UserError(
                f"train() takes overrides as strings, as the command does "
                f"(\"training.lr=0.0005\", \"stop={{env_steps: 20000}}\"), or sections as "
                f"keywords (stop={{'env_steps': 20000}}); got {override!r} "
                f"({type(override).__name__})."
            )
    _check_types("train()", {"seed": seed, "seeds": seeds}, int)
    path = _experiment_path(experiment)
    every = [*overrides, *_keyword_overrides(sections)]
    options = TrainOptions(seed=seed, seeds=seeds, address=address)
    _start(verbose, path)
    try:
        summary = train_command(
            path,
            every,
            options,
            verbose=verbose,
            # Plain text; in a notebook one output updated in place (Rich's Jupyter mode would
            # make one HTML output per line).
            console=Console(
                quiet=quiet, soft_wrap=True, force_jupyter=False, file=progress_stream()
            ),
            clock=StageClock(started=time.time()),
            stay_connected=True,
            commands=False,  # the caller holds the Run: run.evaluate(), run.load_policy()
        )
    except UserError as exc:
        if isinstance(experiment, Mapping):  # not the temporary file the dict was written to
            where = re.compile(re.escape(str(path)) + r"(:\d+)?")
            exc.args = (where.sub("the experiment dict given to train()", str(exc)),)
        raise
    assert summary is not None  # not a dry run
    return Run(Path(summary.run_dir), summary)


def evaluate(path: str | Path | Run, *, quiet: bool = True, **options: Any) -> EvalReport:
    """``rlplat eval PATH`` with its options as keywords (``episodes=20, seed=1,
    render="gif"``): the report it prints, as a dataclass (``report.returns.mean``)."""
    directory = path.directory if isinstance(path, Run) else Path(path)
    known = [field.name for field in fields(EvalOptions)]
    for name in options:
        if name not in known:
            raise UserError(
                f"evaluate() has no option {name!r}: the options "
                f"are rlplat eval's: {allowed_list(known)}.{did_you_mean(name, known)}"
            )
    defaults = EvalOptions()
    for name, value in options.items():
        default = getattr(defaults, name)
        kind = type(default) if default is not None else None
        if kind in (int, bool, str, float) and not _is_a(value, kind):
            raise UserError(
                f"evaluate() option {name} takes {kind.__name__} (as rlplat eval's "
                f"--{name.replace('_', '-')}); got {value!r} ({type(value).__name__})."
            )
    _start(False, directory)
    say = (lambda line: None) if quiet else print
    return evaluate_checkpoint(directory, EvalOptions(**options), say=say, show_frame=say)


def load_policy(path: str | Path | Run, *, last: bool = False) -> PlayingPolicy:
    """The trained policy of a checkpoint, run or export: ``policy.act(observation)`` gives the
    env's action (greedy; ``explore=True`` samples), ``policy.reset()`` starts a new episode."""
    directory = path.directory if isinstance(path, Run) else Path(path)
    _start(False, directory)
    return load_playing_policy(directory, last=last)


def _is_a(value: Any, kind: type) -> bool:
    """``value`` is of ``kind`` (a bool is no int here, an int is a float)."""
    if kind is not bool and isinstance(value, bool):
        return False
    return isinstance(value, (int, float) if kind is float else kind)


def _check_types(function: str, values: dict[str, Any], kind: type) -> None:
    for name, value in values.items():
        if value is not None and not _is_a(value, kind):
            raise UserError(
                f"{function} {name} takes {kind.__name__} or None; got {value!r} "
                f"({type(value).__name__})."
            )


def _start(verbose: bool, path: Path) -> None:
    """What every command does first: Ray's logs and Python's warnings quiet unless
    ``verbose``, the user's code importable from the project of ``path``, and the caller's
    frames (a notebook's cells) known to inspect (``skip_module_search_for_frames_below``)."""
    skip_module_search_for_frames_below()
    quiet_ray_logs(verbose)
    if not verbose:  # what the command hides: Ray's warnings, RLlib re-registering its env ids
        warnings.filterwarnings("ignore", module="ray")
        warnings.filterwarnings("ignore", message=".*Overriding environment")
    use_project_paths(project_paths(path))


def _experiment_path(experiment: str | Path | Mapping[str, Any]) -> Path:
    """The experiment file; a dict is written as one (JSON is YAML) in a directory of its own,
    with ``init.experiment`` taken from the working directory."""
    if not isinstance(experiment, Mapping):
        return Path(experiment)
    data = json.loads(json.dumps(experiment, default=str))
    init = data.get("init")
    if isinstance(init, dict) and isinstance(init.get("experiment"), str):
        init["experiment"] = str(Path(init["experiment"]).resolve())
    name = str(data.get("name") or "experiment")
    directory = Path(tempfile.mkdtemp(prefix="rlplat-experiment-"))
    path = directory / f"{''.join(c if c.isalnum() or c in '-_' else '_' for c in name)}.yaml"
    path.write_text(json.dumps(data, indent=2))
    return path


def _keyword_overrides(sections: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``training={"lr": 5e-4}`` as the override ``training.lr=0.0005`` (every leaf of a dict
    its own override, so the rest of the section stays as the file has it)."""
    overrides = []
    for key, value in sections.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            overrides += _keyword_overrides(value, f"{dotted}.")
        else:
            overrides.append(f"{dotted}={json.dumps(value, default=str)}")
    return overrides
