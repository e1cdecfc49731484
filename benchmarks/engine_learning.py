"""Issue 102's learning check: five shipped experiments, 3 seeds each, before and after the engine
changes, scored the same way.

    pip install -e ".[mujoco]"
    python benchmarks/engine_learning.py --label before [--tasks cartpole_ppo ...] [--out DIR]

Each task: ``rlplat train experiments/<file> --seeds 3 tune.max_concurrent=1
stop.env_steps=<budget>`` (one trial at a time; a run found unfinished under ``--out`` is
continued with ``--resume``, so the benchmark goes on in a later session with the same
``--out``), then ``rlplat report <run> --eval-episodes 20``: the IQM and mean of the seeds' last
checkpoints' greedy returns, and each seed's env steps and training seconds. The shipped files
stop early at their return target; the budget caps the rest. Run it at the commit before a change
(``--label before``) and after it (``--label after``), one training at a time on an otherwise idle
machine for the seconds (the returns do not depend on it). Results go to
benchmarks/results/engine_learning.json under the label, with the commit that made them.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from harness import (
    load_results,
    provenance,
    results_file,
    save_results,
    scored_seeds,
)

RESULTS = results_file("engine_learning.json")
# task -> (shipped experiment, env-step budget): the five, HalfCheetah at 200k env steps.
TASKS = {
    "cartpole_ppo": ("experiments/cartpole_ppo.yaml", 300_000),
    "cartpole_dqn": ("experiments/cartpole_dqn.yaml", 200_000),
    "pendulum_sac": ("experiments/pendulum_sac.yaml", 60_000),
    "pendulum_td3": ("experiments/pendulum_td3.yaml", 20_000),
    "halfcheetah_ppo": ("experiments/mujoco/halfcheetah_ppo.yaml", 200_000),
}
SEEDS = 3
EPISODES = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="before or after (any name)")
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "rlplat-engine")
    args = parser.parse_args()
    results = load_results(RESULTS)
    side = results.setdefault(args.label, {})
    for task in args.tasks:
        experiment, budget = TASKS[task]
        out = args.out / args.label / task
        _, cell = scored_seeds(experiment, SEEDS, budget, out, EPISODES)
        side[task] = {**cell, **provenance()}
        save_results(RESULTS, results)
        print(f"{args.label} {task}: IQM {cell['iqm']} over {cell['final_scores']}", flush=True)


if __name__ == "__main__":
    main()
