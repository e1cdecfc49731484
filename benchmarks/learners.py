"""Data-parallel learners: PPO CartPole with one learner and with two (gloo, on CPU) at the same
global batch, side by side: env steps to the target, training seconds, env steps/s.

    python benchmarks/learners.py [--seeds 0 1 2] [--learner-cpus 0.5]

Each pair runs the shipped ``experiments/cartpole_ppo.yaml`` (stop at a 100-episode mean return
of 475, or 300,000 env steps) once with RLlib's local learner (``resources.learners.count: 0``,
``train_batch_size_per_learner: 1000``) and once with two learner actors
(``resources.learners.count: 2``, 500 per learner: the same 1,000 env steps per update, each
minibatch of 256 split in two halves of 128 whose gradients are averaged), alternating which goes
first, one run at a time. On a 2-core machine the two learners share the cores with the sampling
loop: this checks that two learners learn as one does, not that they are faster; on a bigger node
give them a CPU each (``--learner-cpus 1``).

``--two-nodes`` adds a third side: the two learners on two nodes of a local Ray cluster started
with ``ray start`` (a head and a worker node on this machine, as docs/cluster.md does), one learner
on each (a custom resource ``learner_node`` that each node has once), joined with ``--address``.
It stops every Ray process on the machine at the end (``ray stop``): run nothing else beside it.

Results: benchmarks/results/learners.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from functools import partial
from pathlib import Path

from harness import (
    invocation,
    machine,
    results_file,
    save_results,
    take_turns,
    train,
    two_node_cluster,
)

RESULTS = results_file("learners.json")
TWO_NODES = "2 learners, 2 nodes"
SIDES = ["1 learner", "2 learners", TWO_NODES]
EXPERIMENT = "experiments/cartpole_ppo.yaml"
TARGET = 475.0


def one_run(
    seed: int, learners: int, learner_cpus: float, out: Path, address: str | None = None
) -> dict:
    """One training; where it reached the target (its first iteration with the 100-episode
    window at or above it), from its result.json. ``address``: on that cluster, one learner per
    node."""
    overrides = [f"seed={seed}", "checkpoint.every=0", "checkpoint.at_end=false"]
    if learners:
        overrides += [
            f"resources.learners.count={learners}",
            f"resources.learners.cpus={learner_cpus}",
            f"training.train_batch_size_per_learner={1000 // learners}",
            f"training.minibatch_size={256 // learners}",
        ]
    if address:
        overrides += ["resources.learners.custom={learner_node: 1}", "--address", address]
    name = f"learners{learners}_seed{seed}{'_two_nodes' if address else ''}"
    training = train(EXPERIMENT, *overrides, out=out / name)
    rows = training.results()
    reached = next(
        (r for r in rows if ((r.get("window") or {}).get("episode_return_mean") or -1e9) >= TARGET),
        None,
    )
    last = reached or rows[-1]
    steps, seconds = int(last["num_env_steps_sampled_lifetime"]), float(last["time_total_s"])
    return {
        "command": f"rlplat train {EXPERIMENT} {' '.join(overrides)}",
        "reached_target": reached is not None,
        "env_steps": steps,
        "training_s": round(seconds, 1),
        "env_steps_per_s": round(steps / seconds, 1),
        "command_wall_s": training.wall_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--learner-cpus", type=float, default=0.5)
    parser.add_argument("--two-nodes", action="store_true", help="also 2 learners on 2 nodes")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for index, seed in enumerate(args.seeds):
            sides = {
                "1 learner": partial(one_run, seed, 0, args.learner_cpus, Path(tmp)),
                "2 learners": partial(one_run, seed, 2, args.learner_cpus, Path(tmp)),
            }
            turns = take_turns(index, sides)
            for side in sides:
                runs.append({"side": side, "seed": seed, "first": turns["first"], **turns[side]})
                print(f"seed {seed} {side}: {turns[side]}", flush=True)
        if args.two_nodes:
            with two_node_cluster('{"learner_node": 1}') as address:
                for seed in args.seeds:
                    row = one_run(seed, 2, args.learner_cpus, Path(tmp), address)
                    runs.append({"side": TWO_NODES, "seed": seed, "first": None, **row})
                    print(f"seed {seed} {TWO_NODES}: {row}", flush=True)
    summary = {}
    for side in sorted({r["side"] for r in runs}, key=SIDES.index):
        mine = [r for r in runs if r["side"] == side]
        summary[side] = {
            "reached": f"{sum(r['reached_target'] for r in mine)}/{len(mine)}",
            "median_env_steps": statistics.median(r["env_steps"] for r in mine),
            "median_training_s": statistics.median(r["training_s"] for r in mine),
            "median_env_steps_per_s": statistics.median(r["env_steps_per_s"] for r in mine),
        }
    save_results(
        RESULTS,
        {"machine": machine(), "command": invocation(), "summary": summary, "runs": runs},
    )
    print("| learners | at target | env steps to target (median) | training s | env steps/s |")
    print("|---|---|---|---|---|")
    for side, row in summary.items():
        print(
            f"| {side} | {row['reached']} | {row['median_env_steps']:,.0f} | "
            f"{row['median_training_s']} | {row['median_env_steps_per_s']:,.0f} |"
        )


if __name__ == "__main__":
    main()
