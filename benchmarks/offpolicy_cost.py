"""Milliseconds per off-policy update, rlplat against Stable-Baselines3 at equal settings, by part.

    pip install -e ".[bench]" "gymnasium[mujoco]"
    python benchmarks/offpolicy_cost.py [--tasks sac_halfcheetah ...] [--updates 1000]

For each task, one side after the other in this process (never both at once): rlplat builds the
experiment's algorithm as a trial does (``trainable_for``), SB3 builds its model with the same
network sizes, batch size, update ratio and learning start. Each side runs past the learning
start, then ``--updates`` updates with their env steps (the whole loop: acting, env stepping,
replay, updates, weight sync; no evaluation on either side) are timed. torch uses the trial's
CPUs as threads on both sides (``resources.driver.cpus``, 1 unless the experiment says
otherwise; a Ray worker gets ``OMP_NUM_THREADS`` from its CPUs).

Then ``--profiled`` updates of each side run under cProfile on replayed batches, split into replay
sampling, batch to tensors, backward, optimizer step, target update and the rest (forward passes,
losses and bookkeeping), as shares of the unprofiled update time. Results go to
benchmarks/results/offpolicy_cost.json; the Markdown table printed at the end is
docs/performance.md's.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import pstats
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness import REPO, invocation, load_results, machine, results_file, save_results

RESULTS = results_file("offpolicy_cost.json")
LEARNING_STARTS = 1000  # both sides, so the warm-up is short; learning cost does not depend on it
# SB3's loop plays no evaluation episodes; rlplat's plays 5 greedy ones at every checkpoint's
# iteration by default (on HalfCheetah 5,000 env steps of acting per 1,000 trained ones), which
# the timed loop would otherwise include.
NO_EVALUATION = "evaluation.evaluation_interval=null"


@dataclass(frozen=True)
class Task:
    experiment: str
    sb3_algorithm: str  # SAC, TD3 or DQN
    sb3_settings: dict[str, Any]  # the same network, batch and update ratio as the experiment
    overrides: tuple[str, ...] = ()
    env_steps_per_update: int = 1
    learning_starts_key: str = "num_steps_sampled_before_learning_starts"
    sb3_policy: dict[str, Any] = field(default_factory=dict)


DQN_SB3_SETTINGS = {
    "batch_size": 128,
    "learning_rate": 1e-3,
    "train_freq": 16,
    "gradient_steps": 1,
    "target_update_interval": 500,
    "n_steps": 3,
}

TASKS = {
    "sac_halfcheetah": Task(
        "benchmarks/halfcheetah_sac.yaml",
        "SAC",
        {"batch_size": 256, "learning_rate": 3e-4},
        sb3_policy={"net_arch": [256, 256]},
    ),
    "td3_halfcheetah": Task(
        "benchmarks/halfcheetah_td3.yaml",
        "TD3",
        {"batch_size": 256, "learning_rate": 1e-3},
        sb3_policy={"net_arch": [400, 300]},
    ),
    "sac_pendulum": Task(
        "experiments/pendulum_sac.yaml",
        "SAC",
        {"batch_size": 64, "learning_rate": 1e-3},
        sb3_policy={"net_arch": [64, 64]},
    ),
    "td3_pendulum": Task(
        "experiments/pendulum_td3.yaml",
        "TD3",
        {"batch_size": 256, "learning_rate": 1e-3, "gamma": 0.98},
        sb3_policy={"net_arch": [400, 300]},
    ),
    # rlplat's DQN is dueling with double Q (256 encoder + 256 heads); SB3's is a plain 256x256.
    "dqn_cartpole": Task(
        "experiments/cartpole_dqn.yaml",
        "DQN",
        DQN_SB3_SETTINGS,
        env_steps_per_update=16,
        sb3_policy={"net_arch": [256, 256]},
    ),
    # The same loop with the same math on both sides: no dueling head, no double Q (SB3's DQN
    # has neither), tanh layers on both.
    "dqn_cartpole_plain": Task(
        "experiments/cartpole_dqn.yaml",
        "DQN",
        DQN_SB3_SETTINGS,
        overrides=("training.dueling=false", "training.double_q=false"),
        env_steps_per_update=16,
        sb3_policy={"net_arch": [256, 256], "activation_fn": "tanh"},
    ),
}

PARTS = {  # (file suffix, function): the outermost call of each part on either side
    "replay sampling": [
        ("rlplat/algorithms/transition_loop.py", "replayed_batch"),
        ("stable_baselines3/common/buffers.py", "sample"),
    ],
    "batch to tensors": [("ray/rllib/core/learner/learner.py", "_make_batch_if_necessary")],
    "backward": [
        ("torch/autograd/__init__.py", "backward"),
        ("torch/autograd/__init__.py", "grad"),
    ],
    "optimizer step": [("torch/optim/optimizer.py", "wrapper")],
    "target update": [
        ("ray/rllib/core/learner/utils.py", "update_target_network"),
        ("rlplat/algorithms/base.py", "move_towards"),
        ("stable_baselines3/common/utils.py", "polyak_update"),
    ],
}


def profile_parts(update: Callable[[], Any], count: int, ms_per_update: float) -> dict[str, float]:
    """Milliseconds of each part in one update: cProfile's shares scaled to the unprofiled time."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(count):
        update()
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # (file, line, function) -> (cc, nc, tt, ct, callers)
    total = sum(tt for _, _, tt, _, _ in stats.values())
    parts = {}
    for part, places in PARTS.items():
        seconds = sum(
            ct
            for (path, _, function), (_, _, _, ct, _) in stats.items()
            if any(path.endswith(suffix) and function == name for suffix, name in places)
        )
        parts[part] = seconds / total * ms_per_update
    parts["forward, losses, bookkeeping"] = ms_per_update - sum(parts.values())
    return {part: round(ms, 2) for part, ms in parts.items()}


def timed(step: Callable[[], Any], count: int) -> float:
    """Milliseconds per call of ``step``."""
    started = time.perf_counter()
    for _ in range(count):
        step()
    return 1000 * (time.perf_counter() - started) / count


def measure_rlplat(task: Task, updates: int, profiled: int) -> dict[str, Any]:
    import torch
    from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME

    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare
    from rlplat.run.trials import trainable_for

    overrides = [
        *task.overrides,
        f"training.{task.learning_starts_key}={LEARNING_STARTS}",
        NO_EVALUATION,
    ]
    run = prepare(load_experiment(REPO / task.experiment, overrides), step_env=False)
    threads = max(1, int(run.algo_config.num_cpus_for_main_process))
    torch.set_num_threads(threads)
    algo = trainable_for(run.experiment.algorithm)(config=run.resolved())
    steps = lambda result: result["num_env_steps_sampled_lifetime"]  # noqa: E731
    while steps(algo.train()) < LEARNING_STARTS + 200:
        pass
    result = algo.train()
    started, first = time.perf_counter(), steps(result)
    while steps(result) - first < updates * task.env_steps_per_update:
        result = algo.train()
    seconds = time.perf_counter() - started
    env_steps = steps(result) - first
    ms_per_update = 1000 * seconds / (env_steps / task.env_steps_per_update)

    timesteps = {NUM_ENV_STEPS_SAMPLED_LIFETIME: steps(result)}

    def one_update() -> None:  # as TransitionBatchLoop makes each update
        algo.learner_group.update(batch=algo.replayed_batch(), timesteps=timesteps)

    update_ms = timed(one_update, profiled)
    parts = profile_parts(one_update, profiled, update_ms)
    loop_parts = {
        name: round(1000 * result["timers"].get(key, 0.0), 2)
        for name, key in {
            "env sampling (per call)": "env_runner_sampling_timer",
            "replay add (per call)": "replay_buffer_add_data_timer",
            "weight sync (per training step)": "synch_weights",
        }.items()
    }
    algo.stop()
    return {
        "torch_threads": threads,
        "loop_ms_per_update": round(ms_per_update, 2),
        "update_ms": round(update_ms, 2),
        "update_parts_ms": parts,
        "loop_parts_ms": loop_parts,
        "env_steps_timed": int(env_steps),
    }


def measure_sb3(task: Task, threads: int, updates: int, profiled: int) -> dict[str, Any]:
    import gymnasium as gym
    import stable_baselines3
    import torch

    from rlplat.experiment.load import load_experiment

    torch.set_num_threads(threads)
    experiment = load_experiment(REPO / task.experiment, list(task.overrides))
    env = gym.make(experiment.experiment.env.id)
    policy = dict(task.sb3_policy)
    if "activation_fn" in policy:  # by name in the task: torch loads in the measuring function
        policy["activation_fn"] = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[
            policy["activation_fn"]
        ]
    model = getattr(stable_baselines3, task.sb3_algorithm)(
        "MlpPolicy",
        env,
        learning_starts=LEARNING_STARTS,
        policy_kwargs=policy,
        seed=0,
        device="cpu",
        **task.sb3_settings,
    )
    model.learn(LEARNING_STARTS + 200)
    started = time.perf_counter()
    model.learn(updates * task.env_steps_per_update, reset_num_timesteps=False)
    ms_per_update = 1000 * (time.perf_counter() - started) / updates

    def one_update() -> None:
        model.train(gradient_steps=1, batch_size=task.sb3_settings["batch_size"])

    update_ms = timed(one_update, profiled)
    return {
        "torch_threads": threads,
        "loop_ms_per_update": round(ms_per_update, 2),
        "update_ms": round(update_ms, 2),
        "update_parts_ms": profile_parts(one_update, profiled, update_ms),
        "version": stable_baselines3.__version__,
    }


def table(results: dict[str, Any]) -> str:
    lines = [
        "| task | torch threads | rlplat ms/update (loop) | SB3 ms/update (loop) | ratio "
        "| rlplat update only | SB3 update only |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in results.items():
        if not isinstance(row, dict) or "rlplat" not in row:
            continue
        ours, theirs = row["rlplat"], row["sb3"]
        ratio = ours["loop_ms_per_update"] / theirs["loop_ms_per_update"]
        lines.append(
            f"| {name} | {ours['torch_threads']} | {ours['loop_ms_per_update']} "
            f"| {theirs['loop_ms_per_update']} | {ratio:.2f}x | {ours['update_ms']} "
            f"| {theirs['update_ms']} |"
        )
    return "\n".join(lines)


def main() -> None:
    import ray

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--updates", type=int, default=1000)
    parser.add_argument("--profiled", type=int, default=100)
    args = parser.parse_args()
    ray.init(include_dashboard=False, logging_level=logging.ERROR)
    saved = load_results(RESULTS)
    for name in args.tasks:
        task = TASKS[name]
        updates = args.updates
        ours = measure_rlplat(task, updates, args.profiled)
        theirs = measure_sb3(task, ours["torch_threads"], updates, args.profiled)
        saved[name] = {
            "command": invocation(),
            "machine": machine(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "updates_timed": updates,
            "rlplat": ours,
            "sb3": theirs,
        }
        print(name, json.dumps(saved[name]), flush=True)
        save_results(RESULTS, saved)
    print(table(saved))


if __name__ == "__main__":
    main()
