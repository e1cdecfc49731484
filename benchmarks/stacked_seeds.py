"""Issue 104's cost of stacked seeds: ``StackedPPO`` (rlplat/algorithms/stacked/ppo.py) on
CartPole with experiments/cartpole_ppo.yaml's settings (16 envs and 1,000 env steps per seed per
iteration, 12 epochs of 256-row minibatches, [64, 64] networks), N = 1, 4, 16, 64 seeds in one
process on one torch thread; beside it, rlplat's PPO of one seed as ``rlplat train`` runs it.

    python benchmarks/stacked_seeds.py [--seeds 1 4 16 64] [--iterations 10]

Each N: one warm-up iteration, then ``--iterations`` timed ``Algorithm.train()`` calls, split
by RLlib's own timers into sampling and learning. The rlplat PPO row is the mean
``time_this_iter_s`` of iterations 2-11 of ``rlplat train experiments/cartpole_ppo.yaml
stop.env_steps=11000 stop.episode_return_mean=null``. This is the algorithm's cost alone, not yet
the whole-command comparison of issue 104's scope 4 (``--seeds N --stacked`` is not wired to the
command line yet). Results go to benchmarks/results/stacked_seeds.json.
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
from typing import Any

from harness import load_results, provenance, results_file, save_results, train_row

RESULTS = results_file("stacked_seeds.json")
SETTINGS = {
    "lr": 0.001,
    "gamma": 0.98,
    "lambda_": 0.8,
    "train_batch_size_per_learner": 1000,
    "minibatch_size": 256,
    "num_epochs": 12,
    "clip_param": 0.2,
    "vf_clip_param": 1000.0,
    "vf_loss_coeff": 0.5,
    "entropy_coeff": 0.0,
    "grad_clip": 0.5,
}


def stacked_cost(seeds: int, iterations: int) -> dict[str, Any]:
    """Seconds per iteration of ``seeds`` stacked CartPole seeds (run in its own process)."""
    import ray
    import torch

    from rlplat.algorithms.stacked.ppo import StackedPPOConfig

    torch.set_num_threads(1)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    config = (
        StackedPPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=16)
        .training(**SETTINGS)
        .rl_module(model_config={"fcnet_hiddens": [64, 64], "vf_share_layers": False})
        .debugging(seed=0)
        .stacked(seeds=list(range(seeds)))
    )
    algo = config.build()
    algo.train()  # warm-up
    walls, sampling, learning = [], [], []
    for _ in range(iterations):
        started = time.perf_counter()
        result = algo.train()
        walls.append(time.perf_counter() - started)
        timers = result["timers"]
        sampling.append(timers["env_runner_sampling_timer"])
        learning.append(timers["learner_update_timer"])
    steps = result["env_runners"]["num_env_steps_sampled"]  # one seed's, this iteration
    wall = statistics.mean(walls)
    return {
        "seeds": seeds,
        "iteration_s": round(wall, 3),
        "sampling_s": round(statistics.mean(sampling), 3),
        "learning_s": round(statistics.mean(learning), 3),
        "env_steps_per_seed_per_iteration": steps,
        "env_steps_per_s_all_seeds": round(seeds * steps / wall, 1),
    }


def rlplat_ppo_row(out: Path) -> dict[str, Any]:
    """rlplat's PPO on one seed, as ``rlplat train`` runs it."""
    row = train_row(
        "cartpole_ppo.yaml", ["stop.env_steps=11000", "stop.episode_return_mean=null"], out
    )
    results = [
        json.loads(line)
        for line in (Path(row["run_dir"]) / "trial_00000/result.json").read_text().splitlines()
    ]
    times = [r["time_this_iter_s"] for r in results[1:11]]
    return {**row, "iteration_s": round(statistics.mean(times), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 4, 16, 64])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "rlplat-stack")
    parser.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(stacked_cost(*args.one)))
        return
    results = load_results(RESULTS)
    rows = []
    for seeds in args.seeds:  # one process each, one at a time
        done = subprocess.run(
            [sys.executable, __file__, "--one", str(seeds), str(args.iterations)],
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    one = next((row["iteration_s"] for row in rows if row["seeds"] == 1), None)
    for row in rows:
        if one:
            row["cost_vs_one_seed"] = round(row["iteration_s"] / one, 2)
    results["stacked_ppo_cartpole"] = {"rows": rows, **provenance()}
    ppo = rlplat_ppo_row(args.out / "rlplat_ppo")
    results["rlplat_ppo_cartpole_one_seed"] = {**ppo, **provenance()}
    print(ppo, flush=True)
    save_results(RESULTS, results)


if __name__ == "__main__":
    main()
