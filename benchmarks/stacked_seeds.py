"""Issue 104's cost of stacked seeds: ``StackedPPO`` (rlplat/algorithms/stacked/ppo.py) on
CartPole with experiments/cartpole_ppo.yaml's settings (16 envs and 1,000 env steps per seed per
iteration, 12 epochs of 256-row minibatches, [64, 64] networks), N = 1, 4, 16, 64 seeds in one
process on one torch thread; beside it, rlplat's PPO of one seed as ``rlplat train`` runs it.
With ``--algorithm sac``: ``StackedSAC`` (rlplat/algorithms/stacked/sac.py) on Pendulum with
experiments/pendulum_sac.yaml's settings (one update of 64 rows per env step, [64, 64]), seconds
per 1,000 env steps of each seed once learning has started, beside rlplat's SAC of one seed.

    python benchmarks/stacked_seeds.py [--algorithm ppo|sac] [--seeds 1 4 16 64] [--iterations 10]

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


SAC_SETTINGS = {
    "actor_lr": 0.001,
    "critic_lr": 0.001,
    "alpha_lr": 0.001,
    "initial_alpha": 1.0,
    "gamma": 0.99,
    "tau": 0.005,
    "train_batch_size_per_learner": 64,
    "num_steps_sampled_before_learning_starts": 1000,
    "training_intensity": 64,
    "replay_buffer_config": {"type": "EpisodeReplayBuffer", "capacity": 100_000},
}


def stacked_sac_cost(seeds: int, iterations: int) -> dict[str, Any]:
    """Seconds per 1,000 env steps of each of ``seeds`` stacked Pendulum SAC seeds, learning."""
    import ray
    import torch

    from rlplat.algorithms.shared_weights import share_learner_weights
    from rlplat.algorithms.stacked.sac import StackedSACConfig

    torch.set_num_threads(1)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    config = (
        StackedSACConfig()
        .environment("Pendulum-v1")
        .env_runners(rollout_fragment_length=4)
        .training(**SAC_SETTINGS)
        .rl_module(model_config={"fcnet_hiddens": [64, 64], "fcnet_activation": "relu"})
        .debugging(seed=0)
        .stacked(seeds=list(range(seeds)))
    )
    algo = config.build()
    share_learner_weights(algo)  # as a trial does
    while algo.env_runner.num_env_steps_sampled_lifetime < 1200:  # warm-up: until learning
        algo.train()
    first = algo.env_runner.num_env_steps_sampled_lifetime
    walls, sampling, learning = [], [], []
    for _ in range(iterations):
        started = time.perf_counter()
        result = algo.train()
        walls.append(time.perf_counter() - started)
        sampling.append(result["timers"]["env_runner_sampling_timer"])
        learning.append(result["timers"]["learner_update_timer"])
    steps = algo.env_runner.num_env_steps_sampled_lifetime - first
    per_thousand = 1000 / steps
    return {
        "seeds": seeds,
        "per_1000_steps_s": round(sum(walls) * per_thousand, 3),
        # RLlib's timers are means over the iteration's calls: one call's, x calls per 1,000
        "sampling_call_s": round(statistics.mean(sampling), 5),
        "update_call_s": round(statistics.mean(learning), 5),
        "env_steps_per_s_all_seeds": round(seeds * steps / sum(walls), 1),
    }


def rlplat_sac_row(out: Path) -> dict[str, Any]:
    """rlplat's SAC on one seed, as ``rlplat train`` runs it: seconds per 1,000 env steps over
    the iterations after learning started."""
    row = train_row(
        "pendulum_sac.yaml", ["stop.env_steps=12000", "stop.episode_return_mean=null"], out
    )
    results = [
        json.loads(line)
        for line in (Path(row["run_dir"]) / "trial_00000/result.json").read_text().splitlines()
    ]
    learning = [r for r in results if r["num_env_steps_sampled_lifetime"] > 1200]
    steps = (
        learning[-1]["num_env_steps_sampled_lifetime"]
        - learning[0]["num_env_steps_sampled_lifetime"]
    )
    seconds = sum(r["time_this_iter_s"] for r in learning[1:])
    return {**row, "per_1000_steps_s": round(seconds / steps * 1000, 3)}


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
    parser.add_argument("--algorithm", choices=["ppo", "sac"], default="ppo")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 4, 16, 64])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "rlplat-stack")
    parser.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    cost = stacked_sac_cost if args.algorithm == "sac" else stacked_cost
    if args.one:
        print(json.dumps(cost(*args.one)))
        return
    results = load_results(RESULTS)
    rows = []
    for seeds in args.seeds:  # one process each, one at a time
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--algorithm",
                args.algorithm,
                "--one",
                str(seeds),
                str(args.iterations),
            ],  # fmt: skip
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    measure = "per_1000_steps_s" if args.algorithm == "sac" else "iteration_s"
    one = next((row[measure] for row in rows if row["seeds"] == 1), None)
    for row in rows:
        if one:
            row["cost_vs_one_seed"] = round(row[measure] / one, 2)
    if args.algorithm == "sac":
        results["stacked_sac_pendulum"] = {"rows": rows, **provenance()}
        sac = rlplat_sac_row(args.out / "rlplat_sac")
        results["rlplat_sac_pendulum_one_seed"] = {**sac, **provenance()}
        print(sac, flush=True)
        save_results(RESULTS, results)
        return
    results["stacked_ppo_cartpole"] = {"rows": rows, **provenance()}
    ppo = rlplat_ppo_row(args.out / "rlplat_ppo")
    results["rlplat_ppo_cartpole_one_seed"] = {**ppo, **provenance()}
    print(ppo, flush=True)
    save_results(RESULTS, results)


if __name__ == "__main__":
    main()
