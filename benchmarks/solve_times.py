"""Time each shipped experiment to its target, side by side in one run.

    python benchmarks/solve_times.py [--seeds 0 1 2] [--only cartpole_ppo ...]

Runs ``rlplat train`` in a subprocess per experiment and seed (one at a time: trainings never
share the CPU), then reads the trial's result.json: the first iteration whose windowed mean
return reaches the experiment's target gives the env steps and training seconds to target.
Updates benchmarks/results/solve_times.json and prints a Markdown table of everything in it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = {
    "cartpole_ppo": REPO / "experiments/cartpole_ppo.yaml",
    "plain_ppo_cartpole (RLlib defaults)": REPO / "benchmarks/plain_ppo_cartpole.yaml",
    "cartpole_dqn": REPO / "experiments/cartpole_dqn.yaml",
    "pendulum_sac": REPO / "experiments/pendulum_sac.yaml",
}


def run_one(path: Path, seed: int, out: Path) -> dict:
    from rlplat.experiment.load import load_experiment

    target = load_experiment(path).experiment.stop.episode_return_mean
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlplat.cli",
            "train",
            str(path),
            f"seed={seed}",
            f"output_dir={out}",
        ],
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    if proc.returncode != 0:
        return {"seed": seed, "error": proc.stderr[-2000:]}
    [summary_path] = out.glob("*/*/summary.json")
    trial = json.loads(summary_path.read_text())["trials"][0]
    rows = [json.loads(line) for line in Path(trial["path"], "result.json").open()]
    hit = next(
        (r for r in rows if r.get("window", {}).get("episode_return_mean", -1e9) >= target), None
    )
    return {
        "seed": seed,
        "target": target,
        "reached": hit is not None,
        "env_steps_to_target": int(hit["num_env_steps_sampled_lifetime"]) if hit else None,
        "train_s_to_target": round(hit["time_total_s"], 1) if hit else None,
        "command_wall_s": round(wall, 1),
        "final_return": trial["final_return"],
        "env_steps_total": trial["env_steps"],
    }


def median(rows: list[dict], key: str) -> float | None:
    return statistics.median(r[key] for r in rows) if rows else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", nargs="+", help="experiment names (prefixes) to run")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {}
    for name, path in EXPERIMENTS.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        for seed in args.seeds:
            with tempfile.TemporaryDirectory() as tmp:
                row = run_one(path, seed, Path(tmp))
            print(name, row, flush=True)
            results.setdefault(name, []).append(row)
    out = REPO / "benchmarks/results/solve_times.json"
    out.parent.mkdir(exist_ok=True)
    # Runs with --only update their experiments and keep the others' earlier results.
    saved = json.loads(out.read_text()) if out.exists() else {}
    for name, rows in results.items():
        saved[name] = {"command": " ".join(sys.argv), "runs": rows}
    out.write_text(json.dumps(saved, indent=2) + "\n")
    results = {name: entry["runs"] for name, entry in saved.items()}
    print(
        "\n| experiment | seeds reaching target | env steps to target (median) "
        "| training s to target (median) | command wall s (median) |"
    )
    print("|---|---|---|---|---|")
    for name, rows in results.items():
        hits = [r for r in rows if r.get("reached")]
        walls = [r for r in rows if "command_wall_s" in r]
        print(
            f"| {name} | {len(hits)}/{len(rows)} | {median(hits, 'env_steps_to_target')} "
            f"| {median(hits, 'train_s_to_target')} | {median(walls, 'command_wall_s')} |"
        )


if __name__ == "__main__":
    main()
