"""The shipped hyperparameter searches, end to end through the CLI.

    python benchmarks/search.py [--only cartpole_ppo_asha cartpole_ppo_pbt pendulum_sac_optuna]

For each search (one process at a time): its wall time, trials and why each stopped, the winner;
then ``rlplat train <run dir>/best.yaml`` (a single trial with the winner's values and seed) and
whether it reaches its target. For PBT: the exploits Tune logged and each trial's learning rate at
its first and last iteration. Writes benchmarks/results/search.json and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multi_agent import REPO, rlplat  # noqa: E402

RESULTS = REPO / "benchmarks/results/search.json"
SEARCHES = ("cartpole_ppo_asha", "cartpole_ppo_pbt", "pendulum_sac_optuna")


def _summary(out: Path) -> dict:
    [path] = out.glob("*/*/summary.json")
    return json.loads(path.read_text())


def _results(trial_path: str) -> list[dict]:
    return [json.loads(line) for line in Path(trial_path, "result.json").open()]


def search(name: str, work: Path) -> dict:
    out = work / name
    _, wall = rlplat("train", f"experiments/{name}.yaml", f"output_dir={out}")
    summary = _summary(out)
    rows = summary["search"]
    winner = rows[0]
    report = {
        "command": f"rlplat train experiments/{name}.yaml",
        "wall_s": round(wall, 1),
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
                for r in _results(trial["path"])
            ]
            report["lr_first_last"][trial["name"]] = [rates[0], rates[-1]]
    best_out = work / f"{name}-best"
    _, best_wall = rlplat("train", summary["best_yaml"], f"output_dir={best_out}")
    [best_trial] = _summary(best_out)["trials"]
    report["best_yaml_rerun"] = {
        "command": "rlplat train <run dir>/best.yaml",
        "wall_s": round(best_wall, 1),
        "env_steps": best_trial["env_steps"],
        "final_return": best_trial["final_return"],
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=SEARCHES, default=list(SEARCHES))
    args = parser.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            results[name] = search(name, Path(tmp))
            RESULTS.parent.mkdir(parents=True, exist_ok=True)
            RESULTS.write_text(json.dumps(results, indent=2) + "\n")
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
