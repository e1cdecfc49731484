"""APPO and IMPALA on CartPole with their shipped experiments: time to the 475 target, greedy score.

    python benchmarks/appo_impala.py [--work DIR] [--seeds 0 1 2] [--episodes 100]

Each seed runs ``rlplat train experiments/cartpole_{appo,impala}.yaml seed=<s>`` (2 env runners
sampling asynchronously; the run stops when the mean return of the last 100 training episodes
reaches 475, or at 1M env steps), then ``rlplat eval <run> -n 100 --json`` scores its best
checkpoint greedily (episode seeds 0..99). One process runs at a time; a stage whose output is
under ``--work`` is skipped. Results go to benchmarks/results/appo_impala.json; the Markdown
table printed at the end has docs/benchmarks.md's numbers.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from harness import machine, results_file, save_results, score, train_row

RESULTS = results_file("appo_impala.json")
EXPERIMENTS = {"APPO": "cartpole_appo.yaml", "IMPALA": "cartpole_impala.yaml"}
TARGET = 475.0


def table(results: dict[str, Any]) -> str:
    lines = [
        "| algorithm | seed | reached 475 | env steps | training s | greedy return, 100 episodes |",
        "|---|---|---|---|---|---|",
    ]
    for algorithm, runs in results["runs"].items():
        for seed, row in runs.items():
            greedy = row["score"]["greedy_returns"]
            lines.append(
                f"| {algorithm} | {seed} | {'yes' if row['reached_target'] else 'no'} "
                f"| {row['env_steps']:,} | {row['training_s']:.0f} "
                f"| {greedy['mean']:.1f} ± {greedy['std']:.1f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="rlplat-async-"))
    results: dict[str, Any] = {"machine": machine(), "runs": {}}
    for algorithm, experiment in EXPERIMENTS.items():
        for seed in args.seeds:
            run = train_row(experiment, [f"seed={seed}"], work / f"{algorithm.lower()}_{seed}")
            run["reached_target"] = (run["final_window_return"] or 0.0) >= TARGET
            run["score"] = score(run["run_dir"], args.episodes)
            results["runs"].setdefault(algorithm, {})[str(seed)] = run
            save_results(RESULTS, results)
    print(table(results))


if __name__ == "__main__":
    main()
