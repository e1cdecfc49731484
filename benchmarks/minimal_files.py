"""A minimal experiment file against Stable-Baselines3's defaults, side by side in one run.

    pip install -e ".[bench]"
    python benchmarks/minimal_files.py [--cases dqn:CartPole-v1 sac:Pendulum-v1 ...]
                                       [--seeds 0 1 2] [--budget N]

A minimal file names only the algorithm, the env and a stop condition (``stop.env_steps``), so
rlplat's settings for one machine (docs/algorithms.md) and otherwise RLlib's defaults apply. SB3's
side is ``ALGO("MlpPolicy", env, seed=S).learn(N)`` with every default (PQN's peer: SB3's DQN;
CrossQ's: sb3-contrib's), torch on one thread (as rlplat's trial, which reserves one CPU). Per
case and seed, one pair, alternating which side goes
first, one process at a time: env steps per second of training (rlplat: the trial's env steps over
its ``time_total_s``; SB3: over ``learn()``) and the greedy return of the final policy over 20
episodes (``rlplat eval <run> --last -n 20``; SB3: its ``predict(deterministic=True)`` on
episodes seeded 0..19). Results: benchmarks/results/minimal_files.json; the Markdown table
printed at the end; ``--only rlplat`` reruns one side beside the other's earlier rows (after a
change to one side). ``python benchmarks/minimal_files.py --sb3 ALGO ENV SEED BUDGET`` is SB3's
process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from harness import (
    eval_report,
    load_results,
    machine,
    results_file,
    run,
    save_results,
    sb3_greedy_return,
    take_turns,
    train,
)

RESULTS = results_file("minimal_files.json")
# Budgets long enough for SB3's defaults to learn something on these tasks, short enough for
# this CPU (SAC at SB3's ~70 env steps/s: 20k env steps take about 5 minutes).
BUDGETS = {"CartPole-v1": 50_000, "Pendulum-v1": 20_000, "LunarLander-v3": 200_000,
           "LunarLanderContinuous-v3": 100_000}  # fmt: skip
EPISODES = 20
MINIMAL = (
    "name: minimal-{algo}\nalgorithm: {name}\nenv: {{id: {env}}}\nstop: {{env_steps: {budget}}}\n"
)
NAMES = {"dqn": "DQN", "sac": "SAC", "ppo": "PPO", "td3": "TD3", "crossq": "CrossQ", "pqn": "PQN"}
# SB3 has no PQN: its DQN with every default is the value-based peer on the same task.
SB3_PEER = {"pqn": "dqn"}


def rlplat_side(algo: str, env: str, seed: int, budget: int, scratch: Path) -> dict[str, Any]:
    path = scratch / f"{algo}-{env}-{seed}.yaml"
    path.write_text(MINIMAL.format(algo=algo, name=NAMES[algo], env=env, budget=budget))
    training = train(path, f"seed={seed}", out=scratch / f"out-{algo}-{env}-{seed}", check=False)
    if training.error:
        return {"error": training.error}
    last = training.results()[-1]
    steps = int(last["num_env_steps_sampled_lifetime"])
    report = eval_report(training.run_dir, EPISODES, "--last")
    return {
        "env_steps": steps,
        "train_s": round(last["time_total_s"], 2),
        "env_steps_per_s": round(steps / last["time_total_s"], 1),
        "greedy_return_mean": round(report["returns"]["mean"], 2),
        "command_wall_s": training.wall_s,
        "run_dir": str(training.run_dir),
    }


def sb3_side(algo: str, env: str, seed: int, budget: int) -> dict[str, Any]:
    peer = SB3_PEER.get(algo, algo)
    command = [sys.executable, __file__, "--sb3", peer, env, str(seed), str(budget)]
    process = run(command)
    if not process.ok:
        return {"error": process.tail()}
    return {**json.loads(process.stdout.splitlines()[-1]), "command_wall_s": process.wall_s}


def sb3_main(algo: str, env_id: str, seed: int, budget: int) -> None:
    import gymnasium as gym
    import stable_baselines3
    import torch

    torch.set_num_threads(1)
    if algo == "crossq":
        import sb3_contrib

        cls = sb3_contrib.CrossQ
    else:
        cls = getattr(stable_baselines3, NAMES[algo])
    model = cls("MlpPolicy", env_id, seed=seed, device="cpu")
    started = time.monotonic()
    model.learn(budget)
    train_s = time.monotonic() - started
    env = gym.make(env_id)
    returns = [sb3_greedy_return(model, env, episode) for episode in range(EPISODES)]
    print(json.dumps({
        "env_steps": budget,
        "train_s": round(train_s, 2),
        "env_steps_per_s": round(budget / train_s, 1),
        "greedy_return_mean": round(statistics.mean(returns), 2),
    }))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=["dqn:CartPole-v1", "sac:Pendulum-v1"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=int, help="env steps for every case (default: per env)")
    parser.add_argument(
        "--only",
        choices=["rlplat", "sb3"],
        help="run one side; the other's result of an earlier run is kept, marked earlier_run",
    )
    parser.add_argument("--sb3", nargs=4, metavar=("ALGO", "ENV", "SEED", "BUDGET"))
    args = parser.parse_args()
    if args.sb3:
        algo, env, seed, budget = args.sb3
        sb3_main(algo, env, int(seed), int(budget))
        return
    results = load_results(RESULTS)
    with tempfile.TemporaryDirectory() as scratch:
        for case in args.cases:
            algo, env = case.split(":")
            budget = args.budget or BUDGETS[env]
            for pair, seed in enumerate(args.seeds):
                sides = {
                    "rlplat": partial(rlplat_side, algo, env, seed, budget, Path(scratch)),
                    "sb3": partial(sb3_side, algo, env, seed, budget),
                }
                earlier = next(
                    (r for r in results.get(case, {}).get(str(budget), []) if r["seed"] == seed),
                    {},
                )
                if args.only:
                    sides = {args.only: sides[args.only]}
                row = {"seed": seed, "budget": budget, **take_turns(pair, sides)}
                for side in {"rlplat", "sb3"} - set(sides):
                    row[side] = {**earlier.get(side, {"error": "not run"}), "earlier_run": True}
                print(case, json.dumps(row), flush=True)
                rows = results.setdefault(case, {}).setdefault(str(budget), [])
                rows[:] = [r for r in rows if r["seed"] != seed] + [row]
                results["machine"] = machine()
                # Re-read just before saving: another run may have saved its rows meanwhile.
                latest = load_results(RESULTS)
                latest.setdefault(case, {})[str(budget)] = rows
                latest["machine"] = results["machine"]
                save_results(RESULTS, latest)
    print(table(load_results(RESULTS)))


def table(results: dict[str, Any]) -> str:
    lines = [
        "| case, env steps | env steps/s: rlplat / SB3 | whole command s: rlplat / SB3 "
        "| greedy return (20 episodes): rlplat / SB3 | seeds |",
        "| --- | --- | --- | --- | --- |",
    ]
    for case, budgets in results.items():
        if case == "machine":
            continue
        for budget, rows in budgets.items():
            done = [r for r in rows if "error" not in r["rlplat"] and "error" not in r["sb3"]]
            if not done:
                continue

            def median(side: str, key: str, rows: list = done) -> float:
                return statistics.median(r[side][key] for r in rows)

            lines.append(
                f"| {case}, {int(budget):,} | {median('rlplat', 'env_steps_per_s'):,.0f} / "
                f"{median('sb3', 'env_steps_per_s'):,.0f} | "
                f"{_walls(done)} | "
                f"{median('rlplat', 'greedy_return_mean'):.1f} / "
                f"{median('sb3', 'greedy_return_mean'):.1f} | "
                f"{', '.join(str(r['seed']) for r in done)}{_earlier(done)} |"
            )
    return "\n".join(lines)


def _walls(rows: list[dict[str, Any]]) -> str:
    """Median whole-command seconds of each side (SB3's process includes its 20 greedy episodes;
    rlplat's train command its own scoring), '-' where an earlier result lacks them."""
    if not all("command_wall_s" in r[side] for r in rows for side in ("rlplat", "sb3")):
        return "-"
    rlplat = statistics.median(r["rlplat"]["command_wall_s"] for r in rows)
    sb3 = statistics.median(r["sb3"]["command_wall_s"] for r in rows)
    return f"{rlplat:.1f} / {sb3:.1f} ({rlplat / sb3:.2f}x)"


def _earlier(rows: list[dict[str, Any]]) -> str:
    sides = sorted({side for r in rows for side in ("rlplat", "sb3") if r[side].get("earlier_run")})
    return f" ({' and '.join(sides)}: an earlier run)" if sides else ""


if __name__ == "__main__":
    main()
