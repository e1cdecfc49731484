"""CrossQ: update speed against sb3-contrib's CrossQ and rlplat's SAC on HalfCheetah-v5, and
Pendulum-v1's env steps to -200 against pendulum_sac.yaml.

    pip install -e ".[mujoco]" && pip install sb3-contrib==2.9.2
    python benchmarks/crossq.py speed [--device cuda] [--seconds 120] [--sides crossq sac sb3]
    python benchmarks/crossq.py pendulum [--seeds 3] [--out DIR]
    python benchmarks/crossq.py halfcheetah [--seeds 2] [--budget 50000] [--width 256] [--out DIR]

``speed`` trains each side for about ``--seconds`` of training, one at a time, and counts
updates per second once learning has started (one update per env step on every side, so it is
also env steps per second): rlplat's experiments/mujoco/halfcheetah_{crossq,sac}.yaml (their
learner on the GPU with ``--device cuda``), and sb3-contrib's CrossQ with RL Zoo's settings
(rl_zoo3 2.9.2 hyperparams/crossq.yml, HalfCheetah-v4: critics 2048x2048, learning starts 5,000,
policy delay 3, learning rate 1e-3) on the same device. torch uses every core on each side.

``pendulum`` trains experiments/pendulum_crossq.yaml and experiments/pendulum_sac.yaml on
``--seeds`` seeds each (one trial at a time) and reports each seed's env steps to a mean return of
-200 over 20 episodes (both files stop there) and ``rlplat report``'s greedy scores.

``halfcheetah`` trains experiments/mujoco/halfcheetah_crossq.yaml with critics ``--width`` wide
(the paper's 2048 takes 0.2 s an update on a 2-core CPU) on ``--seeds`` seeds, one at a time, and
sb3-contrib's CrossQ with the same settings (``SB3_CROSSQ``, critics as wide) on as many seeds,
each for ``--budget`` env steps with torch on one thread on both sides (rlplat's trial reserves
one CPU). Scores: the final policy's greedy return over 10 episodes (rlplat: ``rlplat report``;
sb3-contrib: ``predict(deterministic=True)``). What finished under ``--out`` is reused.

Results go to benchmarks/results/crossq.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import (
    invocation,
    load_results,
    machine,
    peer_row,
    report_row,
    results_file,
    run,
    save_results,
    sb3_greedy_return,
    train,
    train_seeds,
    trial_results,
)

RESULTS = results_file("crossq.json")
LEARNING_STARTS = 5000  # env steps, on every side of ``speed``
SB3_CROSSQ = {  # rl_zoo3 2.9.2 hyperparams/crossq.yml, HalfCheetah-v4 (batch 256: the default)
    "learning_rate": 1e-3,
    "learning_starts": LEARNING_STARTS,
    "policy_delay": 3,
    "buffer_size": 1_000_000,
    "policy_kwargs": {"net_arch": {"pi": [256, 256], "qf": [2048, 2048]}},
}


def rlplat_speed(algo: str, device: str, seconds: float, out: Path) -> dict[str, Any]:
    """Updates per second of ``halfcheetah_<algo>.yaml`` after learning starts."""
    experiment = f"experiments/mujoco/halfcheetah_{algo}.yaml"
    overrides = [
        f"stop.time_s={seconds}",
        f"training.num_steps_sampled_before_learning_starts={LEARNING_STARTS}",
        "reporting.min_sample_timesteps_per_iteration=250",
        "checkpoint.every=0",
    ]
    if device == "cuda":
        overrides.append("resources.learners.gpus=1")
    training = train(experiment, *overrides, out=out / f"rlplat_{algo}_{device}")
    results = trial_results(training.run_dir / "trial_00000")
    lifetime = [0] + [int(r["num_env_steps_sampled_lifetime"]) for r in results]
    learning = [  # (env steps, seconds) of the iterations that began after learning started
        (after - before, r["time_this_iter_s"])
        for before, after, r in zip(lifetime, lifetime[1:], results, strict=False)
        if before >= LEARNING_STARTS
    ]
    steps, seconds_learning = (sum(column) for column in zip(*learning, strict=True))
    return {
        "side": f"rlplat {algo}",
        "command": f"rlplat train {experiment} {' '.join(overrides)}",
        "env_steps": lifetime[-1],
        "updates_per_s": round(steps / seconds_learning, 1),
    }


def sb3_speed(device: str, seconds: float) -> dict[str, Any]:
    """Updates per second of sb3-contrib's CrossQ after learning starts (its own process)."""
    done = run(
        [sys.executable, __file__, "sb3-speed", "--device", device, "--seconds", str(seconds)],
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def sb3_speed_here(device: str, seconds: float) -> dict[str, Any]:
    # Imported in this process only: the sb3-speed process is the only one that needs them.
    from sb3_contrib import CrossQ
    from stable_baselines3.common.callbacks import BaseCallback

    class Clock(BaseCallback):
        """Notes when learning starts and stops training ``seconds`` later."""

        started: float | None = None
        steps_at_start = 0

        def _on_step(self) -> bool:
            if self.started is None and self.num_timesteps > LEARNING_STARTS:
                self.started, self.steps_at_start = time.monotonic(), self.num_timesteps
            return self.started is None or time.monotonic() - self.started < seconds

    model = CrossQ("MlpPolicy", "HalfCheetah-v5", seed=0, device=device, **SB3_CROSSQ)
    clock = Clock()
    model.learn(total_timesteps=10_000_000, callback=clock)
    assert clock.started is not None
    elapsed = time.monotonic() - clock.started
    return {
        "side": "sb3-contrib CrossQ",
        "settings": "rl_zoo3 2.9.2 hyperparams/crossq.yml HalfCheetah-v4",
        "env_steps": model.num_timesteps,
        "updates_per_s": round((model.num_timesteps - clock.steps_at_start) / elapsed, 1),
    }


def speed(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    rows = []
    for side in args.sides:
        if side == "sb3":
            rows.append(sb3_speed(args.device, args.seconds))
        else:
            rows.append(rlplat_speed(side, args.device, args.seconds, out))
        print(json.dumps(rows[-1]), flush=True)
    return {"device": args.device, "seconds": args.seconds, "rows": rows}


def steps_to(run_dir: Path, threshold: float) -> list[int | None]:
    """Each trial's env steps at the first iteration whose mean return over the last 20 episodes
    (the ``stop`` criterion's window) reached ``threshold``."""
    crossings = []
    for trial in sorted(run_dir.glob("trial_*/result.json")):
        reached = [
            int(r["num_env_steps_sampled_lifetime"])
            for r in trial_results(trial.parent)
            if ((r.get("window") or {}).get("episode_return_mean") or -1e9) >= threshold
        ]
        crossings.append(reached[0] if reached else None)
    return crossings


def pendulum(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    rows = {}
    for algo in ("crossq", "sac"):
        experiment = f"experiments/pendulum_{algo}.yaml"
        run_dir, seeds = train_seeds(experiment, args.seeds, 60_000, out / algo)
        rows[algo] = {
            "command": f"rlplat train {experiment} --seeds {args.seeds} tune.max_concurrent=1",
            "env_steps_to_-200": steps_to(run_dir, -200.0),
            "seeds": seeds,
            "report": report_row([str(run_dir)], out / f"{algo}_report", 10),
        }
        print(algo, json.dumps(rows[algo]["env_steps_to_-200"]), flush=True)
    return rows


HALFCHEETAH_EPISODES = 10  # greedy episodes scoring each final policy, both sides


def sb3_settings(width: int) -> dict[str, Any]:
    """``SB3_CROSSQ`` with critics ``width`` wide."""
    return SB3_CROSSQ | {"policy_kwargs": {"net_arch": {"pi": [256, 256], "qf": [width, width]}}}


def sb3_halfcheetah_here(seed: int, budget: int, width: int) -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    import torch
    from sb3_contrib import CrossQ

    torch.set_num_threads(1)
    model = CrossQ("MlpPolicy", "HalfCheetah-v5", seed=seed, device="cpu", **sb3_settings(width))
    started = time.monotonic()
    model.learn(total_timesteps=budget)
    train_s = time.monotonic() - started
    env = gym.make("HalfCheetah-v5")
    returns = [
        sb3_greedy_return(model, env, 10_000 + seed * 100 + episode)
        for episode in range(HALFCHEETAH_EPISODES)
    ]
    return {
        "seed": seed,
        "settings": f"rl_zoo3 2.9.2 hyperparams/crossq.yml HalfCheetah-v4, critics {width} wide",
        "budget": budget,
        "env_steps": model.num_timesteps,
        "train_s": round(train_s, 1),
        "env_steps_per_s": round(model.num_timesteps / train_s, 1),
        "greedy_return_mean": round(float(np.mean(returns)), 1),
        "greedy_returns": [round(r, 1) for r in returns],
    }


def halfcheetah(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    experiment = "experiments/mujoco/halfcheetah_crossq.yaml"
    width = f"training.critic_hiddens=[{args.width},{args.width}]"
    run_dir, seeds = train_seeds(
        experiment, args.seeds, args.budget, out / "rlplat", width, "checkpoint.every=0"
    )
    rlplat_side = {
        "command": f"rlplat train {experiment} --seeds {args.seeds} tune.max_concurrent=1 "
        f"stop.env_steps={args.budget} {width} checkpoint.every=0",
        "seeds": seeds,
        "report": report_row([str(run_dir)], out / "report", HALFCHEETAH_EPISODES),
    }
    print("rlplat", json.dumps(rlplat_side["report"]), flush=True)
    sb3_rows = []
    for seed in range(args.seeds):
        command = [
            sys.executable, __file__, "sb3-halfcheetah", "--seed", str(seed),
            "--budget", str(args.budget), "--width", str(args.width),
        ]
        sb3_rows.append(peer_row(out / "sb3" / f"seed{seed}.json", command))
        print("sb3-contrib", json.dumps(sb3_rows[-1]), flush=True)
    return {
        "budget": args.budget,
        "critic_width": args.width,
        "rlplat": rlplat_side,
        "sb3": {"settings": sb3_rows[0]["settings"], "seeds": sb3_rows},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "task", choices=["speed", "pendulum", "halfcheetah", "sb3-speed", "sb3-halfcheetah"]
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument(
        "--sides", nargs="+", choices=["crossq", "sac", "sb3"], default=["crossq", "sb3", "sac"]
    )
    parser.add_argument("--seeds", type=int, help="default: 3 (pendulum), 2 (halfcheetah)")
    parser.add_argument("--seed", type=int, default=0, help="sb3-halfcheetah's seed")
    parser.add_argument("--budget", type=int, default=50_000, help="halfcheetah's env steps")
    parser.add_argument("--width", type=int, default=256, help="halfcheetah's critic width")
    parser.add_argument("--out", type=Path, help="runs go here (default: a temp folder)")
    args = parser.parse_args()
    if args.task == "sb3-speed":
        print(json.dumps(sb3_speed_here(args.device, args.seconds)))
        return
    if args.task == "sb3-halfcheetah":
        print(json.dumps(sb3_halfcheetah_here(args.seed, args.budget, args.width)))
        return
    args.seeds = args.seeds or (2 if args.task == "halfcheetah" else 3)
    out = args.out or Path(tempfile.mkdtemp(prefix="crossq_"))
    tasks = {"speed": speed, "pendulum": pendulum, "halfcheetah": halfcheetah}
    result = tasks[args.task](args, out)
    results = load_results(RESULTS)
    key = {"speed": f"speed_{args.device}", "halfcheetah": f"halfcheetah_{args.budget}"}.get(
        args.task, args.task
    )
    results[key] = {
        "command": invocation(),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        **result,
    }
    save_results(RESULTS, results)


if __name__ == "__main__":
    main()
