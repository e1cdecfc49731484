"""MADDPG on mpe2 with rlplat's own commands: train, then score greedily against random sides.

    python benchmarks/maddpg.py [--work DIR] [--only spread adversary masac] [--episodes 100]
                                 [--masac-steps 100000]

spread: ``experiments/simple_spread_maddpg.yaml`` (continuous actions, N=3, 20 minutes) and
shared PPO on the same continuous env (``experiments/simple_spread_ppo.yaml`` with
``env.kwargs.continuous_actions=true``, the same 20 minutes), each scored by
``rlplat eval <run> -n 100 --json`` (greedy, episode seeds 0..99, the run's best checkpoint),
and a uniformly random team (the MADDPG checkpoint with every policy ``--random``).
adversary: ``experiments/simple_adversary_maddpg.yaml``, then a cross-play table: good agents
trained or random x adversary trained or random (``--random good`` / ``--random adversary``),
100 greedy episodes each, the mean return of each side.
masac: ``experiments/simple_spread_masac.yaml`` beside ``simple_spread_maddpg.yaml`` (the same
loop, batch, learning rates and gamma) at the same env steps (``--masac-steps``, 100k by
default), one after the other, each scored by 100 greedy episodes as above.

One process runs at a time; stages are skipped when their output exists under ``--work``.
Results go to benchmarks/results/maddpg.json; the Markdown tables printed at the end have
docs/benchmarks.md's numbers.
"""

from __future__ import annotations

import argparse
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from harness import load_results, machine, results_file, save_results, score, train_row

RESULTS = results_file("maddpg.json")
BUDGET = ["stop.time_s=1200"]  # the 20 minutes of training
EQUAL_STEPS = 100_000  # masac: env steps of each side (--masac-steps)


def spread(work: Path, episodes: int) -> dict[str, Any]:
    maddpg = train_row("simple_spread_maddpg.yaml", BUDGET, work / "spread_maddpg")
    ppo = train_row(
        "simple_spread_ppo.yaml",
        ["env.kwargs.continuous_actions=true", *BUDGET, "stop.env_steps=100000000"],
        work / "spread_ppo",
    )
    trained = score(maddpg["run_dir"], episodes)
    return {
        "maddpg": {**maddpg, "score": trained},
        "ppo_shared": {**ppo, "score": score(ppo["run_dir"], episodes)},
        "random_team": score(maddpg["run_dir"], episodes, list(trained["policy_returns"])),
    }


def adversary(work: Path, episodes: int) -> dict[str, Any]:
    run = train_row("simple_adversary_maddpg.yaml", BUDGET, work / "adversary_maddpg")
    cells = {}
    for good in ("trained", "random"):
        for adversary_side in ("trained", "random"):
            random = [
                p for p, side in (("good", good), ("adversary", adversary_side)) if side == "random"
            ]
            cells[f"good {good} x adversary {adversary_side}"] = score(
                run["run_dir"], episodes, random
            )
    return {"maddpg": run, "cross_play": cells}


def masac(work: Path, episodes: int, steps: int = EQUAL_STEPS) -> dict[str, Any]:
    rows = {}
    budget = [f"stop.env_steps={steps}", "stop.time_s=null"]
    for name in ("masac", "maddpg"):
        out = work / f"equal_{name}" if steps == EQUAL_STEPS else work / f"equal_{name}_{steps}"
        row = train_row(f"simple_spread_{name}.yaml", budget, out)
        rows[name] = {**row, "score": score(row["run_dir"], episodes)}
    return rows


def masac_key(steps: int) -> str:
    """The results file's key of a masac comparison at ``steps`` env steps."""
    return "masac" if steps == EQUAL_STEPS else f"masac_{steps}"


def _trained_row(name: str, row: dict[str, Any]) -> str:
    r = row["score"]["greedy_returns"]
    return (
        f"| {name} | {r['mean']:.1f} ± {r['std']:.1f} | {row['training_s']:.0f} "
        f"| {row['env_steps']:,} |"
    )


def tables(results: dict[str, Any]) -> str:
    lines = []
    if "spread" in results:
        s = results["spread"]
        lines += [
            "| simple_spread (N=3, continuous) | greedy team return, 100 episodes "
            "| training s | env steps |",
            "|---|---|---|---|",
        ]
        lines += [_trained_row("MADDPG", s["maddpg"]), _trained_row("PPO, shared", s["ppo_shared"])]
        r = s["random_team"]["greedy_returns"]
        lines += [f"| uniform random team | {r['mean']:.1f} ± {r['std']:.1f} | - | - |", ""]
    if "adversary" in results:
        lines += [
            "| simple_adversary, 100 greedy episodes | good agents' mean return (each) "
            "| adversary's mean return |",
            "|---|---|---|",
        ]
        for cell, row in results["adversary"]["cross_play"].items():
            returns = row["policy_returns"]
            lines.append(f"| {cell} | {returns['good'] / 2:.2f} | {returns['adversary']:.2f} |")
    for key in [k for k in results if k.startswith("masac")]:
        lines += [
            "",
            "| simple_spread (N=3, continuous), equal env steps | greedy team return, 100 "
            "episodes | training s | env steps |",
            "|---|---|---|---|",
        ]
        rows = results[key]
        lines += [_trained_row("MASAC", rows["masac"]), _trained_row("MADDPG", rows["maddpg"])]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument(
        "--only", nargs="+", choices=["spread", "adversary", "masac"], default=None
    )
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--masac-steps", type=int, default=EQUAL_STEPS,
                        help="masac: env steps of each side")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="rlplat-maddpg-"))
    saved = load_results(RESULTS)
    stages = {
        "spread": spread,
        "adversary": adversary,
        masac_key(args.masac_steps): partial(masac, steps=args.masac_steps),
    }
    for name, stage in stages.items():
        if args.only and name.split("_")[0] not in args.only:
            continue
        saved[name] = stage(work, args.episodes)
        saved[name]["machine"] = machine()
        save_results(RESULTS, saved)
    print(tables(saved))


if __name__ == "__main__":
    main()
