"""SimBa's encoder against plain networks at the same env steps, same seed: SAC on
HalfCheetah-v5 and PPO on CartPole-v1, with each network's parameter count.

    pip install -e ".[mujoco]"
    python benchmarks/simba.py [--tasks sac_halfcheetah ppo_cartpole] [--budget 100000] [--out DIR]

Each task trains its shipped file twice, one training at a time: as shipped, and with
``rl_module.model_config.simba`` and the ``mean_std_filter`` connector (SimBa's running
observation normalisation); everything else is the file's. A run found unfinished under ``--out``
is continued (``rlplat train --resume``), so the benchmark goes on in a later session with the
same ``--out``. Scores: each run's last checkpoint's greedy return over 10 episodes (``rlplat
report``). Results go to benchmarks/results/simba.json.
"""

from __future__ import annotations

import argparse
import pickle
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from harness import (
    invocation,
    load_results,
    machine,
    report_row,
    results_file,
    save_results,
    train_seeds,
)

RESULTS = results_file("simba.json")
SIMBA = ["connectors=[mean_std_filter]"]
SIDES = ("plain", "simba")
TASKS = {  # name -> (experiment, SimBa settings, default budget)
    "sac_halfcheetah": (
        "experiments/mujoco/halfcheetah_sac.yaml", "{width: 256, blocks: 2}", 100_000
    ),
    "ppo_cartpole": ("experiments/cartpole_ppo.yaml", "{width: 64, blocks: 1}", 300_000),
}


def parameters(run_dir: Path) -> int:
    """The parameter count of the run's trained module in its last checkpoint (every network;
    target copies and the running statistics' buffers excluded)."""
    states = run_dir.glob("trial_00000/checkpoint_*/learner_group/learner/rl_module/*/")
    state = pickle.loads((max(states) / "module_state.pkl").read_bytes())
    buffers = ("running_mean", "running_var", "steps")
    return int(sum(
        np.asarray(value).size for key, value in state.items()
        if not key.startswith("target") and not key.endswith(buffers)
    ))


def task(name: str, budget: int | None, out: Path, sides: list[str]) -> dict[str, Any]:
    experiment, simba, default_budget = TASKS[name]
    budget = budget or default_budget
    rows = {}
    overrides_by_side = {"plain": [], "simba": [*SIMBA, f"rl_module.model_config.simba={simba}"]}
    for side in sides:
        overrides = overrides_by_side[side]
        run_dir, seeds = train_seeds(experiment, 1, budget, out / name / side, *overrides)
        rows[side] = {
            "command": f"rlplat train {experiment} stop.env_steps={budget} {' '.join(overrides)}",
            "run_dir": str(run_dir),
            "seeds": seeds,
            "parameters": parameters(run_dir),
            "report": report_row([str(run_dir)], out / name / f"{side}_report", 10),
        }
        print(name, side, rows[side]["parameters"], rows[side]["report"]["iqm"], flush=True)
    return {"budget": budget, **rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    parser.add_argument("--budget", type=int, help="env steps per run (default: per task)")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES),
                        help="train only these sides (two processes may each take one)")
    parser.add_argument("--out", type=Path, help="runs go here (default: a temp folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="simba_"))
    for name in args.tasks:
        rows = task(name, args.budget, out, args.sides)
        results = load_results(RESULTS)  # read late: another process may have saved a side
        earlier = results.get(name, {})
        earlier = earlier if earlier.get("budget") == rows["budget"] else {}
        results[name] = {**earlier, "command": invocation(), "machine": machine(),
                         "date": time.strftime("%Y-%m-%d"), **rows}
        save_results(RESULTS, results)


if __name__ == "__main__":
    main()
