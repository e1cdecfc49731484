"""Run directories as ``rlplat report`` and ``rlplat runs`` read them: which runs there are, how
each ended, and what each trial logged.

Each ``rlplat train`` or ``--resume`` of a run is a driver process (``run.json``: ``drivers``).
Once the newest driver has written ``summary.json``, that says finished, interrupted (a trial
did not finish: Ctrl-C, SIGTERM) or failed (a trial raised). Before that, the run is running
while the driver's process is alive, else interrupted (the driver was killed: ``--resume``
continues it), and unknown when the driver ran on another host.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from rlplat.checkpoints import (
    RESOLVED_EXPERIMENT,
    RUN_INFO,
    SUMMARY,
    CheckpointInfo,
    best_and_last,
    read_results,
)
from rlplat.errors import UserError
from rlplat.experiment.load import trial_experiment
from rlplat.experiment.schema import EnvSpec
from rlplat.experiment.yaml_io import parse_yaml
from rlplat.metrics import ENV_STEPS, finite, lookup, metric_path
from rlplat.util.atomic import read_json
from rlplat.util.process import still_running
from rlplat.util.tables import new_table, print_table

TRIAL_PARAMS = "params.json"  # Tune's copy of the trial's config: the trial's experiment


def is_run(path: Path) -> bool:
    return (path / RUN_INFO).is_file() and (path / RESOLVED_EXPERIMENT).is_file()


def find_runs(directory: Path) -> list[Path]:
    """The run directories at ``directory`` or up to two levels below it
    (``<output_dir>/<name>/<timestamp>``)."""
    found: list[Path] = []
    level = [directory]
    for _ in range(3):
        found += [path for path in level if is_run(path)]
        level = [
            child
            for path in level
            if path.is_dir() and not is_run(path)
            for child in sorted(path.iterdir())
            if child.is_dir()
        ]
    return found


def resolve_run(path: Path) -> tuple[Path, str | None]:
    """The run directory ``path`` names, or the newest run of an experiment directory (then
    with a note saying so)."""
    path = path.expanduser().resolve()
    if is_run(path):
        return path, None
    if path.is_dir():
        runs = [child for child in sorted(path.iterdir()) if is_run(child)]
        if runs:
            return runs[-1], f"{path}: its newest run, {runs[-1].name}"
    what = "does not exist" if not path.exists() else "is not a run directory"
    raise UserError(
        f"{path} {what}: give a run directory of rlplat train (<output_dir>/<name>/<timestamp>, "
        f"holding {RUN_INFO} and {RESOLVED_EXPERIMENT}) or the experiment directory above it "
        "(its newest run). rlplat runs lists them."
    )


def run_experiment(run_dir: Path) -> dict[str, Any]:
    """The run's resolved experiment as plain data (not validated: older runs still read)."""
    try:
        data, _ = parse_yaml((run_dir / RESOLVED_EXPERIMENT).read_text(), str(run_dir))
    except Exception:  # noqa: BLE001 - an unreadable file is reported as an empty experiment
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class Trial:
    """One trial directory and the experiment it ran (its own seed)."""

    name: str
    path: Path
    experiment: dict[str, Any]

    @property
    def seed(self) -> int | None:
        return self.experiment.get("seed")


def run_trials(run_dir: Path) -> list[Trial]:
    trials = []
    for path in sorted(run_dir.glob("trial_*")):
        params = read_json(path / TRIAL_PARAMS)
        if path.is_dir() and params is not None:
            trials.append(Trial(path.name, path, trial_experiment(params)))
    return trials


def column(results: list[dict[str, Any]], path: str) -> np.ndarray:
    """One result path over the iterations (NaN where it was not logged or not finite)."""
    values = [finite(lookup(result, path)) for result in results]
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def logged_paths(results: list[dict[str, Any]]) -> list[str]:
    """The numeric result paths a trial logged (``config`` left out), for "did you mean"."""
    paths: set[str] = set()

    def walk(node: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict):
                if path != "config":
                    walk(value, path + "/")
            elif finite(value) is not None:
                paths.add(path)

    for result in results[-1:]:
        walk(result, "")
    return sorted(paths)


def env_label(experiment: dict[str, Any]) -> str:
    """The env as the experiment names it; "?" for an env section this rlplat cannot read."""
    try:
        return EnvSpec.model_validate(experiment.get("env") or {}).label
    except ValueError:
        return "?"


@dataclass
class RunRecord:
    """One line of ``rlplat runs``."""

    name: str
    algorithm: str
    env: str
    status: str
    trials: int
    seeds: int
    metric: str
    best_score: float | None
    env_steps: int | None
    started: str | None
    path: str
    started_unix: float = 0.0
    diagnoses: list[str] = field(default_factory=list)  # the rules that fired, over its trials

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def run_status(run_dir: Path, info: dict[str, Any], summary: dict[str, Any] | None) -> str:
    """finished, failed, interrupted, running or unknown; files a crash left broken (a field of
    the wrong type) read as missing, never as a traceback."""
    drivers = info.get("drivers")
    newest = drivers[-1] if isinstance(drivers, list) and drivers else {}
    newest = newest if isinstance(newest, dict) else {}
    started = newest.get("started_unix", 0.0)
    started = started if isinstance(started, int | float) else 0.0
    summary_time = (run_dir / SUMMARY).stat().st_mtime if summary is not None else None
    if summary is not None and summary_time is not None and summary_time >= started:
        # The newest driver finished its part (its process may live on: a notebook, a test).
        trials = summary.get("trials")
        trials = trials if isinstance(trials, list) else []
        statuses = {trial.get("status") for trial in trials if isinstance(trial, dict)}
        if "error" in statuses:
            return "failed"
        return "interrupted" if statuses - {"finished"} or not statuses else "finished"
    alive = still_running(newest) if newest else None
    if alive is None:
        return "unknown"  # its driver ran on another host, or the run predates driver records
    return "running" if alive else "interrupted"


def run_record(run_dir: Path) -> RunRecord:
    # Here, not at the top: rlplat report and rlplat runs refuse a bad path before Tune and
    # RLlib load (the rules' settings read the algorithm's defaults from RLlib).
    from rlplat.callbacks.health import replay  # noqa: PLC0415

    info = read_json(run_dir / RUN_INFO) or {}
    summary = read_json(run_dir / SUMMARY)
    experiment = run_experiment(run_dir)
    tune = experiment.get("tune") or {}
    metric, mode = tune.get("metric", "episode_return_mean"), tune.get("mode", "max")
    steps_done: list[float] = []
    bests: list[float] = []
    trials = run_trials(run_dir)
    diagnoses: dict[str, None] = {}
    for trial in trials:
        results = read_results(trial.path)
        diagnoses.update(dict.fromkeys(f.rule for f in replay(results, trial.experiment).findings))
        steps = column(results, ENV_STEPS)
        scores = column(results, metric_path(metric))
        steps_done += [float(np.nanmax(steps))] if np.isfinite(steps).any() else []
        if np.isfinite(scores).any():
            bests.append(float(np.nanmax(scores) if mode == "max" else np.nanmin(scores)))
    best = (max(bests) if mode == "max" else min(bests)) if bests else None
    scored = _checkpoint_scores(trials)
    if scored:  # the greedy score that eval, export and serve pick a checkpoint by
        metric, mode = scored[0].score_metric or metric, scored[0].mode
        scores = [info.score for info in scored if info.score is not None]
        best = max(scores) if mode == "max" else min(scores)
    seeds = experiment.get("seeds")
    started_unix = info.get("started_unix")
    if not isinstance(started_unix, int | float) or isinstance(started_unix, bool):
        started_unix = run_dir.stat().st_mtime  # a run.json a crash left broken
    started = info.get("started")
    if not isinstance(started, str) or not started:
        started = datetime.fromtimestamp(started_unix).isoformat()
    return RunRecord(
        name=str(experiment.get("name", run_dir.parent.name)),
        algorithm=str(experiment.get("algorithm", "?")),
        env=env_label(experiment),
        status=run_status(run_dir, info, summary),
        trials=len(trials),
        seeds=len(seeds) if isinstance(seeds, list) else 1,
        metric=metric,
        best_score=best,
        env_steps=int(sum(steps_done)) if steps_done else None,
        started=started,
        path=str(run_dir),
        started_unix=float(started_unix),
        diagnoses=list(diagnoses),
    )


def _checkpoint_scores(trials: list[Any]) -> list[CheckpointInfo]:
    """The scores of the trials' best checkpoints (a greedy evaluation unless checkpoint.score
    names another metric), where they have one."""
    found = []
    for trial in trials:
        best, _ = best_and_last(trial.path)
        info = CheckpointInfo.read(best) if best else None
        if info is not None and info.score is not None:
            found.append(info)
    return found


def list_runs(directory: Path) -> list[RunRecord]:
    """Every run under ``directory``, the newest first."""
    directory = directory.expanduser().resolve()
    if not directory.is_dir():
        raise UserError(
            f"{directory} is not a directory: give the output_dir of your experiments "
            "(default checkpoints/), an experiment directory or a run directory."
        )
    records = [run_record(run) for run in find_runs(directory)]
    return sorted(records, key=lambda record: record.started_unix, reverse=True)


def print_runs(records: list[RunRecord], directory: Path, console: Any) -> None:
    """The runs as a table (paths relative to the current directory where they can be)."""
    if not records:
        console.print(f"No runs under {directory}.", highlight=False)
        return
    table = new_table(
        f"{len(records)} run(s) under {directory}, newest first",
        ["name", "algorithm", "env", "status", "diagnoses"],
        ["trials", "seeds", "best score", "env steps"],
    )
    for name in ("started", "path"):
        table.add_column(name, no_wrap=True)
    for record in records:
        best = "-" if record.best_score is None else f"{record.best_score:.2f}"
        if record.best_score is not None and record.metric.startswith("eval_"):
            best += " greedy"
        table.add_row(
            record.name,
            record.algorithm,
            record.env,
            record.status,
            ", ".join(record.diagnoses) or "-",
            str(record.trials),
            str(record.seeds),
            best,
            f"{record.env_steps:,}" if record.env_steps is not None else "-",
            (record.started or "-").replace("T", " "),
            _relative(record.path),
        )
    print_table(console, table)


def _relative(path: str) -> str:
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path
