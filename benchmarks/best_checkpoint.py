"""Does the checkpoint ``rlplat eval <run>`` picks hold up? (checkpoint.rescore)

    python benchmarks/best_checkpoint.py [--experiment pendulum_sac] [--seeds 0 1 2]
        [--episodes 20] [--label NAME] [override ...]

For each seed: ``rlplat train experiments/<experiment>.yaml seed=S <overrides>`` (the shipped
file as it is unless overridden), then every checkpoint the run kept is played ``--episodes``
greedy episodes on seeds it was never scored on (1000..), out of sample: the picked checkpoint's
score beside the best kept one's, and beside the checkpoint the 5 evaluation episodes of its
iteration ranked first (the pick before checkpoint.rescore). Writes
benchmarks/results/best_checkpoint_<label>.json (label: the experiment's name unless given) and
prints a Markdown table.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from harness import eval_report, read_json, results_file, save_results, train

FRESH_SEED = 1000


def _seed_row(experiment: str, seed: int, episodes: int, overrides: list[str], out: Path) -> dict:
    command = [f"seed={seed}", *overrides]
    training = train(f"experiments/{experiment}.yaml", *command, out=out)
    [trial] = read_json(training.run_dir / "summary.json")["trials"]
    checkpoints = sorted(Path(trial["path"]).glob("checkpoint_*"))
    kept = {}
    for checkpoint in checkpoints:
        info = read_json(checkpoint / "rlplat_checkpoint.json")
        fresh = eval_report(checkpoint, episodes, "--seed", str(FRESH_SEED))["returns"]
        rescored = info.get("score_interval") is not None
        kept[checkpoint.name] = {
            "iteration": info["iteration"],
            "score_during_training": info["training_score"] if rescored else info["score"],
            "rescored": info["score"] if rescored else None,
            "rescored_interval": info.get("score_interval"),
            "fresh_mean": fresh["mean"],
            "fresh_std": fresh["std"],
        }
    picked = Path(trial["best_checkpoint"]).name
    scored = [name for name in kept if kept[name]["score_during_training"] is not None]
    before = max(scored or kept, key=lambda name: kept[name]["score_during_training"] or 0.0)
    best = max(kept, key=lambda name: kept[name]["fresh_mean"])
    return {
        "command": f"rlplat train experiments/{experiment}.yaml {' '.join(command)}",
        "wall_s": training.wall_s,
        "checkpoints": kept,
        "picked": picked,
        "picked_before_rescore": before,
        "best_fresh": best,
        "picked_gap": kept[best]["fresh_mean"] - kept[picked]["fresh_mean"],
        "gap_before_rescore": kept[best]["fresh_mean"] - kept[before]["fresh_mean"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="pendulum_sac")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--label", help="the results file's name (default: the experiment)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        for seed in args.seeds:
            out = Path(scratch) / f"seed{seed}"
            rows[str(seed)] = _seed_row(
                args.experiment, seed, args.episodes, args.overrides, out
            )
    label = args.label or args.experiment
    save_results(results_file(f"best_checkpoint_{label}.json"), {
        "episodes": args.episodes, "fresh_seeds_from": FRESH_SEED, "seeds": rows,
    })
    print(f"| seed | kept | picked (fresh {args.episodes}) | best kept (fresh) | gap | "
          "picked before rescore (fresh) | gap before |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for seed, row in rows.items():
        kept = row["checkpoints"]
        print(
            f"| {seed} | {len(kept)} | {row['picked']} {kept[row['picked']]['fresh_mean']:.1f} | "
            f"{row['best_fresh']} {kept[row['best_fresh']]['fresh_mean']:.1f} | "
            f"{row['picked_gap']:.1f} | {row['picked_before_rescore']} "
            f"{kept[row['picked_before_rescore']]['fresh_mean']:.1f} | "
            f"{row['gap_before_rescore']:.1f} |"
        )


if __name__ == "__main__":
    main()
