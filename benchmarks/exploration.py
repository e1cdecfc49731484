"""Issue 103's exploration table: PPO with and without Random Network Distillation on Deep Sea
(envs/deep_sea.py, bsuite's exploration task) over its size, 3 seeds each at equal env steps.

    python benchmarks/exploration.py [--sizes 10 20 30] [--variants ppo rnd rnd_cleanrl] [--out DIR]

Each cell: ``rlplat train experiments/deep_sea_rnd.yaml --seeds 3 tune.max_concurrent=1
stop.env_steps=100000 env.kwargs.size=<n> <variant>`` (one trial at a time; a run found
unfinished under ``--out`` is continued with ``--resume``), then ``rlplat report <run>
--eval-episodes 5``: the IQM and mean of the seeds' greedy returns at the end (the env is
deterministic: about 0.99 found the reward, 0 did not). Variants: ``ppo`` the file's PPO without
RND; ``rnd`` the file as shipped; ``rnd_cleanrl`` RND with the PPO settings of CleanRL's
ppo_rnd_envpool.py that carry over (lr 1e-4, gamma 0.999, clip 0.1, entropy 0.001; its RND
settings are exploration.rnd's defaults). Results go to benchmarks/results/exploration.json
with the commit that made them, and for each seed the env steps at which its training return
(the mean of its recent exploring episodes) first passed 0.5: when it had found the path.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from harness import (
    load_results,
    provenance,
    results_file,
    save_results,
    scored_seeds,
    trial_results,
)

RESULTS = results_file("exploration.json")
EXPERIMENT = "experiments/deep_sea_rnd.yaml"
BUDGET = 100_000
SEEDS = 3
EPISODES = 5
VARIANTS = {
    "ppo": ("exploration={}",),
    "rnd": (),
    "rnd_cleanrl": (
        "training.lr=0.0001",
        "training.gamma=0.999",
        "training.clip_param=0.1",
        "training.entropy_coeff=0.001",
    ),
}


def found_at(run_dir: Path) -> list[int | None]:
    """Per trial, the env steps of its first result whose training return passed 0.5."""
    found = []
    for trial in sorted(run_dir.glob("trial_*")):
        steps = [
            int(row["num_env_steps_sampled_lifetime"])
            for row in trial_results(trial)
            if (row.get("env_runners", {}).get("episode_return_mean") or 0.0) > 0.5
        ]
        found.append(steps[0] if steps else None)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", type=int, default=[10, 20, 30])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument(
        "--out", type=Path, default=Path(tempfile.gettempdir()) / "rlplat-exploration"
    )
    args = parser.parse_args()
    results = load_results(RESULTS)
    for size in args.sizes:
        for variant in args.variants:
            overrides = (f"env.kwargs.size={size}", *VARIANTS[variant])
            out = args.out / f"size_{size}" / variant
            run_dir, cell = scored_seeds(EXPERIMENT, SEEDS, BUDGET, out, EPISODES, *overrides)
            results.setdefault(f"size_{size}", {})[variant] = {
                **cell,
                "solved": sum((score or 0.0) > 0.5 for score in cell["final_scores"]),
                "found_at_env_steps": found_at(run_dir),
                **provenance(),
            }
            save_results(RESULTS, results)
            print(
                f"size {size} {variant}: IQM {cell['iqm']} over {cell['final_scores']}", flush=True
            )


if __name__ == "__main__":
    main()
