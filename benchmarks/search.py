"""The shipped hyperparameter searches, end to end through the CLI.

    python benchmarks/search.py [--only cartpole_ppo_asha cartpole_ppo_pbt pendulum_sac_optuna]

For each search (one process at a time): its wall time, trials and why each stopped, the winner;
then ``rlplat train <run dir>/best.yaml`` (a single trial with the winner's values and seed) and
whether it reaches its target. For PBT: the exploits Tune logged and each trial's learning rate at
its first and last iteration. Writes benchmarks/results/search.json and prints a summary.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

from harness import load_results, results_file, save_results, train, trial_results

RESULTS = results_file("search.json")
SEARCHES = ("cartpole_ppo_asha", "cartpole_ppo_pbt", "pendulum_sac_optuna")


def search(name: str, work: Path) -> dict:
    training = train(f"experiments/{name}.yaml", out=work / name)
    summary = training.summary()
    rows = summary["search"]
    winner = rows[0]
    report = {
        "command": f"rlplat train experiments/{name}.yaml",
        "wall_s": round(training.wall_s, 1),
        "trials": len(rows),
        "stop_reasons": dict(Counter(row["stop_reason"] for row in rows)),
        "winner": {k: winner[k] for k in ("name", "env_steps", "final", "params")},
        "ranked": [
            {k: row[k] for k in ("rank", "name", "stop_reason", "env_steps", "final", "params")}
            for row in rows
        ],
    }
    run_dir = Path(summary["run_dir"])
    pbt_log = run_dir / "pbt_global.txt"
    if pbt_log.exists():
        report["exploits"] = len(pbt_log.read_text().splitlines())
        report["lr_first_last"] = {}
        for trial in summary["trials"]:
            rates = [
                r["learners"]["default_policy"]["default_optimizer_learning_rate"]
                for r in trial_results(Path(trial["path"]))
            ]
            report["lr_first_last"][trial["name"]] = [rates[0], rates[-1]]
    best = train(summary["best_yaml"], out=work / f"{name}-best")
    [best_trial] = best.summary()["trials"]
    report["best_yaml_rerun"] = {
        "command": "rlplat train <run dir>/best.yaml",
        "wall_s": round(best.wall_s, 1),
        "env_steps": best_trial["env_steps"],
        "final_return": best_trial["final_return"],
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=SEARCHES, default=list(SEARCHES))
    args = parser.parse_args()
    results = load_results(RESULTS)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            results[name] = search(name, Path(tmp))
            save_results(RESULTS, results)
            report = results[name]
            rerun = report["best_yaml_rerun"]
            print(
                f"{name}: {report['trials']} trials in {report['wall_s']} s, "
                f"{report['stop_reasons']}; winner {report['winner']['name']} "
                f"{report['winner']['final']:.1f} at {report['winner']['env_steps']:,} env steps; "
                f"best.yaml rerun {rerun['final_return']:.1f} at {rerun['env_steps']:,} env steps"
                + (f"; {report['exploits']} exploits" if "exploits" in report else ""),
                flush=True,
            )


if __name__ == "__main__":
    main()
