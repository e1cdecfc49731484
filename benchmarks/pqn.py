"""PQN: CartPole-v1 against CleanRL's pqn.py at its defaults on this machine, and Breakout at 1M
env steps beside rlplat's PPO Breakout.

    python benchmarks/pqn.py cartpole --cleanrl /work/cleanrl/pqn.py \
        --cleanrl-python /work/cleanrl_venv/bin/python [--seeds 3] [--cleanrl-seeds 1] [--out DIR]
    python benchmarks/pqn.py breakout [--budget 1000000] [--out DIR]

``cartpole`` trains experiments/cartpole_pqn.yaml on ``--seeds`` seeds (one trial at a time),
then runs CleanRL's ``pqn.py`` (fetched from vwxyzjn/cleanrl and run in its own venv, never part
of this project; CleanRL pins gymnasium 0.29.1) once per ``--cleanrl-seeds`` seed at its
defaults, with ``OMP_NUM_THREADS=1`` as CleanRL's own benchmark script runs it (rlplat's trial
also runs torch on one thread). Both sides train 500k env steps (CleanRL: 976 rollouts of 512,
499,712). Each side's learning is read the same way: the env steps and training seconds at which
the mean exploring return over the last 100 episodes first reaches 475 (rlplat: its result
windows, ``reporting.metrics_num_episodes_for_smoothing`` 100; CleanRL: a rolling mean of its
``charts/episodic_return`` events, seconds from their wall times). rlplat's greedy score is
``rlplat report``'s (10 episodes of each seed's last checkpoint), and its greedy evaluations
during training are listed too; CleanRL evaluates no greedy policy.

``breakout`` trains experiments/atari/breakout_pqn.yaml to ``--budget`` env steps (seed 0; an
unfinished run under ``--out`` is continued) and scores its last checkpoint in 10 greedy games.

Results go to benchmarks/results/pqn.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from harness import (
    invocation,
    load_results,
    machine,
    read_yaml,
    report_row,
    results_file,
    save_results,
    train_seeds,
    trial_results,
)

RESULTS = results_file("pqn.json")
TARGET = 475.0
WINDOW = 100  # episodes in the mean return that must reach TARGET


def rlplat_crossings(run_dir: Path) -> list[dict[str, Any]]:
    """Per trial: env steps and training seconds when the windowed return reached TARGET, and
    the greedy evaluations during training."""
    resolved = read_yaml(run_dir / "experiment.yaml")
    window = resolved["reporting"].get("metrics_num_episodes_for_smoothing", WINDOW)
    assert window == WINDOW, f"{run_dir}: the return window is {window} episodes, not {WINDOW}"
    rows = []
    for trial in sorted(run_dir.glob("trial_*/result.json")):
        results = trial_results(trial.parent)
        reached = [
            r for r in results
            if ((r.get("window") or {}).get("episode_return_mean") or -1e9) >= TARGET
        ]
        greedy = [
            (int(r["num_env_steps_sampled_lifetime"]),
             round(r["evaluation"]["env_runners"]["episode_return_mean"], 1))
            for r in results
            if ((r.get("evaluation") or {}).get("env_runners") or {}).get("episode_return_mean")
            is not None
        ]
        rows.append({
            "trial": trial.parent.name,
            "env_steps_to_475": int(reached[0]["num_env_steps_sampled_lifetime"]) if reached
            else None,
            "training_s_to_475": round(reached[0]["time_total_s"], 1) if reached else None,
            "training_s": round(results[-1]["time_total_s"], 1),
            "greedy_evaluations": greedy,
        })
    return rows


def cleanrl_run(script: Path, python: str, seed: int, out: Path) -> dict[str, Any]:
    """CleanRL's pqn.py at its defaults with ``seed`` (its own process, in ``out``), read from
    its TensorBoard events."""
    # Imported on use: the harness process starts light (harness.py's docstring).
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    workdir = out / f"cleanrl_seed{seed}"
    runs = sorted(workdir.glob("runs/CartPole-v1__pqn__*/"))
    if not runs:  # a finished run is reused
        workdir.mkdir(parents=True, exist_ok=True)
        environment = {**os.environ, "OMP_NUM_THREADS": "1"}
        started = time.monotonic()
        subprocess.run([python, str(script), "--seed", str(seed)], cwd=workdir, env=environment,
                       check=True, capture_output=True)
        (workdir / "wall_s.txt").write_text(f"{time.monotonic() - started:.1f}")
        runs = sorted(workdir.glob("runs/CartPole-v1__pqn__*/"))
    events = EventAccumulator(str(runs[-1]), size_guidance={"scalars": 0})
    events.Reload()
    returns = events.Scalars("charts/episodic_return")
    start = min(e.wall_time for e in events.Scalars("charts/SPS") + returns)
    recent: deque[float] = deque(maxlen=WINDOW)
    crossing = None
    for event in returns:
        recent.append(event.value)
        if len(recent) == WINDOW and sum(recent) / WINDOW >= TARGET:
            crossing = event
            break
    last = max(e.step for e in events.Scalars("charts/SPS"))
    return {
        "seed": seed,
        "command": f"OMP_NUM_THREADS=1 python pqn.py --seed {seed}",
        "env_steps_to_475": crossing.step if crossing else None,
        "seconds_to_475": round(crossing.wall_time - start, 1) if crossing else None,
        "env_steps": last,
        "process_wall_s": float((workdir / "wall_s.txt").read_text()),
        "final_window_return": round(sum(recent) / len(recent), 1),
    }


def cartpole(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    experiment = "experiments/cartpole_pqn.yaml"
    run_dir, seeds = train_seeds(experiment, args.seeds, 500_000, out / "rlplat")
    rlplat = {
        "command": f"rlplat train {experiment} --seeds {args.seeds} tune.max_concurrent=1",
        "seeds": seeds,
        "crossings": rlplat_crossings(run_dir),
        "report": report_row([str(run_dir)], out / "report", 10),
    }
    print("rlplat", [c["env_steps_to_475"] for c in rlplat["crossings"]], flush=True)
    cleanrl = []
    for seed in args.cleanrl_seeds:
        cleanrl.append(cleanrl_run(args.cleanrl, args.cleanrl_python, seed, out))
        print("cleanrl", cleanrl[-1], flush=True)
    return {"rlplat": rlplat, "cleanrl": {"source": "vwxyzjn/cleanrl cleanrl/pqn.py (fe8d8a03)",
                                          "runs": cleanrl}}


def breakout(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    experiment = "experiments/atari/breakout_pqn.yaml"
    run_dir, seeds = train_seeds(experiment, 1, args.budget, out / "breakout")
    return {
        "command": f"rlplat train {experiment} stop.env_steps={args.budget}",
        "seeds": seeds,
        "report": report_row([str(run_dir)], out / "breakout_report", 10),
        "ppo_at_1m": "36.7 greedy (docs/atari.md, experiments/atari/breakout_ppo.yaml, seed 0)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", choices=["cartpole", "breakout"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cleanrl", type=Path, help="CleanRL's pqn.py")
    parser.add_argument("--cleanrl-python", default=sys.executable,
                        help="the Python of CleanRL's own venv")
    parser.add_argument("--cleanrl-seeds", nargs="*", type=int, default=[1],
                        help="CleanRL's seeds (its default: 1)")
    parser.add_argument("--budget", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, help="runs go here (default: a temp folder)")
    args = parser.parse_args()
    if args.task == "cartpole" and args.cleanrl is None:
        parser.error("cartpole needs --cleanrl PATH/TO/pqn.py")
    out = args.out or Path(tempfile.mkdtemp(prefix="pqn_"))
    result = cartpole(args, out) if args.task == "cartpole" else breakout(args, out)
    results = load_results(RESULTS)
    results[args.task] = {"command": invocation(), "machine": machine(),
                          "date": time.strftime("%Y-%m-%d"), **result}
    save_results(RESULTS, results)


if __name__ == "__main__":
    main()
