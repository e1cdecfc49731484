"""What a search reports: a live table of trials, then a ranked table, results.csv and best.yaml.

``results.csv`` has one row per trial: rank, status, why it stopped (a stop condition, early
stopping by the scheduler, an error), iterations, env steps, the final and best value of the
ranking metric, and every searched value (with seeds: each trial's seed and its configuration's
mean over seeds, by which configurations rank). ``best.yaml`` is the winning trial's complete
experiment, which ``rlplat train best.yaml`` runs as one trial (with seeds: the winning
configuration, run again on its seeds).
"""

from __future__ import annotations

import csv
import io
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from rlplat.callbacks.progress import ConsoleCallback
from rlplat.experiment.load import trial_experiment
from rlplat.experiment.schema import StopSpec
from rlplat.experiment.spaces import Space, value_at
from rlplat.experiment.yaml_io import dump_yaml
from rlplat.metrics import (
    ENV_STEPS,
    ITERATION,
    RETURN_MEAN,
    TIME_BUDGET_ENDED,
    TIME_TOTAL,
    finite,
    lookup,
    metric_path,
)
from rlplat.util.atomic import write_atomic
from rlplat.util.tables import new_table, print_table

RESULTS_CSV = "results.csv"
EARLY_STOP = " (early stop)"  # after the scheduler's name: the stop reason of a trial it ended
BEST_YAML = "best.yaml"
PBT_LOG = "pbt_global.txt"  # Tune's PBT log of exploits, one JSON list per line
# Why a trial stopped when its windowed return reached stop.episode_return_mean.
TARGET_REACHED = "stop.episode_return_mean"


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def stop_reason(status: str, result: dict[str, Any], stop: StopSpec, scheduler: str) -> str:
    """What ended a trial: a stop condition (``stop.env_steps``), the scheduler stopping it early
    (``asha (early stop)``), or an error."""
    if status == "error":
        return "error"
    if status != "finished":
        return "-"
    target = stop.episode_return_mean
    score = finite(lookup(result, RETURN_MEAN))
    if target is not None and score is not None and score >= target:
        return TARGET_REACHED
    game_target = stop.game_score_mean
    game_score = finite(lookup(result, metric_path("game_score_mean")))
    if game_target is not None and game_score is not None and game_score >= game_target:
        return "stop.game_score_mean"
    if lookup(result, TIME_BUDGET_ENDED):
        return "stop.time_s"
    for name, path in (("env_steps", ENV_STEPS), ("iterations", ITERATION), ("time_s", TIME_TOTAL)):
        budget = getattr(stop, name)
        done = finite(lookup(result, path))
        if budget is not None and done is not None and done >= budget:
            return f"stop.{name}"
    return f"{scheduler}{EARLY_STOP}"


@dataclass
class TrialRow:
    """One trial as the search report shows it."""

    name: str
    status: str  # finished | error | not finished
    stop_reason: str
    iterations: int | None
    env_steps: int | None
    final: float | None
    best: float | None
    time_s: float | None
    params: dict[str, Any]
    experiment: dict[str, Any] = field(repr=False)
    best_checkpoint: str | None = None
    rank: int | None = None  # the configuration's rank (its seeds share it)
    seed: int | None = None
    config_mean: float | None = None  # the configuration's final metric, mean over its seeds


def configuration_key(experiment: dict[str, Any]) -> str:
    """Trials whose experiments differ only in their seed run one configuration."""
    return json.dumps({k: v for k, v in experiment.items() if k != "seed"}, sort_keys=True)


def rank_rows(rows: list[TrialRow], mode: str, target_reached: str | None = None) -> list[TrialRow]:
    """Configurations best first, by their final metric (``mode``) averaged over their seeds,
    ties to fewer env steps; no metric: last. A configuration's trials follow each other.

    ``target_reached``: the stop reason of trials that reached the metric's own target (the
    return in ``stop.episode_return_mean``). Configurations whose every seed reached it rank
    first, by how few env steps it took: past the target, a higher final return only means the
    last iteration overshot it.
    """
    sign = 1.0 if mode == "max" else -1.0
    groups: dict[str, list[TrialRow]] = {}
    for row in rows:
        # Without seeds every trial stands alone, even if a searcher drew the same values twice.
        key = row.name if row.seed is None else configuration_key(row.experiment)
        groups.setdefault(key, []).append(row)

    def key(group: list[TrialRow]) -> tuple[int, float, float]:
        steps = sum(row.env_steps or 0 for row in group) / len(group)
        if target_reached is not None and all(r.stop_reason == target_reached for r in group):
            return (0, 0.0, steps)
        mean = _mean([row.final for row in group])
        return (1, math.inf if mean is None else -sign * mean, steps)

    ranked: list[TrialRow] = []
    for rank, group in enumerate(sorted(groups.values(), key=key), start=1):
        mean = _mean([row.final for row in group])
        for row in sorted(group, key=lambda r: (r.seed is None, r.seed or 0, r.name)):
            row.rank, row.config_mean = rank, mean
            ranked.append(row)
    return ranked


def _mean(values: list[float | None]) -> float | None:
    """The mean of every seed's value; None when a seed has none (it failed, or never finished
    an episode): a configuration is not judged by its surviving seeds."""
    if not values or any(value is None for value in values):
        return None
    return sum(values) / len(values)


def configuration_count(rows: list[TrialRow]) -> int:
    return len({row.rank for row in rows})


def seeded(rows: list[TrialRow]) -> bool:
    """True when some configuration ran on several seeds."""
    return configuration_count(rows) < len(rows)


def ranked_table(rows: list[TrialRow], metric: str, title: str) -> Table:
    """One line per trial; with seeds, each configuration's trials together, its mean over
    seeds on its first line."""
    with_seeds = seeded(rows)
    seed_column = ["seed"] if with_seeds else []
    table = new_table(
        title,
        ["rank", "trial", *seed_column, "status", "stopped by", *_param_names(rows)],
        ["iter", "env steps", f"{metric} final", "best"]
        + (["mean over seeds"] if with_seeds else []),
    )
    previous_rank = None
    for row in rows:
        mean = _number(row.config_mean) if row.rank != previous_rank else ""
        table.add_row(
            str(row.rank),
            row.name,
            *([str(row.seed)] if with_seeds else []),
            row.status,
            row.stop_reason,
            *(format_value(row.params.get(name)) for name in _param_names(rows)),
            str(row.iterations or 0),
            f"{row.env_steps or 0:,}",
            _number(row.final),
            _number(row.best),
            *([mean] if with_seeds else []),
        )
        previous_rank = row.rank
    return table


def _param_names(rows: list[TrialRow]) -> list[str]:
    return list(dict.fromkeys(name for row in rows for name in row.params))


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def write_results_csv(run_dir: Path, rows: list[TrialRow], metric: str) -> Path:
    """One row per trial; with seeds also each trial's seed and its configuration's mean over
    seeds (``rank`` ranks configurations by it)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    params = _param_names(rows)
    with_seeds = seeded(rows)
    writer.writerow(
        [
            "rank",
            "trial",
            *(["seed"] if with_seeds else []),
            "status",
            "stop_reason",
            "iterations",
            "env_steps",
            f"{metric}_final",
            f"{metric}_best",
            *([f"{metric}_final_mean_over_seeds"] if with_seeds else []),
            "time_s",
            *params,
            "best_checkpoint",
        ]
    )
    for row in rows:
        writer.writerow(
            [
                row.rank,
                row.name,
                *([row.seed] if with_seeds else []),
                row.status,
                row.stop_reason,
                row.iterations,
                row.env_steps,
                row.final,
                row.best,
                *([row.config_mean] if with_seeds else []),
                None if row.time_s is None else round(row.time_s, 1),
                *(_csv_value(row.params.get(name)) for name in params),
                row.best_checkpoint,
            ]
        )
    path = run_dir / RESULTS_CSV
    write_atomic(path, buffer.getvalue())
    return path


def _csv_value(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, (list, dict)) else value


def write_best_yaml(
    run_dir: Path, best: TrialRow, metric: str, population: bool, seeds: list[int] | None
) -> Path:
    """The winner's experiment as a file that ``rlplat train`` runs as one trial (with
    ``seeds``: the winning configuration, run again on the same seeds)."""
    searched = ", ".join(f"{k}={format_value(v)}" for k, v in best.params.items()) or "none"
    if seeds:
        header = [
            f"# Best configuration of the search in {run_dir}: {metric} {_number(best.config_mean)}"
            f" (final, mean over {len(seeds)} seeds).",
            f"# Searched values: {searched}.",
            "# Run it again on the same seeds: rlplat train <this file>",
        ]
    else:
        header = [
            f"# Best trial of the search in {run_dir}: {best.name}, {metric} "
            f"{_number(best.final)} (best {_number(best.best)}) after {best.env_steps or 0:,} "
            "env steps.",
            f"# Searched values: {searched}.",
            "# Run it again as a single trial: rlplat train <this file>",
        ]
    if population:
        header.append(
            "# These are the trial's final hyperparameters; population-based training changed "
            "them during the run (see pbt_global.txt), and a single trial keeps them fixed."
        )
    experiment = dict(best.experiment)
    experiment["name"] = f"{experiment['name']}-best"
    if seeds:
        experiment["seed"], experiment["seeds"] = seeds[0], list(seeds)
    path = run_dir / BEST_YAML
    write_atomic(path, "\n".join(header) + "\n" + dump_yaml(experiment))
    return path


class LiveTrialTable(ConsoleCallback):
    """Every ``interval_s``, a table of all trials: status, seed (with seeds), searched values,
    progress, return."""

    STATUS = {
        "RUNNING": "running",
        "PENDING": "pending",
        "PAUSED": "paused",
        "TERMINATED": "finished",
        "ERROR": "error",
    }

    def __init__(
        self, spaces: list[Space], console: Console, interval_s: float = 30.0, seeded: bool = False
    ):
        self.spaces = spaces
        self.console = console
        self.interval_s = interval_s
        self.paths = [("seed",)] * seeded + [p for space in spaces for p in space.value_paths]
        self._printed_at = time.monotonic()

    def table(self, trials: list) -> Table:
        table = new_table(
            f"{len(trials)} trial(s)",
            ["trial", "status", *(".".join(path) for path in self.paths)],
            ["iter", "env steps", "return"],
        )
        for trial in trials:
            result = trial.last_result or {}
            config = trial_experiment(trial.config)
            table.add_row(
                str(trial),
                self.STATUS.get(trial.status, trial.status.lower()),
                *(format_value(value_at(config, path)) for path in self.paths),
                str(result.get(ITERATION, 0)),
                f"{int(finite(lookup(result, ENV_STEPS)) or 0):,}",
                _number(finite(lookup(result, RETURN_MEAN))),
            )
        return table

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        now = time.monotonic()
        if now - self._printed_at >= self.interval_s and trials:
            self._printed_at = now
            print_table(self.console, self.table(trials))


class PopulationLog(ConsoleCallback):
    """Prints each PBT/PB2 exploit as it happens: who copied whom, and what changed."""

    def __init__(self, run_dir: Path, spaces: list[Space], console: Console):
        self.path = run_dir / PBT_LOG
        self.spaces = spaces
        self.console = console
        self._seen = 0

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return
        # PBT logs experiment tags ("3_lr=0.001"), which it rewrites on each exploit; the number
        # before the first "_" stays the trial's.
        names = {trial.experiment_tag.split("_", 1)[0]: str(trial) for trial in trials}
        for line in lines[self._seen :]:
            try:
                target, source, target_iter, source_iter, old, new = json.loads(line)
            except (ValueError, TypeError):
                continue
            target = names.get(target.split("_", 1)[0], target)
            source = names.get(source.split("_", 1)[0], source)
            changes = [
                f"{s.dotted} {format_value(value_at(old, s.path))} -> "
                f"{format_value(value_at(new, s.path))}"
                for s in self.spaces
            ]
            self.console.print(
                f"[magenta]PBT exploit[/magenta]: {target} (iteration {target_iter}) takes the "
                f"weights of {source} (iteration {source_iter}); explore: {'; '.join(changes)}",
                highlight=False,
            )
        self._seen = len(lines)
