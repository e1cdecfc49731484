"""Offline RL end to end with rlplat's own commands: record or export data, train, score greedily.

    python benchmarks/offline.py [--work DIR] [--only cartpole pendulum] [--episodes 100]

CartPole: the shipped PPO experiment is trained, 50 of its greedy episodes are recorded
(``rlplat eval -n 50 --record``) and ``experiments/cartpole_bc.yaml`` learns from them.
Pendulum: the shipped SAC experiment is trained to its target, its replay memory (every
transition it sampled while learning) is written out (``rlplat dataset --from-replay``), and CQL
(``experiments/pendulum_cql.yaml``), MARWIL (``experiments/pendulum_marwil.yaml``) and BC (the
MARWIL experiment with ``training.beta=0``) learn from it. Every policy is scored by
``rlplat eval <run> -n 100 --json``: greedy, episode seeds 0..99, the run's best checkpoint.

One process runs at a time. Each stage writes under ``--work`` (default: a new temporary
directory) and is skipped when its output is already there, so an interrupted benchmark goes on
where it stopped. Results go to benchmarks/results/offline.json; the Markdown table printed at
the end has docs/benchmarks.md's numbers.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path
from typing import Any

from harness import read_json, results_file, rlplat, save_results, score, train_row

RESULTS = results_file("offline.json")

# name: (experiment, overrides, the data stage it learns from or None)
TRAININGS: dict[str, tuple[str, list[str], str | None]] = {
    "ppo_cartpole": ("cartpole_ppo.yaml", [], None),
    "bc_cartpole": ("cartpole_bc.yaml", [], "cartpole_expert"),
    "sac_pendulum": ("pendulum_sac.yaml", [], None),
    "cql_pendulum": ("pendulum_cql.yaml", [], "pendulum_replay"),
    "marwil_pendulum": ("pendulum_marwil.yaml", [], "pendulum_replay"),
    "bc_pendulum": (
        "pendulum_marwil.yaml",
        ["name=pendulum-bc", "training.beta=0"],
        "pendulum_replay",
    ),
}
GROUPS = {
    "cartpole": ["ppo_cartpole", "cartpole_expert", "bc_cartpole"],
    "pendulum": [
        "sac_pendulum",
        "pendulum_replay",
        "cql_pendulum",
        "marwil_pendulum",
        "bc_pendulum",
    ],
}
SCORED = [
    "ppo_cartpole",
    "bc_cartpole",
    "sac_pendulum",
    "cql_pendulum",
    "marwil_pendulum",
    "bc_pendulum",
]


def train(name: str, work: Path) -> dict[str, Any]:
    experiment, overrides, data = TRAININGS[name]
    extra = [f"offline.input={work / data}"] if data else []
    return train_row(experiment, overrides + extra, work / name)


def record(name: str, work: Path, results: dict[str, Any]) -> dict[str, Any]:
    out = work / name
    if not out.exists():
        if name == "cartpole_expert":
            rlplat("eval", results["ppo_cartpole"]["run_dir"], "-n", "50", "--record", str(out))
        else:
            source = results["sac_pendulum"]["run_dir"]
            rlplat("dataset", source, "--from-replay", "--out", str(out))
    info = read_json(out / "dataset.json")
    return {k: info[k] for k in ("source", "episodes", "env_steps", "returns")}


def table(results: dict[str, Any]) -> str:
    lines = [
        "| policy | learned from | greedy return, 100 episodes (mean ± std) | training s "
        "| iterations |",
        "|---|---|---|---|---|",
    ]
    for name in SCORED:
        if name not in results:
            continue
        row = results[name]
        returns = row["greedy_returns"]
        data = TRAININGS[name][2]
        source = (
            f"{results[data]['episodes']} episodes, {results[data]['env_steps']:,} env steps"
            if data
            else f"env, {row['env_steps']:,} env steps"
        )
        lines.append(
            f"| {name} | {source} | {returns['mean']:.1f} ± {returns['std']:.1f} | "
            f"{row['training_s']} | {row['iterations']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, help="where stages write (reused when present)")
    parser.add_argument("--only", nargs="+", choices=list(GROUPS), default=list(GROUPS))
    parser.add_argument("--episodes", type=int, default=100, help="greedy scoring episodes")
    args = parser.parse_args()
    work = (args.work or Path(tempfile.mkdtemp(prefix="rlplat-offline-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for group in args.only:
        for stage in GROUPS[group]:
            if stage in TRAININGS:
                results[stage] = train(stage, work)
                results[stage].update(score(results[stage]["run_dir"], args.episodes))
            else:
                results[stage] = record(stage, work, results)
            print(stage, json.dumps(results[stage]), flush=True)
    save_results(RESULTS, {"machine": platform.processor() or platform.machine(), **results})
    print(table(results))


if __name__ == "__main__":
    main()
