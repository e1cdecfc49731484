"""QMIX against VDN and IQL: the two-step game over seeds, and learning curves on simple_spread.

    python benchmarks/qmix.py [--only two_step simple_spread] [--seeds 10] [--env-steps 180000]

One process at a time, each through the real CLI (``rlplat train`` then ``rlplat eval``):
- two_step: experiments/two_step_{qmix,vdn}.yaml for seeds 0..N-1; the greedy return of each final
  checkpoint (the game is deterministic, one episode says it all). QMIX should reach 8, VDN 7.
- simple_spread: experiments/simple_spread_qmix.yaml with training.mixer qmix, vdn and none (IQL)
  for the same env steps; the learning curve (env steps, wall time, exploring return) of each, and
  100 greedy episodes of each final checkpoint against a uniformly random team on the same seeds.
Writes benchmarks/results/qmix.json and prints Markdown tables.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from harness import REPO, eval_report, load_results, results_file, save_results, train

RESULTS = results_file("qmix.json")
MIXERS = {"qmix": "QMIX", "vdn": "VDN", "none": "IQL"}


def greedy_eval(run_dir: str, episodes: int) -> dict:
    report = eval_report(run_dir, episodes, "--last")
    return {
        "mean": report["returns"]["mean"],
        "std": report["returns"]["std"],
        "se": report["returns"]["std"] / np.sqrt(episodes),
    }


def two_step(seeds: int, work: Path) -> dict:
    results: dict = {}
    for mixer in ("qmix", "vdn"):
        returns, seconds = [], []
        for seed in range(seeds):
            experiment = f"experiments/two_step_{mixer}.yaml"
            summary = train(experiment, f"seed={seed}", out=work / f"{mixer}-{seed}").summary()
            returns.append(greedy_eval(summary["run_dir"], 1)["mean"])
            seconds.append(round(summary["wall_time_s"], 1))
            print(f"two_step {mixer} seed {seed}: greedy return {returns[-1]:g}", flush=True)
        results[mixer] = {
            "experiment": f"experiments/two_step_{mixer}.yaml",
            "env_steps": summary["trials"][0]["env_steps"],
            "greedy_returns": returns,
            "seeds_optimal_8": sum(r == 8.0 for r in returns),
            "seeds_7": sum(r == 7.0 for r in returns),
            "train_s": seconds,
        }
    return results


def random_team(episodes: int) -> dict:
    """A uniformly random team on the eval seeds (0..episodes-1), through the same team env."""
    from rlplat.experiment.load import load_experiment
    from rlplat.rllib.env_creator import env_creator_for

    experiment = load_experiment(REPO / "experiments/simple_spread_qmix.yaml")
    env = env_creator_for(experiment.experiment)()
    returns = []
    for seed in range(episodes):
        env.reset(seed=seed)
        rng, total, done = np.random.default_rng(seed), 0.0, False
        while not done:
            joint = rng.integers(env.n_actions, size=len(env.members))
            _, reward, terminated, truncated, _ = env.step(joint)
            total, done = total + reward, terminated or truncated
        returns.append(total)
    return {
        "mean": float(np.mean(returns)),
        "std": float(np.std(returns)),
        "se": float(np.std(returns) / np.sqrt(episodes)),
    }


def simple_spread(env_steps: int, episodes: int, work: Path) -> dict:
    results: dict = {"random": random_team(episodes)}
    for mixer, label in MIXERS.items():
        training = train(
            "experiments/simple_spread_qmix.yaml",
            f"training.mixer={mixer}",
            f"stop.env_steps={env_steps}",
            "stop.time_s=900",
            out=work / mixer,
        )
        summary = training.summary()
        trial = summary["trials"][0]
        rows = training.results()
        results[label] = {
            "overrides": [f"training.mixer={mixer}", f"stop.env_steps={env_steps}"],
            "env_steps": trial["env_steps"],
            "train_s": round(rows[-1]["time_total_s"], 1),
            "curve": [
                {
                    "env_steps": r["num_env_steps_sampled_lifetime"],
                    "time_s": round(r["time_total_s"], 1),
                    "return": r["env_runners"].get("episode_return_mean"),
                }
                for r in rows
            ],
            "greedy": greedy_eval(summary["run_dir"], episodes),
        }
        print(f"simple_spread {label}: {results[label]['greedy']}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=["two_step", "simple_spread"])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--env-steps", type=int, default=180_000)
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args()
    results = load_results(RESULTS)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            if name == "two_step":
                results[name] = two_step(args.seeds, Path(tmp) / name)
            else:
                results[name] = simple_spread(args.env_steps, args.episodes, Path(tmp) / name)
            save_results(RESULTS, results)
    print_tables(results)


def print_tables(results: dict) -> None:
    if "two_step" in results:
        print("| two-step game | greedy return 8 | greedy return 7 | env steps | seeds |")
        print("|---|---|---|---|---|")
        for mixer, row in results["two_step"].items():
            n = len(row["greedy_returns"])
            print(
                f"| {MIXERS[mixer]} | {row['seeds_optimal_8']}/{n} | {row['seeds_7']}/{n} "
                f"| {row['env_steps']:,} | 0..{n - 1} |"
            )
    if "simple_spread" in results:
        spread = results["simple_spread"]
        print("\n| simple_spread | greedy team return (100 episodes, ± SE) | env steps | time |")
        print("|---|---|---|---|")
        r = spread["random"]
        print(f"| uniform random | {r['mean']:.2f} ± {r['se']:.2f} | - | - |")
        for label in MIXERS.values():
            if label in spread:
                row, g = spread[label], spread[label]["greedy"]
                print(
                    f"| {label} | {g['mean']:.2f} ± {g['se']:.2f} | {row['env_steps']:,} "
                    f"| {row['train_s']:.0f} s |"
                )


if __name__ == "__main__":
    main()
