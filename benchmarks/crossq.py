"""CrossQ: update speed against sb3-contrib's CrossQ and rlplat's SAC on HalfCheetah-v5, and
Pendulum-v1's env steps to -200 against pendulum_sac.yaml.

    pip install -e ".[mujoco]" && pip install sb3-contrib==2.9.2
    python benchmarks/crossq.py speed [--device cuda] [--seconds 120] [--sides crossq sac sb3]
    python benchmarks/crossq.py pendulum [--seeds 3] [--out DIR]

``speed`` trains each side for about ``--seconds`` of training, one at a time, and counts
updates per second once learning has started (one update per env step on every side, so it is
also env steps per second): rlplat's experiments/mujoco/halfcheetah_{crossq,sac}.yaml (their
learner on the GPU with ``--device cuda``), and sb3-contrib's CrossQ with RL Zoo's settings
(rl_zoo3 2.9.2 hyperparams/crossq.yml, HalfCheetah-v4: critics 2048x2048, learning starts 5,000,
policy delay 3, learning rate 1e-3) on the same device. torch uses every core on each side.

``pendulum`` trains experiments/pendulum_crossq.yaml and experiments/pendulum_sac.yaml on
``--seeds`` seeds each (one trial at a time) and reports each seed's env steps to a mean return of
-200 over 20 episodes (both files stop there) and ``rlplat report``'s greedy scores.

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
    report_row,
    results_file,
    run,
    save_results,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["speed", "pendulum", "sb3-speed"])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument(
        "--sides", nargs="+", choices=["crossq", "sac", "sb3"], default=["crossq", "sb3", "sac"]
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="runs go here (default: a temp folder)")
    args = parser.parse_args()
    if args.task == "sb3-speed":
        print(json.dumps(sb3_speed_here(args.device, args.seconds)))
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="crossq_"))
    result = speed(args, out) if args.task == "speed" else pendulum(args, out)
    results = load_results(RESULTS)
    key = f"speed_{args.device}" if args.task == "speed" else "pendulum"
    results[key] = {
        "command": invocation(),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        **result,
    }
    save_results(RESULTS, results)


if __name__ == "__main__":
    main()
