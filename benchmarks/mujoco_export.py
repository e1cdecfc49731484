"""Export certificates of the shipped MuJoCo PPO and SAC files: each trained briefly, then
exported, its ONNX graph checked against the checkpoint on 10 seeded episodes.

    python benchmarks/mujoco_export.py [--algos ppo sac] [--envs halfcheetah ...] [--out DIR]

For each file: ``rlplat train experiments/mujoco/<env>_<algo>.yaml stop.env_steps=S
output_dir=<out>/<env>_<algo>`` (PPO: 2,048 env steps; SAC: 1,000, all before SAC learns: the
certificate tests the graph, not the policy's skill), then ``rlplat export <run> --out
<out>/<env>_<algo>/export`` and its parity.json. The graph carries what the policy acts with:
PPO's mean_std_filter statistics frozen and its free log std, SAC's squashed Gaussian. Writes
benchmarks/results/mujoco_export.json and prints docs/mujoco.md's table.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from harness import invocation, load_results, machine, read_json, results_file, rlplat, save_results
from harness import train as train_run

RESULTS = results_file("mujoco_export.json")
ENVS = ("halfcheetah", "hopper", "walker2d", "ant", "humanoid")
BRIEF = {
    "ppo": ["stop.env_steps=2048"],
    "sac": ["stop.env_steps=1000", "reporting.min_sample_timesteps_per_iteration=1000"],
}


def certificate(algo: str, env: str, out: Path) -> dict[str, object]:
    """Train ``<env>_<algo>.yaml`` briefly into ``out`` (reused when there), export its last
    checkpoint, and the certificate's numbers."""
    experiment = f"experiments/mujoco/{env}_{algo}.yaml"
    training = train_run(experiment, *BRIEF[algo], out=out / "run", reuse=True)
    exported = out / "export"
    export_s = None
    if not (exported / "parity.json").exists():
        export_s = rlplat("export", str(training.run_dir), "--out", str(exported)).wall_s
    parity = read_json(exported / "parity.json")
    last = training.results()[-1]
    return {
        "command": f"rlplat train {experiment} {' '.join(BRIEF[algo])}; rlplat export <run>",
        "env_steps": int(last["num_env_steps_sampled_lifetime"]),
        "passed": parity["passed"],
        "agreement": parity["agreement"],
        "compared_actions": parity["compared_actions"],
        "max_abs_diff": parity["max_abs_diff"],
        "tolerance": parity["tolerance"],
        "return_checkpoint": round(parity["checkpoint"]["mean"], 1),
        "return_onnx": round(parity["onnx"]["mean"], 1),
        "export_wall_s": export_s,
    }


def table(rows: dict[str, dict[str, object]]) -> str:
    lines = [
        "| file | env steps trained | actions agree | largest difference | "
        "return checkpoint / ONNX |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| `{name}.yaml` | {row['env_steps']:,} | {row['agreement']:.2%} of "
            f"{row['compared_actions']:,} | {row['max_abs_diff']:.1e} | "
            f"{row['return_checkpoint']} / {row['return_onnx']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", choices=sorted(BRIEF), default=sorted(BRIEF))
    parser.add_argument("--envs", nargs="+", choices=ENVS, default=list(ENVS))
    parser.add_argument("--out", type=Path, help="runs and exports (default: a temp folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="mujoco-export-"))
    results = load_results(RESULTS)
    rows = results.setdefault("certificates", {})
    for algo in args.algos:
        for env in args.envs:
            name = f"{env}_{algo}"
            rows[name] = certificate(algo, env, out / name)
            print(name, "passed" if rows[name]["passed"] else "FAILED", flush=True)
    results.update(command=invocation(), machine=machine())
    save_results(RESULTS, results)
    print(table(rows))


if __name__ == "__main__":
    main()
