"""What scoring every checkpoint by greedy episodes costs: shipped experiments trained to a fixed
env-step budget with rlplat's default evaluation (10 greedy episodes at every checkpoint's
iteration, and of the final checkpoint as it is saved) and without it
(``evaluation.evaluation_interval=null``), one run at a time, taking turns.

    python benchmarks/evaluation_cost.py [--only cartpole_ppo pendulum_sac ...] [--out DIR]

For each it records the training seconds (``time_total_s``: the iterations, RLlib's evaluations
at checkpoint iterations included) and the whole command's seconds (the final checkpoint's
evaluation included). Results go to benchmarks/results/evaluation_cost.json; the table printed at
the end is the one docs/performance.md quotes.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from harness import (
    invocation,
    load_results,
    machine,
    results_file,
    save_results,
    take_turns,
    train_row,
    trial_results,
)

# experiment -> the budget both sides train to (the target is dropped: equal env steps)
TASKS = {
    "cartpole_ppo": "stop={env_steps: 100000}",
    "cartpole_dqn": "stop={env_steps: 30000}",
    "pendulum_sac": "stop={env_steps: 6000}",
    "simple_spread_qmix": "stop={env_steps: 30000}",
    "connect_four_ppo": "stop={env_steps: 20000}",
}
SIDES = {"evaluating": [], "not evaluating": ["evaluation.evaluation_interval=null"]}
RESULTS = results_file("evaluation_cost.json")


def measure(task: str, budget: str, out: Path, round_: int) -> dict:
    def side(name: str):
        return lambda: train_row(f"{task}.yaml", [budget, *SIDES[name]], out / task / name)

    row = take_turns(round_, {name: side(name) for name in SIDES})
    evaluating, plain = row["evaluating"], row["not evaluating"]
    results = trial_results(Path(evaluating["run_dir"]) / "trial_00000")
    # RLlib's at checkpoint iterations, and the final checkpoint's as it was saved
    evaluating["evaluations"] = sum("evaluation" in result for result in results) + 1
    row["training_cost"] = round(evaluating["training_s"] / plain["training_s"] - 1, 3)
    row["command_cost"] = round(evaluating["command_wall_s"] / plain["command_wall_s"] - 1, 3)
    return row


def table(results: dict) -> str:
    lines = [
        "| experiment (budget) | iterations | evaluations | training s: evaluating / not | "
        "added | command s: evaluating / not | added |",
        "|---|---|---|---|---|---|---|",
    ]
    for task, row in results["tasks"].items():
        evaluating, plain = row["evaluating"], row["not evaluating"]
        lines.append(
            f"| {task} ({TASKS[task].split(': ')[1].rstrip('}')} env steps) | "
            f"{evaluating['iterations']} | {evaluating.get('evaluations', '-')} | "
            f"{evaluating['training_s']} / {plain['training_s']} | "
            f"{row['training_cost']:+.0%} | "
            f"{evaluating['command_wall_s']} / {plain['command_wall_s']} | "
            f"{row['command_cost']:+.0%} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--out", type=Path, default=None, help="Where the runs go (default: tmp).")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="evaluation-cost-"))
    results = load_results(RESULTS)
    results.update(command=invocation(), machine=machine())
    tasks = results.setdefault("tasks", {})
    for round_, task in enumerate(args.only):
        tasks[task] = measure(task, TASKS[task], out, round_)
        save_results(RESULTS, results)
    print(table(results))


if __name__ == "__main__":
    main()
