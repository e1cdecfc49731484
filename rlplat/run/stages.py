"""Experiments that train another experiment first (``init.experiment``).

The first stage is an ordinary run of that file, with this experiment's seed and output_dir;
this experiment then runs as a second run that starts from the first run's best checkpoint
(``init.checkpoint``). The first run's directory keeps the experiment that follows
(``next_stage.yaml``) and, once that has started, where it runs (``next_stage_run.txt``), so
``rlplat train --resume`` of either run finishes both.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlplat.errors import ConfigError
from rlplat.experiment.load import LoadedExperiment, load_experiment
from rlplat.experiment.yaml_io import dump_yaml
from rlplat.util.atomic import write_atomic

KEY = "init.experiment"
NEXT_STAGE = "next_stage.yaml"
NEXT_STAGE_RUN = "next_stage_run.txt"


@dataclass(frozen=True)
class NextStage:
    """The experiment that follows a finished first run, and its run directory once started."""

    experiment: Path
    run_dir: Path | None


def first_stage(loaded: LoadedExperiment) -> LoadedExperiment | None:
    """The experiment ``init.experiment`` names, loaded with this one's seed and output_dir;
    None when there is none. Refused: several trials here, or a first stage of its own there."""
    exp = loaded.experiment
    given = exp.init.experiment
    if not given:
        return None
    location = loaded.locate(KEY)
    if loaded.spaces or exp.tune is not None or len(exp.seed_list() or [exp.seed]) > 1:
        raise ConfigError(
            "init.experiment trains one run first and starts this one from it, but this "
            "experiment runs several trials (seeds or a search). Train that file yourself and "
            "give its run directory as init.checkpoint (rlplat train <file> --from <run>).",
            location=location,
            key=KEY,
        )
    path = Path(given).expanduser()
    if not path.is_absolute():
        path = Path(loaded.locate.source).parent / path
    if not path.is_file():
        raise ConfigError(
            f"{path} is not a file: init.experiment is an experiment file, relative to this "
            "one (or absolute).",
            location=location,
            key=KEY,
        )
    seed = "null" if exp.seed is None else exp.seed
    overrides = [f"output_dir={exp.output_dir}", f"seed={seed}"]
    first = load_experiment(path, overrides)
    if first.experiment.init.experiment:
        raise ConfigError(
            f"{path} has an init.experiment of its own; one first stage is supported. Train "
            "the chain's first file yourself and give its run as that file's init.checkpoint.",
            location=location,
            key=KEY,
        )
    return first


def write_next_stage(first_run: Path, data: dict[str, Any]) -> None:
    """Keep, in the first run's directory, the experiment that follows it: ``data`` (the file's
    data after its overrides) starting from the first run instead of training it."""
    following = copy.deepcopy(data)
    init = following.setdefault("init", {})
    init.pop("experiment", None)
    init["checkpoint"] = str(first_run)
    # <output_dir>/<name>/<timestamp>: a resume from another directory writes to the same place
    following["output_dir"] = str(first_run.parent.parent)
    write_atomic(first_run / NEXT_STAGE, dump_yaml(following))


def mark_next_stage_started(first_run: Path, run_dir: Path) -> None:
    write_atomic(first_run / NEXT_STAGE_RUN, f"{run_dir}\n")


def next_stage(first_run: Path) -> NextStage | None:
    """What follows the run in ``first_run``; None when it is not a first stage."""
    experiment = first_run / NEXT_STAGE
    if not experiment.is_file():
        return None
    started = first_run / NEXT_STAGE_RUN
    run_dir = Path(started.read_text().strip()) if started.is_file() else None
    return NextStage(experiment, run_dir)
