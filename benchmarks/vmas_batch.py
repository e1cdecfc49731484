"""VMAS's batched simulation (``env.backend: vmas``) against one world per env: env steps per
second, and the wall time PPO needs to reach a return.

    python benchmarks/vmas_batch.py speed [--sides gymnasium_1 vmas_64 ...] [--iterations 3]
    python benchmarks/vmas_batch.py learn [--sides vmas_60 gymnasium_60] [--minutes 20] [--out DIR]

Run it pinned to one core (``taskset -c 1 python benchmarks/vmas_batch.py ...``): every training
inherits the pin, so each side samples and learns on that one core.

``speed``: VMAS's own step of 1, 64 and 256 worlds (milliseconds); then ``rlplat train
experiments/marl/vmas_balance_ppo.yaml`` (3 agents, PPO, 6,000 env steps per iteration) for
``--iterations`` iterations, once per side, one side at a time: the old path
(``env.backend=gymnasium``: one single-world VMAS env per env, stepped one after another; 1 and
60 envs) and VMAS's batch of 1, 64 and 256 worlds. Per side: env steps per second of sampling
(the env runner's sample call) and of whole iterations (sampling and learning), the median over
the iterations after the first.

``learn``: the shipped file as it is (60 worlds of one batch) and the old path (60 single-world
envs) for ``--minutes`` each (one process per side may run each on its own core); the team
return (the sum over the 3 agents, who share the reward) over training seconds, and how long the
batched run took to reach the return the old path ended with. Results go to
benchmarks/results/vmas.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import invocation, load_results, machine, results_file, save_results, train

RESULTS = results_file("vmas.json")
EXPERIMENT = "experiments/marl/vmas_balance_ppo.yaml"
SIDES = {  # name -> overrides
    "gymnasium_1": ("env.backend=gymnasium", "resources.env_runners.envs=1"),
    "gymnasium_60": ("env.backend=gymnasium", "resources.env_runners.envs=60"),
    "vmas_1": ("env.backend=vmas", "resources.env_runners.envs=1"),
    "vmas_64": ("env.backend=vmas", "resources.env_runners.envs=64"),
    "vmas_256": ("env.backend=vmas", "resources.env_runners.envs=256"),
}


def simulation_ms(worlds: int, steps: int = 200) -> float:
    """Milliseconds of one VMAS ``balance`` step of ``worlds`` worlds (zero forces), alone."""
    import torch  # noqa: PLC0415 - only this part simulates in this process
    import vmas  # noqa: PLC0415

    torch.set_num_threads(1)
    env = vmas.make_env("balance", num_envs=worlds, device="cpu", max_steps=None, n_agents=3)
    env.reset()
    actions = [torch.zeros(worlds, 2) for _ in env.agents]
    started = time.perf_counter()
    for _ in range(steps):
        env.step(actions)
    return round((time.perf_counter() - started) / steps * 1e3, 2)


def speed(names: list[str], iterations: int, out: Path) -> dict[str, Any]:
    rows: dict[str, Any] = {
        "vmas_step_ms": {str(worlds): simulation_ms(worlds) for worlds in (1, 64, 256)}
    }
    print(rows, flush=True)
    for name in names:
        overrides = (*SIDES[name], f"stop.iterations={iterations}", "stop.time_s=null")
        training = train(EXPERIMENT, *overrides, out=out / name)
        results = training.results()[1:] or training.results()
        steps = [r["env_runners"]["num_env_steps_sampled"] for r in results]
        sampling = [s / r["env_runners"]["sample"] for s, r in zip(steps, results, strict=True)]
        whole = [s / r["time_this_iter_s"] for s, r in zip(steps, results, strict=True)]
        rows[name] = {
            "command": f"rlplat train {EXPERIMENT} {' '.join(overrides)}",
            "sampling_env_steps_per_s": round(statistics.median(sampling), 1),
            "iteration_env_steps_per_s": round(statistics.median(whole), 1),
            "iterations_measured": len(results),
        }
        print(name, rows[name], flush=True)
    return rows


def curve(training: Any) -> list[list[float]]:
    """[training seconds, env steps, team return (100-episode window)] per iteration."""
    return [
        [round(r["time_total_s"], 1), int(r["num_env_steps_sampled_lifetime"]),
         round(r["window"]["episode_return_mean"], 2)]
        for r in training.results()
        if (r.get("window") or {}).get("episode_return_mean") is not None
    ]


LEARN_SIDES = {"vmas_60": (), "gymnasium_60": SIDES["gymnasium_60"]}


def learn(names: list[str], minutes: float, out: Path) -> dict[str, Any]:
    rows = {}
    for name in names:
        overrides = LEARN_SIDES[name]
        stop = (f"stop.time_s={int(minutes * 60)}", "stop.env_steps=null")
        training = train(EXPERIMENT, *overrides, *stop, out=out / name, reuse=True)
        rows[name] = {
            "command": f"rlplat train {EXPERIMENT} {' '.join((*overrides, *stop))}",
            "run_dir": str(training.run_dir),
            "curve": curve(training),
        }
    return rows


def time_to_target(rows: dict[str, Any]) -> dict[str, Any]:
    """The return the old path ended with, and when the batched run first reached it."""
    if not {"vmas_60", "gymnasium_60"} <= set(rows):
        return {}
    target = rows["gymnasium_60"]["curve"][-1][2]
    reached = [point for point in rows["vmas_60"]["curve"] if point[2] >= target]
    return {
        "target_return": target,
        "gymnasium_60_seconds": rows["gymnasium_60"]["curve"][-1][0],
        "vmas_60_seconds_to_target": reached[0][0] if reached else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["speed", "learn"])
    parser.add_argument("--sides", nargs="+", help="speed: of SIDES; learn: of LEARN_SIDES")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--out", type=Path, help="runs go here (default: a temp folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="vmas_"))
    if args.part == "speed":
        rows = speed(args.sides or list(SIDES), args.iterations, out)
    else:
        rows = learn(args.sides or list(LEARN_SIDES), args.minutes, out)
    results = load_results(RESULTS)  # read late: another process may have saved its side
    if args.part == "learn":
        sides = {k: v for k, v in results.get("learn", {}).items() if k in LEARN_SIDES}
        rows = {**sides, **rows}
        rows.update(time_to_target(rows))
    results[args.part] = {"command": invocation(), "machine": machine(),
                          "date": time.strftime("%Y-%m-%d %H:%M"), **rows}
    save_results(RESULTS, results)


if __name__ == "__main__":
    main()
