"""Env-runner scaling: PPO env steps/s on pistonball with 1, 2, 4, ... env runners.

Each configuration is one `rlplat train experiments/pistonball_ppo.yaml` run through the CLI, one
at a time, with the same work per env runner (``--steps-per-runner`` env steps per iteration, so
the train batch grows with the runner count) and one CPU per runner. The first iteration (actor
start-up, CUDA warm-up) is left out; the rest give:

- env steps/s: env steps sampled / wall time of the iterations (sampling and learning),
- sampling env steps/s: env steps per iteration / RLlib's env-runner sampling time,
- learner piston steps/s: agent steps per iteration / RLlib's learner update time,
- efficiency: sampling env steps/s per runner, relative to one runner.

    python benchmarks/scaling.py --runners 1 2 4 8 14 --learner-gpus 1 --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from harness import REPO, save_results, train

EXPERIMENT = REPO / "experiments" / "pistonball_ppo.yaml"
PISTONS = 20  # agents per env step (n_pistons in the experiment)


def run(runners: int, steps_per_runner: int, iterations: int, learner_gpus: float) -> dict:
    """Train one configuration; the per-iteration numbers from its result.json."""
    with tempfile.TemporaryDirectory() as out:
        batch = steps_per_runner * runners
        training = train(
            EXPERIMENT,
            f"stop.iterations={iterations}",
            "stop.env_steps=null",
            f"resources.env_runners.count={runners}",
            "resources.env_runners.cpus=1",
            f"resources.learners.gpus={learner_gpus}",
            f"training.train_batch_size_per_learner={batch}",
            f"training.minibatch_size={min(batch, 500)}",
            "checkpoint.every=0",
            "checkpoint.at_end=false",
            out=Path(out),
        )
        rows = training.results()
    measured = rows[1:]  # the first iteration starts the actors
    steps = [
        b["num_env_steps_sampled_lifetime"] - a["num_env_steps_sampled_lifetime"]
        for a, b in zip(rows, rows[1:], strict=False)
    ]
    iteration_s = sum(r["time_this_iter_s"] for r in measured)
    sampling_s = sum(r["timers"]["env_runner_sampling_timer"] for r in measured)
    learner_s = sum(r["timers"]["learner_update_timer"] for r in measured)
    return {
        "runners": runners,
        "learner_gpus": learner_gpus,
        "train_batch_env_steps": batch,
        "iterations_measured": len(measured),
        "env_steps_per_s": sum(steps) / iteration_s,
        "sampling_env_steps_per_s": sum(steps) / sampling_s,
        "learner_piston_steps_per_s": sum(steps) * PISTONS / learner_s,
        "command_wall_s": training.wall_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps-per-runner", type=int, default=250)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--learner-gpus", type=float, default=0.0)
    parser.add_argument(
        "--out",
        type=Path,
        help="also write the rows here (benchmarks/results/scaling.json keeps each day's run)",
    )
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    results = []
    for runners in args.runners:
        row = run(runners, args.steps_per_runner, args.iterations, args.learner_gpus)
        results.append(row)
        base = results[0]["sampling_env_steps_per_s"] / results[0]["runners"]
        row["efficiency"] = row["sampling_env_steps_per_s"] / row["runners"] / base
        print(json.dumps(row), flush=True)
    if args.out:
        save_results(args.out, results)


if __name__ == "__main__":
    main()
