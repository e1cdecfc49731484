"""Issue 104's whole-command comparison: ``rlplat train <experiment> --seeds N --stacked`` (the
seeds as one stacked model in the command's process) against today's ``--seeds N`` (N Tune
trials, as many at once as the CPUs hold), to the same env steps per seed, then ``rlplat report``
of both runs side by side (each seed's greedy return: IQM and 95% CI per side).

    python benchmarks/stacked_command.py [--experiment cartpole_ppo.yaml] [--seeds 16]
                                         [--budget 100000] [--episodes 20]
    python benchmarks/stacked_command.py --experiment pendulum_sac.yaml --budget 20000
    python benchmarks/stacked_command.py --experiment cartpole_pqn.yaml --seeds 8 \
        --set 'evaluation={}' --set training.epsilon_timesteps=50000

Each command runs alone, timed as a user waits for it (launch to exit), with its own Ray
(``RLPLAT_RAY_IDLE_S=0``: no warm Ray kept between them). The return target of the file is
switched off (``stop.episode_return_mean=null``) so that both train every seed to ``--budget``.
``--set`` adds an override to both sides (a stack plays no evaluation runners:
``evaluation={}`` takes them out of both). Runs found under ``--out`` are reused (a benchmark
going on in a later session). Results go to benchmarks/results/stacked_command.json.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from harness import (
    load_results,
    provenance,
    read_json,
    results_file,
    rlplat,
    save_results,
    train,
    trial_results,
)

from rlplat.report.stats import bootstrap_estimate, iqm

RESULTS = results_file("stacked_command.json")
CURVE_FRACTIONS = (0.2, 0.4, 0.6, 0.8)  # of the budget: where the training curves are compared
SIDES = {"stacked": ("--stacked",), "separate": ()}


def side(
    experiment: str, seeds: int, budget: int, flags: tuple[str, ...], out: Path, extra: list[str]
) -> dict:
    """One side's command, its wall time, training seconds and each seed's env steps."""
    overrides = ("--seeds", str(seeds), *flags, "stop.episode_return_mean=null",
                 f"stop.env_steps={budget}", *extra)  # fmt: skip
    training = train(f"experiments/{experiment}", *overrides, out=out, reuse=True)
    run = training.run_dir
    [driver] = read_json(run / "run.json")["drivers"]
    timings = driver["timings"]["stages_s"]
    curves = {int(budget * fraction): [] for fraction in CURVE_FRACTIONS}
    steps = []
    for trial in sorted(run.glob("trial_*/result.json")):
        results = trial_results(trial.parent)
        steps.append(int(results[-1]["num_env_steps_sampled_lifetime"]))
        for step in curves:  # the training window's return once the seed has this many
            reached = [r for r in results if r["num_env_steps_sampled_lifetime"] >= step]
            if reached:
                curves[step].append(reached[0]["window"]["episode_return_mean"])
    return {
        "command": f"rlplat train experiments/{experiment} {' '.join(overrides)}",
        "run_dir": str(run),
        # Timed here, or (a run reused) as the command recorded it.
        "command_wall_s": training.wall_s or driver["timings"]["total_s"],
        "stage_s": timings,
        "training_return_iqm": {
            str(step): bootstrap_estimate(scores, iqm, seed=0).to_json()
            for step, scores in curves.items()
            if scores
        },
        "seeds": len(steps),
        "env_steps_per_seed": sorted(set(steps)),
    }


def side_by_side(runs: list[str], out: Path, episodes: int) -> dict[str, Any]:
    """``rlplat report`` of both runs (reused when ``out`` has it): each side's IQM and mean
    over its seeds with their 95% intervals, and each seed's greedy return."""
    command = ["report", *runs, "--out", str(out), "--eval-episodes", str(episodes)]
    if not (out / "report.json").exists():
        rlplat(*command)
    experiments = read_json(out / "report.json")["experiments"]
    return {
        "command": "rlplat " + " ".join(command),
        "figures": str(out),
        "sides": [
            {
                "label": experiment["label"],
                "iqm": experiment["aggregates"]["iqm"],
                "mean": experiment["aggregates"]["mean"],
                "final_scores": experiment["final_scores"],
            }
            for experiment in experiments
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", default="cartpole_ppo.yaml")
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--budget", type=int, default=100_000)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "rlplat-stacked")
    parser.add_argument("--set", action="append", default=[], help="an override for both")
    args = parser.parse_args()
    os.environ["RLPLAT_RAY_IDLE_S"] = "0"  # each command starts and stops its own Ray
    label = f"{Path(args.experiment).stem}_{args.seeds}_seeds"
    out = args.out / Path(args.experiment).stem / f"{args.seeds}x{args.budget}"
    sides: dict[str, Any] = {}
    for name, flags in SIDES.items():  # one at a time
        sides[name] = side(args.experiment, args.seeds, args.budget, flags, out / name, args.set)
        print(name, sides[name], flush=True)
    runs = [sides["stacked"]["run_dir"], sides["separate"]["run_dir"]]
    report = side_by_side(runs, out / "report", args.episodes)
    stacked, separate = sides["stacked"]["command_wall_s"], sides["separate"]["command_wall_s"]
    results = load_results(RESULTS)
    results[label] = {
        **sides,
        "speedup": round(separate / stacked, 2) if stacked and separate else None,
        "report": report,
        **provenance(),
    }
    save_results(RESULTS, results)
    print(results[label], flush=True)


if __name__ == "__main__":
    main()
