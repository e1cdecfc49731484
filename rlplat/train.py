"""``rlplat train``: run a validated experiment through Ray Tune and report where it went."""

from __future__ import annotations

import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from rlplat.build import effective_resources
from rlplat.checkpoints import checkpoint_recorder
from rlplat.config.load import LoadedExperiment
from rlplat.config.schema import Experiment
from rlplat.errors import RlplatError
from rlplat.metrics import (
    AGENT_RETURNS,
    ENV_STEPS,
    POLICY_RETURNS,
    RETURN_MEAN,
    finite,
    lookup,
    member_returns,
    metric_path,
)
from rlplat.progress import ProgressPrinter, format_duration
from rlplat.run_dir import RESOLVED_EXPERIMENT, create_run_dir, write_run_files, write_summary


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
    policy_returns: dict[str, float] = field(default_factory=dict)  # multi-agent, windowed
    agent_returns: dict[str, float] = field(default_factory=dict)


@dataclass
class RunSummary:
    run_dir: str
    wall_time_s: float
    trials: list[TrialSummary] = field(default_factory=list)


def resolve_experiment(loaded: LoadedExperiment) -> dict[str, Any]:
    """The experiment with every default filled in, as written to ``experiment.yaml``."""
    exp = loaded.experiment
    resolved = exp.model_dump(mode="json")
    if loaded.algo_config is not None:
        for group, values in effective_resources(loaded.algo_config).items():
            resolved["resources"][group].update(values)
    return resolved


def stop_criteria(exp: Experiment) -> dict[str, float]:
    return {metric_path(k): v for k, v in exp.stop.model_dump().items() if v is not None}


def trial_dirname(trial: Any) -> str:
    return f"trial_{trial.trial_id.rsplit('_', 1)[-1]}"


def train(
    loaded: LoadedExperiment,
    *,
    address: str | None = None,
    verbose: bool = False,
    console: Console | None = None,
) -> RunSummary:
    """Run the experiment as a Tune search of one trial and summarise it."""
    from ray import tune

    from rlplat.algorithms.registry import get_algorithm_class
    from rlplat.cluster import check_trial_fits, start_ray
    from rlplat.tensorboard import EnvStepTensorBoardLogger
    from rlplat.videos import TrainingVideos

    console = console or Console()
    exp = loaded.experiment
    if exp.seed is None:  # record the seed actually used, so the run can be repeated
        exp.seed = random.randrange(2**31)
        loaded.algo_config.debugging(seed=exp.seed)
    start_ray(address, verbose)
    algo_cls = get_algorithm_class(exp.algorithm)
    check_trial_fits(algo_cls, loaded.algo_config)
    run_dir = create_run_dir(Path(exp.output_dir).resolve() / exp.name)
    write_run_files(run_dir, resolve_experiment(loaded), address)
    console.print(f"Run directory: [bold]{run_dir}[/bold]", highlight=False)

    # Tune's own progress tables would interleave with ours; verbose=0 silences the old engine.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    score = metric_path(exp.checkpoint.score)
    progress = ProgressPrinter(exp.stop, console)
    tensorboard = EnvStepTensorBoardLogger()
    callbacks = [
        progress,
        tensorboard,
        checkpoint_recorder(run_dir, exp.checkpoint.score, exp.checkpoint.mode),
    ]
    if exp.video.every:
        callbacks.append(TrainingVideos(exp, run_dir / RESOLVED_EXPERIMENT, tensorboard))
    tuner = tune.Tuner(
        algo_cls,
        param_space=loaded.algo_config,
        tune_config=tune.TuneConfig(
            num_samples=1,
            trial_name_creator=trial_dirname,
            trial_dirname_creator=trial_dirname,
        ),
        run_config=tune.RunConfig(
            name=run_dir.name,
            storage_path=str(run_dir.parent),
            stop=stop_criteria(exp),
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=exp.checkpoint.keep,
                checkpoint_score_attribute=score,
                checkpoint_score_order=exp.checkpoint.mode,
                checkpoint_frequency=exp.checkpoint.every,
                checkpoint_at_end=exp.checkpoint.at_end,
            ),
            callbacks=callbacks,
            verbose=0,
        ),
    )
    started = time.monotonic()
    grid = tuner.fit()
    summary = RunSummary(run_dir=str(run_dir), wall_time_s=time.monotonic() - started)
    for result in grid:
        metrics = result.metrics or {}
        best = result.get_best_checkpoint(score, exp.checkpoint.mode) if result.checkpoint else None
        trial_path = Path(result.path)
        summary.trials.append(
            TrialSummary(
                name=trial_path.name,
                path=str(trial_path),
                status="error" if result.error else "finished",
                iterations=metrics.get("training_iteration"),
                env_steps=int(finite(lookup(metrics, ENV_STEPS)) or 0) or None,
                final_return=finite(lookup(metrics, RETURN_MEAN)),
                best_return=progress.best_return.get(trial_path.name),
                best_checkpoint=best.path if best else None,
                last_checkpoint=result.checkpoint.path if result.checkpoint else None,
                error=_first_line(result.error) if result.error else None,
                policy_returns=dict(lookup(metrics, POLICY_RETURNS) or {}),
                agent_returns=dict(lookup(metrics, AGENT_RETURNS) or {}),
            )
        )
    write_summary(run_dir, asdict(summary))
    return summary


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[-1] if text else type(error).__name__


def print_summary(summary: RunSummary, console: Console) -> None:
    """What happened, where the checkpoints are, and what to run next."""
    run_dir = Path(summary.run_dir)
    console.print(
        f"\nRun finished in {format_duration(summary.wall_time_s)}: {run_dir}", highlight=False
    )
    for trial in summary.trials:
        if trial.error:
            console.print(
                f"  [red]{trial.name} failed[/red]: {escape(trial.error)}\n"
                f"  full traceback: {Path(trial.path) / 'error.txt'}",
                highlight=False,
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
        console.print(f"    best checkpoint: {trial.best_checkpoint}", highlight=False)
        console.print(f"    last checkpoint: {trial.last_checkpoint}", highlight=False)
    console.print("Next:", highlight=False)
    if any(trial.best_checkpoint for trial in summary.trials):
        console.print(
            f"  rlplat eval {run_dir}                     # 10 greedy episodes", highlight=False
        )
        console.print(f"  rlplat eval {run_dir} -n 1 --render gif   # watch one", highlight=False)
    console.print(f"  tensorboard --logdir {run_dir.parent}", highlight=False)


def raise_if_failed(summary: RunSummary) -> None:
    failed = [t for t in summary.trials if t.error]
    if failed:
        raise RlplatError(
            f"{len(failed)} of {len(summary.trials)} trial(s) failed; see the error.txt in "
            + ", ".join(t.path for t in failed)
        )
