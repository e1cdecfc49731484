"""Multi-agent experiments: trained against untrained, measured with ``rlplat eval``.

    python benchmarks/multi_agent.py [--only simple_spread connect_four pistonball] [--episodes 100]

One process at a time (trainings never share the CPU), each through the real CLI:
- simple_spread and connect_four: an *untrained* checkpoint (one iteration with ``lr=0``: the
  initial weights, so ``--explore`` samples from the initial, near-uniform policy) and the shipped
  experiment trained to its stop condition; both evaluated with ``rlplat eval --explore`` (and the
  trained one greedy too) on the same episode seeds.
- pistonball: a few iterations of the shipped experiment for its env steps/s, then one episode
  of its checkpoint rendered to a GIF.
Writes benchmarks/results/multi_agent.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from harness import eval_report, load_results, results_file, rlplat, save_results, train

RESULTS = results_file("multi_agent.json")


def evaluate(run: str, episodes: int, *flags: str) -> dict:
    report = eval_report(run, episodes, *flags)
    return {
        "team_return": report["returns"],
        "policy_returns": {p: s["mean"] for p, s in report["policy_returns"].items()},
        "checkpoint": report["checkpoint"],
    }


def trained_vs_untrained(name: str, episodes: int, work: Path) -> dict:
    experiment = f"experiments/{name}.yaml"
    untrained = train(experiment, "training.lr=0.0", "stop.iterations=1", out=work / "untrained")
    trained = train(experiment, out=work / "trained")
    summary = trained.summary()
    trial = summary["trials"][0]
    return {
        "experiment": experiment,
        "episodes": episodes,
        "untrained_explore": evaluate(untrained.summary()["run_dir"], episodes, "--explore"),
        "trained_explore": evaluate(summary["run_dir"], episodes, "--explore"),
        "trained_greedy": evaluate(summary["run_dir"], episodes),
        "train_wall_s": round(trained.wall_s, 1),
        "train_s": round(summary["wall_time_s"], 1),
        "env_steps": trial["env_steps"],
        "iterations": trial["iterations"],
        "final_windowed_return": trial["final_return"],
    }


def pistonball(work: Path, iterations: int) -> dict:
    training = train(
        "experiments/pistonball_ppo.yaml", f"stop.iterations={iterations}", out=work / "pistonball"
    )
    rows = training.results()
    steps, seconds = rows[-1]["num_env_steps_sampled_lifetime"], rows[-1]["time_total_s"]
    sample_s = sum(r["env_runners"]["sample"] for r in rows if "sample" in r["env_runners"])
    gif = ["--render", "gif", "--out", str(work / "videos")]
    rendered = rlplat("eval", training.summary()["run_dir"], "-n", "1", *gif)
    return {
        "experiment": "experiments/pistonball_ppo.yaml",
        "iterations": iterations,
        "env_steps": steps,
        "train_s": round(seconds, 1),
        "env_steps_per_s_with_learning": round(steps / seconds, 1),
        "agent_steps_per_s_with_learning": round(20 * steps / seconds, 1),
        "env_steps_per_s_sampling_only": round(steps / sample_s, 1) if sample_s else None,
        "gif_written": any(line.startswith("Video: ") for line in rendered.stdout.splitlines()),
        "eval_gif_wall_s": round(rendered.wall_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", nargs="+", default=["simple_spread", "connect_four", "pistonball"]
    )
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--pistonball-iterations", type=int, default=4)
    args = parser.parse_args()
    results = load_results(RESULTS)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in args.only:
            if name == "pistonball":
                results[name] = pistonball(work, args.pistonball_iterations)
            else:
                results[name] = trained_vs_untrained(f"{name}_ppo", args.episodes, work / name)
            save_results(RESULTS, results)
            print(json.dumps({name: results[name]}, indent=2), flush=True)
    print_table(results)


def print_table(results: dict) -> None:
    print("| experiment | policy | untrained (--explore) | trained (--explore) | trained (greedy) "
          "| env steps | training time |")
    print("|---|---|---|---|---|---|---|")
    for name, row in results.items():
        if "untrained_explore" not in row:
            continue
        for policy in row["trained_explore"]["policy_returns"]:
            cells = [
                f"{row[k]['policy_returns'][policy]:.2f}"
                for k in ("untrained_explore", "trained_explore", "trained_greedy")
            ]
            print(f"| {name} | {policy} | {' | '.join(cells)} | {row['env_steps']:,} "
                  f"| {row['train_s']:.0f} s |")
    if "pistonball" in results:
        p = results["pistonball"]
        print(f"\npistonball: {p['env_steps_per_s_with_learning']} env steps/s with learning "
              f"({p['agent_steps_per_s_with_learning']} piston steps/s), sampling alone "
              f"{p['env_steps_per_s_sampling_only']} env steps/s; GIF written: {p['gif_written']}")


if __name__ == "__main__":
    main()
