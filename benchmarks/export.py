"""ONNX export against the torch path ``rlplat eval`` uses, side by side in one run.

    python benchmarks/export.py [--cartpole RUN_DIR] [--pistonball RUN_DIR] [--steps 300]

Without run directories it trains them first (``rlplat train``): the shipped CartPole PPO (MLP,
to its target) and one iteration of the shipped pistonball PPO (CNN on 84x84x3 frames, 20 agents
sharing one policy; speed does not depend on how well it plays). Then, for each:

1. ``rlplat export <run>`` wall time, parity certificate included (10 episodes);
2. acting latency at batch 1: the time per env step of a real episode, the checkpoint's policy
   through RLlib's connectors and torch (``rlplat eval``'s path) and the export through
   ``rlplat.runtime`` (onnxruntime), each step's observations given to both (pistonball: the 20
   agents' observations per step, batched by each path);
3. throughput at batch 256: observations per second through the module's forward pass plus the
   greedy action (torch) and through the ONNX graph (onnxruntime).

torch and onnxruntime use their default thread counts. Writes benchmarks/results/export.json
and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from harness import read_json, results_file, rlplat, save_results, train

RESULTS = results_file("export.json")


def train_run(name: str, output: Path, *overrides: str) -> Path:
    """The run directory of ``rlplat train experiments/<name>.yaml <overrides>``."""
    return train(f"experiments/{name}.yaml", *overrides, out=output).run_dir


def export(run: Path, out: Path) -> float:
    """Wall seconds of ``rlplat export <run> --out <out>``, as a user waits for it."""
    return rlplat("export", str(run), "--out", str(out)).wall_s


def step_latencies(run: Path, export_dir: Path, steps: int) -> dict[str, float]:
    """Median seconds per env step of each acting path, on the same observations."""
    from rlplat.checkpoints import find_checkpoint
    from rlplat.experiment.load import load_experiment
    from rlplat.policy.exported import export_actor
    from rlplat.policy.restore import Policy
    from rlplat.policy.rollout import run_episode
    from rlplat.rllib.env_creator import rebuild_env
    from rlplat.rllib.multi_agent import mapping_for
    from rlplat.runtime import read_manifest

    picked = find_checkpoint(run)
    experiment = load_experiment(picked.experiment_file).experiment
    env = rebuild_env(experiment, None, picked.experiment_file)
    checkpoint = Policy.from_checkpoint(picked.path, mapping_for(experiment, env)).actor()
    exported = export_actor(export_dir, read_manifest(export_dir))
    timings: dict[str, list[float]] = {"torch": [], "onnx": []}

    class Timed:
        """Times ``act`` of the wrapped actor."""

        def __init__(self, actor, label):
            self.actor, self.label = actor, label
            self.multi_agent, self.mapping = actor.multi_agent, actor.mapping

        def reset(self, *args):
            self.actor.reset(*args)

        def observe(self, *args):
            self.actor.observe(*args)

        def act(self, observation, explore):
            start = time.perf_counter()
            action = self.actor.act(observation, explore)
            timings[self.label].append(time.perf_counter() - start)
            return action

    driver, shadow = Timed(checkpoint, "torch"), Timed(exported, "onnx")
    seed = 0
    while len(timings["torch"]) < steps:
        run_episode(
            driver, env, seed=seed, explore=False, shadows=[shadow],
            watch=lambda observation, action: shadow.act(observation, False),
            max_steps=steps - len(timings["torch"]),
        )
        seed += 1
    env.close()
    agents = len(getattr(env, "possible_agents", None) or [None])
    return {
        "agents_per_step": agents,
        "torch_ms": 1000 * statistics.median(timings["torch"][5:]),
        "onnx_ms": 1000 * statistics.median(timings["onnx"][5:]),
    }


def throughput(run: Path, export_dir: Path, batch: int, repeats: int) -> dict[str, float]:
    """Observations per second at ``batch`` through the module (torch) and the graph (ONNX)."""
    import numpy as np
    import torch
    from ray.rllib.core.columns import Columns

    from rlplat.checkpoints import find_checkpoint
    from rlplat.policy.restore import Policy
    from rlplat.runtime import load, read_manifest

    manifest = read_manifest(export_dir)
    (policy_id, spec), = ((k, v) for k, v in manifest.policies.items() if v.kind == "onnx")
    shape = spec.inputs[0].shape[1:]
    observations = np.random.default_rng(0).uniform(0, 1, (batch, *shape)).astype(np.float32)
    picked = find_checkpoint(run)
    policy = Policy.from_checkpoint(picked.path, (lambda agent, *a, **k: policy_id)
                                    if manifest.multi_agent else None)
    module = policy.module[policy_id] if manifest.multi_agent else policy.module
    runtime = load(export_dir)
    network = runtime.policy_for(next(iter(manifest.agents))) if manifest.multi_agent \
        else runtime

    def torch_pass():
        with torch.inference_mode():
            out = module.forward_inference({Columns.OBS: torch.from_numpy(observations)})
            dist = module.get_inference_action_dist_cls().from_logits(
                out[Columns.ACTION_DIST_INPUTS]
            )
            return dist.to_deterministic().sample().numpy()

    def onnx_pass():
        return network.forward(list(observations))["action"]

    result = {}
    for label, call in (("torch", torch_pass), ("onnx", onnx_pass)):
        call()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        result[f"{label}_obs_per_s"] = batch / statistics.median(times)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cartpole", type=Path, help="a cartpole_ppo run directory")
    parser.add_argument("--pistonball", type=Path, help="a pistonball_ppo run directory")
    parser.add_argument("--steps", type=int, default=300, help="env steps timed per policy")
    parser.add_argument("--repeats", type=int, default=30, help="batches timed per policy")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        temp = Path(tmp)
        runs = {
            "cartpole_ppo (MLP)": args.cartpole or train_run("cartpole_ppo", temp / "cartpole"),
            "pistonball_ppo (CNN)": args.pistonball
            or train_run("pistonball_ppo", temp / "pistonball", "stop.iterations=1"),
        }
        for label, run in runs.items():
            out = temp / f"export-{len(results)}"
            seconds = export(run, out)
            row = {"policy": label, "run": str(run), "export_s": seconds}
            row.update(step_latencies(run, out, args.steps))
            row.update(throughput(run, out, 256, args.repeats))
            row["parity"] = read_json(out / "parity.json")
            results.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "parity"}), flush=True)
    save_results(RESULTS, results)
    print("| policy | `rlplat export` wall s | agents per step | step latency torch ms | "
          "step latency ONNX ms | batch 256 torch obs/s | batch 256 ONNX obs/s |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['policy']} | {r['export_s']:.1f} | {r['agents_per_step']} | "
            f"{r['torch_ms']:.3f} | {r['onnx_ms']:.3f} | {r['torch_obs_per_s']:,.0f} | "
            f"{r['onnx_obs_per_s']:,.0f} |"
        )


if __name__ == "__main__":
    main()
