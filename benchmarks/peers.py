"""rlplat against Stable-Baselines3, side by side in one run: time and env steps to a target.

    pip install -e ".[bench]"          # stable-baselines3, pinned; uses the torch already installed
    python benchmarks/peers.py [--tasks ppo_cartpole dqn_cartpole sac_pendulum eval_cartpole]
                               [--seeds 0 1 2]

For each task and seed, one pair: ``rlplat train <shipped experiment> seed=S`` and a
Stable-Baselines3 process with RL Zoo's published hyperparameters for that task (written out
below), alternating which goes first. Both stop at the same target, judged the same way: the mean
return of the last ``window`` finished episodes (fewer while fewer have finished), checked by
rlplat after each training iteration and by SB3 after every env step. Recorded per run: the whole
command's wall seconds (interpreter start to exit), the training seconds (rlplat: the trial's
``time_total_s`` when the target was reached; SB3: ``learn()`` until the target), and the env steps
to the target. ``eval_cartpole`` times ``rlplat eval <run> -n 1`` against an SB3 script that loads
the saved model and plays one greedy episode, using the models the ``ppo_cartpole`` pairs saved.

One process runs at a time (never two trainings on the CPU at once). Results go to
benchmarks/results/peers.json; the Markdown table printed at the end has docs/benchmarks.md's
numbers. A side
that never reached the target has no time to it: its whole-command seconds are only its budget,
so the table gives no ratio then.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from harness import (
    Process,
    eval_report,
    invocation,
    load_results,
    machine,
    results_file,
    rlplat,
    run,
    save_results,
    sb3_greedy_return,
    take_turns,
    train,
)

RESULTS = results_file("peers.json")


@dataclass(frozen=True)
class Task:
    experiment: str  # the shipped rlplat experiment
    env_id: str
    target: float
    window: int  # episodes in the mean that must reach the target
    budget: int  # env steps before giving up (the experiment's stop.env_steps)
    greedy_episodes: int = 0  # then also score the final policy greedily over this many


TASKS = {
    "ppo_cartpole": Task("experiments/cartpole_ppo.yaml", "CartPole-v1", 475.0, 100, 300_000),
    "dqn_cartpole": Task("experiments/cartpole_dqn.yaml", "CartPole-v1", 475.0, 100, 200_000),
    "sac_pendulum": Task("experiments/pendulum_sac.yaml", "Pendulum-v1", -200.0, 20, 60_000),
    "td3_pendulum": Task("experiments/pendulum_td3.yaml", "Pendulum-v1", -200.0, 20, 20_000, 20),
}
EVAL_TASK = "eval_cartpole"


# --- Stable-Baselines3 side (runs in its own process: ``peers.py --sb3 TASK SEED``) ---------------


def zoo_linear(initial: float, zoo_steps: float, budget: int) -> Any:
    """RL Zoo's ``lin_<initial>`` over ``zoo_steps`` env steps, for a run of ``budget`` steps:
    SB3 schedules take the remaining fraction of ``learn``'s budget, the zoo's is in env steps."""

    def schedule(progress_remaining: float) -> float:
        steps = (1.0 - progress_remaining) * budget
        return initial * max(1.0 - steps / zoo_steps, 0.0)

    return schedule


def sb3_model(task: str, seed: int) -> Any:
    """The SB3 model with RL Zoo's hyperparameters (hyperparams/<algo>.yml of
    DLR-RM/rl-baselines3-zoo) for the task; schedules kept in RL Zoo's env steps."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3 import DQN, PPO, SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise

    spec = TASKS[task]
    # The same target window as rlplat's; CPU, as rlplat's trials here.
    common = {"stats_window_size": spec.window, "seed": seed, "device": "cpu"}
    if task == "ppo_cartpole":  # RL Zoo: tuned, n_timesteps 1e5
        env = make_vec_env(spec.env_id, n_envs=8, seed=seed)
        return PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=zoo_linear(1e-3, 1e5, spec.budget),
            clip_range=zoo_linear(0.2, 1e5, spec.budget),
            **common,
        )
    if task == "dqn_cartpole":  # RL Zoo: n_timesteps 5e4, exploration over its first 16 %
        env = make_vec_env(spec.env_id, n_envs=1, seed=seed)
        return DQN(
            "MlpPolicy",
            env,
            learning_rate=2.3e-3,
            batch_size=64,
            buffer_size=100_000,
            learning_starts=1000,
            gamma=0.99,
            target_update_interval=10,
            train_freq=256,
            gradient_steps=128,
            exploration_fraction=0.16 * 5e4 / spec.budget,
            exploration_final_eps=0.04,
            policy_kwargs={"net_arch": [256, 256]},
            **common,
        )
    if task == "sac_pendulum":  # RL Zoo: SB3's defaults with learning_rate 1e-3
        env = gym.make(spec.env_id)
        env.reset(seed=seed)
        return SAC(
            "MlpPolicy",
            env,
            learning_rate=1e-3,
            **common,
        )
    if task == "td3_pendulum":  # RL Zoo: n_timesteps 2e4, updates after each episode
        env = gym.make(spec.env_id)
        env.reset(seed=seed)
        n_actions = env.action_space.shape[-1]
        return TD3(
            "MlpPolicy",
            env,
            gamma=0.98,
            buffer_size=200_000,
            learning_starts=10_000,
            action_noise=NormalActionNoise(np.zeros(n_actions), 0.1 * np.ones(n_actions)),
            gradient_steps=-1,
            train_freq=(1, "episode"),
            learning_rate=1e-3,
            policy_kwargs={"net_arch": [400, 300]},
            **common,
        )
    raise ValueError(task)


def sb3_train(task: str, seed: int, save: str | None) -> dict[str, Any]:
    from stable_baselines3.common.callbacks import BaseCallback

    spec = TASKS[task]

    class StopAtTarget(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.reached_at: int | None = None

        def _on_step(self) -> bool:
            returns = [info["r"] for info in self.model.ep_info_buffer]
            if returns and sum(returns) / len(returns) >= spec.target:
                self.reached_at = self.num_timesteps
                return False
            return True

    model = sb3_model(task, seed)
    stop = StopAtTarget()
    started = time.monotonic()
    model.learn(total_timesteps=spec.budget, callback=stop)
    train_s = time.monotonic() - started
    if save:
        model.save(save)
    row = {
        "reached": stop.reached_at is not None,
        "env_steps_to_target": stop.reached_at,
        "train_s_to_target": round(train_s, 2) if stop.reached_at is not None else None,
        "env_steps_total": model.num_timesteps,
    }
    if spec.greedy_episodes:
        import numpy as np
        from stable_baselines3.common.evaluation import evaluate_policy

        returns, _ = evaluate_policy(
            model,
            model.get_env(),
            n_eval_episodes=spec.greedy_episodes,
            return_episode_rewards=True,
        )
        row["greedy_return_mean"] = round(float(np.mean(returns)), 2)
    return row


def sb3_eval(model_path: str) -> dict[str, Any]:
    """Load a saved PPO model and play one greedy CartPole episode: SB3's ``rlplat eval -n 1``."""
    import gymnasium as gym
    from stable_baselines3 import PPO

    model = PPO.load(model_path, device="cpu")
    total = sb3_greedy_return(model, gym.make("CartPole-v1"), 0)
    print(f"return {total}")
    return {"return": total}


# --- rlplat side -------------------------------------------------------------------------------


def rlplat_train(task: str, seed: int, out: Path) -> dict[str, Any]:
    spec = TASKS[task]
    training = train(spec.experiment, f"seed={seed}", out=out, check=False)
    if training.error:
        return {"error": training.error, "command_wall_s": training.wall_s}
    rows = training.results()
    hit = next(
        (
            r
            for r in rows
            if (r.get("window") or {}).get("episode_return_mean", -1e9) >= spec.target
        ),
        None,
    )
    row = {
        "reached": hit is not None,
        "env_steps_to_target": int(hit["num_env_steps_sampled_lifetime"]) if hit else None,
        "train_s_to_target": round(hit["time_total_s"], 2) if hit else None,
        "env_steps_total": int(rows[-1]["num_env_steps_sampled_lifetime"]),
        "command_wall_s": training.wall_s,
        "timings": training.driver().get("timings"),
        "run_dir": str(training.run_dir),
    }
    if spec.greedy_episodes:  # the last checkpoint, as SB3's model is its last policy
        report = eval_report(training.run_dir, spec.greedy_episodes, "--last")
        row["greedy_return_mean"] = round(report["returns"]["mean"], 2)
    return row


def sb3_process(task: str, seed: int, save: Path | None) -> dict[str, Any]:
    command = [sys.executable, __file__, "--sb3", task, str(seed)]
    command += ["--save", str(save)] if save else []
    proc = run(command)
    if not proc.ok:
        return {"error": proc.tail(), "command_wall_s": proc.wall_s}
    return {**json.loads(proc.stdout.splitlines()[-1]), "command_wall_s": proc.wall_s}


def run_pairs(tasks: list[str], seeds: list[int], scratch: Path) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {}
    for task in tasks:
        if task == EVAL_TASK:
            continue
        for pair, seed in enumerate(seeds):
            save = scratch / f"sb3-{task}-{seed}.zip"
            sides = {
                "rlplat": partial(rlplat_train, task, seed, scratch / f"rlplat-{task}-{seed}"),
                "sb3": partial(sb3_process, task, seed, save),
            }
            row = {"seed": seed, **take_turns(pair, sides)}
            print(task, json.dumps(row), flush=True)
            results.setdefault(task, []).append(row)
    if EVAL_TASK in tasks:
        results[EVAL_TASK] = run_eval_pairs(results.get("ppo_cartpole", []), seeds, scratch)
    return results


def run_eval_pairs(ppo_rows: list[dict], seeds: list[int], scratch: Path) -> list[dict]:
    """``rlplat eval <run> -n 1`` against SB3's load-and-play, on models trained to the target."""
    if not ppo_rows:
        ppo_rows = run_pairs(["ppo_cartpole"], seeds[:1], scratch)["ppo_cartpole"]
    run_dir = ppo_rows[0]["rlplat"]["run_dir"]
    model = scratch / f"sb3-ppo_cartpole-{ppo_rows[0]['seed']}.zip"

    def rlplat_eval() -> dict[str, Any]:
        return outcome(rlplat("eval", run_dir, "-n", "1", check=False))

    def sb3_eval_process() -> dict[str, Any]:
        return outcome(run([sys.executable, __file__, "--sb3-eval", str(model)]))

    sides = {"rlplat": rlplat_eval, "sb3": sb3_eval_process}
    rows = []
    for pair in range(max(3, len(seeds))):
        row = {"pair": pair, **take_turns(pair, sides)}
        print(EVAL_TASK, json.dumps(row), flush=True)
        rows.append(row)
    return rows


def outcome(proc: Process) -> dict[str, Any]:
    """A timed command's row: its whole-command seconds and whether it succeeded."""
    return {"command_wall_s": proc.wall_s, "ok": proc.ok}


# --- the table -------------------------------------------------------------------------------


def median_of(rows: list[dict], side: str, key: str) -> float | None:
    values = [r[side][key] for r in rows if r[side].get(key) is not None]
    return statistics.median(values) if values else None


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if digits == 0 else f"{value:,.{digits}f}"


def table(results: dict[str, list[dict]]) -> str:
    lines = [
        "| task | seeds at target rlplat / SB3 | whole command s rlplat / SB3 (ratio) "
        "| training s rlplat / SB3 (ratio) | env steps to target rlplat / SB3 |",
        "|---|---|---|---|---|",
    ]
    for task, rows in results.items():
        whole = [median_of(rows, side, "command_wall_s") for side in ("rlplat", "sb3")]
        if task == EVAL_TASK:
            lines.append(
                f"| {task} (-n 1) | - | {fmt(whole[0])} / {fmt(whole[1])} "
                f"({ratio(*whole)}) | - | - |"
            )
            continue
        hits = [sum(bool(r[side].get("reached")) for r in rows) for side in ("rlplat", "sb3")]
        whole = [w if hit else None for w, hit in zip(whole, hits, strict=True)]
        train = [median_of(rows, side, "train_s_to_target") for side in ("rlplat", "sb3")]
        steps = [median_of(rows, side, "env_steps_to_target") for side in ("rlplat", "sb3")]
        lines.append(
            f"| {task} | {hits[0]}/{len(rows)} / {hits[1]}/{len(rows)} "
            f"| {fmt(whole[0])} / {fmt(whole[1])} ({ratio(*whole)}) "
            f"| {fmt(train[0])} / {fmt(train[1])} ({ratio(*train)}) "
            f"| {fmt(steps[0], 0)} / {fmt(steps[1], 0)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=[*TASKS, EVAL_TASK])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sb3", nargs=2, metavar=("TASK", "SEED"), help=argparse.SUPPRESS)
    parser.add_argument("--save", help=argparse.SUPPRESS)
    parser.add_argument("--sb3-eval", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sb3:
        print(json.dumps(sb3_train(args.sb3[0], int(args.sb3[1]), args.save)))
        return
    if args.sb3_eval:
        sb3_eval(args.sb3_eval)
        return
    unknown = set(args.tasks) - {*TASKS, EVAL_TASK}
    if unknown:
        parser.error(f"unknown tasks {sorted(unknown)}; choose from {[*TASKS, EVAL_TASK]}")
    with tempfile.TemporaryDirectory(prefix="rlplat-peers-") as scratch:
        results = run_pairs(args.tasks, args.seeds, Path(scratch))
    for rows in results.values():  # the run directories were scratch
        for row in rows:
            row.get("rlplat", {}).pop("run_dir", None)
    saved = load_results(RESULTS)
    # A run of some tasks updates those and keeps the others' earlier results.
    for task, rows in results.items():
        saved[task] = {
            "command": invocation(),
            "machine": machine(),
            "date": time.strftime("%Y-%m-%d %H:%M"),
            "pairs": rows,
        }
    save_results(RESULTS, saved)
    print()
    print(table({task: entry["pairs"] for task, entry in saved.items()}))


if __name__ == "__main__":
    main()
