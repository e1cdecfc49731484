"""RLlib's single-agent sampling loop against rlplat's array loop, on the shipped experiments:
env steps per second of sampling alone, and whether both sampled the same episodes.

    python benchmarks/sampling_loop.py [--runs cartpole_ppo.yaml:1000 ...] [--calls 4] [--pairs 2]

For each ``file:steps``, one env runner of each kind is built as a run builds its own (seed,
env vector, connectors, module; no Ray): ``SeededSingleAgentEnvRunner`` (RLlib's loop, with
rlplat's seeding) and ``ArrayEnvRunner`` (the array loop). Each samples ``--calls`` calls of
``steps`` env steps after one warm-up call, alternating which goes first per pair; the episodes of
the first pair are compared column by column (observations, actions, rewards, infos, model
outputs, ends). One process, nothing else running; torch on one thread as in a trial.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RUNS = [
    "cartpole_ppo.yaml:1000",
    "mujoco/halfcheetah_ppo.yaml:512",
    "mujoco/hopper_ppo.yaml:512",
    "pendulum_sac.yaml:4",
    "cartpole_dqn.yaml:16",
    "atari/breakout_ppo.yaml:1024",
]


def sample(runner_class: type, config: object, steps: int, calls: int) -> tuple[float, list]:
    """Env steps per second over ``calls`` sampling calls, and what they returned."""
    runner = runner_class(config=config, worker_index=0)
    try:
        runner.sample(num_timesteps=steps)
        started, sampled = time.perf_counter(), []
        for _ in range(calls):
            sampled.append(runner.sample(num_timesteps=steps))
            runner.get_metrics()
        seconds = time.perf_counter() - started
    finally:
        runner.stop()
    env_steps = sum(sum(len(chunk) for chunk in call) for call in sampled)
    return env_steps / seconds, sampled


def same_episodes(theirs: list, ours: list) -> bool:
    for a_call, b_call in zip(theirs, ours, strict=True):
        if len(a_call) != len(b_call):
            return False
        for a, b in zip(a_call, b_call, strict=True):
            ends = (len(a), a.is_terminated, a.is_truncated)
            if ends != (len(b), b.is_terminated, b.is_truncated):
                return False
            every = slice(None)
            columns = [
                (a.get_observations(every), b.get_observations(every)),
                (a.get_actions(), b.get_actions()),
                (a.get_rewards(), b.get_rewards()),
            ]
            columns += [
                (a.get_extra_model_outputs(k), b.get_extra_model_outputs(k))
                for k in a.extra_model_outputs
            ]
            if not all(np.array_equal(x, y) for x, y in columns) or a.get_infos() != b.get_infos():
                return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", default=DEFAULT_RUNS, metavar="FILE:STEPS")
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--pairs", type=int, default=2)
    args = parser.parse_args()

    from rlplat.environments.seeding import ArrayEnvRunner, SeededSingleAgentEnvRunner
    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare

    torch.set_num_threads(1)
    rows = []
    for run in args.runs:
        file, _, steps = run.rpartition(":")
        path = REPO / "experiments" / file
        config = prepare(load_experiment(path, []), step_env=False).algo_config
        speeds: dict[str, list[float]] = {"rllib": [], "array": []}
        same = None
        for pair in range(args.pairs):
            order = [("rllib", SeededSingleAgentEnvRunner), ("array", ArrayEnvRunner)]
            sampled = {}
            for name, runner_class in order if pair % 2 == 0 else order[::-1]:
                speed, sampled[name] = sample(runner_class, config, int(steps), args.calls)
                speeds[name].append(speed)
            if same is None:
                same = same_episodes(sampled["rllib"], sampled["array"])
        row = {
            "experiment": file,
            "steps_per_call": int(steps),
            "rllib_env_steps_per_s": round(statistics.median(speeds["rllib"])),
            "array_env_steps_per_s": round(statistics.median(speeds["array"])),
            "same_episodes": same,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| experiment | env steps per call | RLlib's loop | array loop | ratio | same |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        ratio = row["array_env_steps_per_s"] / row["rllib_env_steps_per_s"]
        print(
            f"| {row['experiment']} | {row['steps_per_call']:,} | {row['rllib_env_steps_per_s']:,} "
            f"| {row['array_env_steps_per_s']:,} | {ratio:.2f}x | {row['same_episodes']} |"
        )


if __name__ == "__main__":
    main()
