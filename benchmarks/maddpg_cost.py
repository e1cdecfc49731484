"""MADDPG's cost on simple_spread: milliseconds per learner update and env steps per second.

    python benchmarks/maddpg_cost.py [--overrides resources.env_runners.envs=1 ...]

Builds ``experiments/simple_spread_maddpg.yaml`` (with ``--overrides``) in this process as a
trial does, torch on the trial's CPUs as threads, learning from 2,000 stored env steps. Then:
``update_ms``, three repeats of 500 updates on replayed batches made as the training loop makes
them (``update_and_sync``, 25 updates per weight sync: one sampling call's worth); and
``env_steps_per_s``, five training iterations of the whole loop (sampling, replay, updates,
weight sync). docs/performance.md ("MADDPG") has the numbers. Results go to
benchmarks/results/maddpg_cost.json, keyed by the overrides.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

from harness import REPO, invocation, load_results, machine, results_file, save_results

RESULTS = results_file("maddpg_cost.json")
EXPERIMENT = "experiments/simple_spread_maddpg.yaml"
LEARNING_STARTS = 2000
UPDATES_PER_SYNC = 25


def measure(overrides: list[str]) -> dict[str, float | list[float]]:
    import torch

    from rlplat.algorithms.loop import update_and_sync
    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare
    from rlplat.run.trials import trainable_for

    start = f"training.num_steps_sampled_before_learning_starts={LEARNING_STARTS}"
    run = prepare(load_experiment(REPO / EXPERIMENT, [*overrides, start]), step_env=False)
    threads = max(1, int(run.algo_config.num_cpus_for_main_process))
    torch.set_num_threads(threads)
    algo = trainable_for(run.experiment.algorithm)(config=run.resolved())
    steps = lambda result: result["num_env_steps_sampled_lifetime"]  # noqa: E731
    while steps(algo.train()) < LEARNING_STARTS + 1000:
        pass

    def sync_block() -> None:
        update_and_sync(algo, (algo.replayed_batch() for _ in range(UPDATES_PER_SYNC)))

    for _ in range(4):  # warm-up
        sync_block()
    update_ms = []
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(500 // UPDATES_PER_SYNC):
            sync_block()
        update_ms.append(round(1000 * (time.perf_counter() - started) / 500, 2))
    first = algo.train()
    started = time.perf_counter()
    for _ in range(5):
        last = algo.train()
    env_steps_per_s = (steps(last) - steps(first)) / (time.perf_counter() - started)
    algo.stop()
    return {
        "torch_threads": threads,
        "update_ms": update_ms,
        "env_steps_per_s": round(env_steps_per_s, 1),
    }


def main() -> None:
    import ray

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--overrides", nargs="*", default=[])
    args = parser.parse_args()
    ray.init(include_dashboard=False, logging_level=logging.ERROR)
    saved = load_results(RESULTS)
    key = " ".join(args.overrides) or "(shipped file)"
    saved[key] = {
        "command": invocation(),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        **measure(args.overrides),
    }
    print(json.dumps(saved[key]), flush=True)
    save_results(RESULTS, saved)


if __name__ == "__main__":
    main()
