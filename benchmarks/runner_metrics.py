"""Milliseconds of one sampling call of the transition loop: the env runners' metrics gathered
after every call (as before 2026-12-07) against once per iteration (rlplat's loop now).

    python benchmarks/runner_metrics.py [--tasks cartpole_dqn halfcheetah_sac] [--rounds 5]

Builds each experiment's algorithm as a trial does (learning never starts, so only sampling is
timed) and times, in alternating rounds in this one process, an iteration's worth of sampling
calls (the iteration's env steps / the env steps of a call) each way: RLlib's
``synchronous_parallel_sample`` with each call's runner metrics reduced and aggregated into the
algorithm's, against ``rlplat.algorithms.loop.sample_without_metrics`` for every call and
``gather_runner_metrics`` once at the iteration's end. Results go to
benchmarks/results/runner_metrics.json.
"""

from __future__ import annotations

import argparse
import time
from statistics import median
from typing import Any

from harness import REPO, invocation, machine, results_file, save_results

RESULTS = results_file("runner_metrics.json")
# Sampling calls per iteration: 1,000 env steps (RLlib's minimum per DQN/SAC iteration) over
# 16 env steps a call (CartPole DQN: 4 envs x 4) or 4 (HalfCheetah SAC: 1 env x 4).
TASKS = {
    "cartpole_dqn": ("experiments/cartpole_dqn.yaml", 62),
    "halfcheetah_sac": ("experiments/mujoco/halfcheetah_sac.yaml", 250),
}
ITERATIONS_PER_ROUND = 8


def gathered_every_call(algo: Any, calls: int) -> None:
    """``calls`` sampling calls, each call's runner metrics reduced and aggregated."""
    from ray.rllib.execution.rollout_ops import synchronous_parallel_sample

    for _ in range(calls):
        _, metrics = synchronous_parallel_sample(
            worker_set=algo.env_runner_group,
            concat=True,
            sample_timeout_s=algo.config.sample_timeout_s,
            _uses_new_env_runners=True,
            _return_metrics=True,
        )
        algo.metrics.aggregate(metrics, key="every_call")  # a key of its own


def gathered_per_iteration(algo: Any, calls: int) -> None:
    """``calls`` sampling calls, the runner metrics gathered once after them."""
    from rlplat.algorithms.loop import gather_runner_metrics, sample_without_metrics

    for _ in range(calls):
        sample_without_metrics(algo)
    gather_runner_metrics(algo)


WAYS = {"every call": gathered_every_call, "per iteration": gathered_per_iteration}


def time_task(path: str, calls: int, rounds: int) -> dict[str, list[float]]:
    """Milliseconds per sampling call, each way, one entry per round."""
    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare
    from rlplat.run.trials import trainable_for

    overrides = [
        "training.num_steps_sampled_before_learning_starts=100000000",
        "evaluation.evaluation_interval=null",
    ]
    run = prepare(load_experiment(REPO / path, overrides), step_env=False)
    algo = trainable_for(run.experiment.algorithm)(config=run.resolved())
    algo.train()
    millis: dict[str, list[float]] = {name: [] for name in WAYS}
    for _ in range(rounds):
        for name, sample in WAYS.items():
            started = time.perf_counter()
            for _ in range(ITERATIONS_PER_ROUND):
                sample(algo, calls)
            seconds = time.perf_counter() - started
            millis[name].append(round(1000 * seconds / (ITERATIONS_PER_ROUND * calls), 3))
    algo.stop()
    return millis


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    results: dict[str, Any] = {
        "command": invocation(),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
    }
    for task in args.tasks:
        path, calls = TASKS[task]
        millis = time_task(path, calls, args.rounds)
        results[task] = {
            "calls_per_iteration": calls,
            "ms_per_call": millis,
            "median_ms": {name: median(values) for name, values in millis.items()},
        }
        for name, values in millis.items():
            print(f"{task}, metrics {name}: {values} ms per call, median {median(values)}")
    save_results(RESULTS, results)


if __name__ == "__main__":
    main()
