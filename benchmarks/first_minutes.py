"""The first minutes of a researcher's loop, before and after a change, side by side in one run.

    python benchmarks/first_minutes.py --before <git ref> [--pairs 3] [--loaded]

``before`` is another commit of rlplat (checked out as a git worktree, whose commands run from
that tree, so that ``python -m rlplat.cli`` imports its rlplat, in the same venv); ``after`` is
this checkout. Each pair runs,
alternating which side goes first, one process at a time:

- ``rlplat train experiments/cartpole_ppo.yaml --timings stop.env_steps=2000``, twice in a row
  (the second is the one counted: "from the second command on"); its fixed cost is every stage
  of ``run.json``'s timings but training;
- ``rlplat train experiments/cartpole_ppo.yaml --dry-run``: whole-command wall seconds;
- ``rlplat eval <the run> -n 1``: whole-command wall seconds.

``--loaded`` keeps one core busy (a Python loop in another process) throughout, as on the
project's machine when another job runs. After each side's measurements its warm Ray and warm
interpreter (where it has them) are stopped, so each side starts from the same state. Results:
benchmarks/results/first_minutes.json; the Markdown table printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import REPO, RLPLAT, load_results, machine, results_file, save_results

RESULTS = results_file("first_minutes.json")
EXPERIMENT = "experiments/cartpole_ppo.yaml"
FIXED_STAGES = ("imports", "validation", "ray_start", "trial_start", "shutdown")


def timed(command: list[str], tree: Path) -> tuple[float, str]:
    """Wall seconds from launch to exit, and the output; a failure ends the benchmark."""
    import time

    started = time.monotonic()
    done = subprocess.run(command, cwd=tree, env=ENV, capture_output=True, text=True)
    wall = round(time.monotonic() - started, 2)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{(done.stdout + done.stderr)[-3000:]}")
    return wall, done.stdout


def run_dir_of(output: str) -> Path:
    line = next(ln for ln in output.splitlines() if ln.startswith("Run directory:"))
    return Path(line.split(":", 1)[1].strip())


ENV = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a local Ray, as a user's


def measure(side: str, tree: Path, out: Path) -> dict[str, Any]:
    train = [*RLPLAT, "train", EXPERIMENT, "--timings", "stop.env_steps=2000",
             f"output_dir={out}"]  # fmt: skip
    timed(train, tree)  # the first command of the loop (a warm Ray, if any, starts here)
    train_wall, output = timed(train, tree)
    run_dir = run_dir_of(output)
    timings = json.loads((run_dir / "run.json").read_text())["drivers"][-1]["timings"]
    stages = timings["stages_s"]
    dry_wall, _ = timed([*RLPLAT, "train", EXPERIMENT, "--dry-run"], tree)
    eval_wall, _ = timed([*RLPLAT, "eval", str(run_dir), "-n", "1"], tree)
    # Each side's warm Ray and warm interpreter, where it has them (a side older than
    # `rlplat ray` fails here, harmlessly), do not run on into the other side's measurements.
    subprocess.run([*RLPLAT, "ray", "stop", "--force"], cwd=tree, env=ENV, capture_output=True)
    return {
        "stages_s": {stage: stages[stage] for stage in [*FIXED_STAGES, "training"]},
        "fixed_s": round(sum(stages[stage] for stage in FIXED_STAGES), 2),
        "train_wall_s": train_wall,
        "dry_run_wall_s": dry_wall,
        "eval_wall_s": eval_wall,
    }


def worktree(ref: str) -> Path:
    where = Path(tempfile.mkdtemp(prefix="rlplat-before-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(where), ref], cwd=REPO, check=True,
                   capture_output=True)  # fmt: skip
    return where


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="git ref of the 'before' side")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--loaded", action="store_true", help="keep one core busy meanwhile")
    args = parser.parse_args()
    before_tree = worktree(args.before)
    trees = {"before": before_tree, "after": REPO}
    burner = None
    if args.loaded:
        burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    rows = []
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for pair in range(args.pairs):
                order = ["before", "after"] if pair % 2 == 0 else ["after", "before"]
                row = {"pair": pair}
                for side in order:
                    row[side] = measure(side, trees[side], Path(scratch) / f"{side}-{pair}")
                print(json.dumps(row), flush=True)
                rows.append(row)
    finally:
        if burner is not None:
            burner.kill()
        subprocess.run(["git", "worktree", "remove", "--force", str(before_tree)], cwd=REPO,
                       capture_output=True)  # fmt: skip
    key = "loaded" if args.loaded else "idle"
    results = load_results(RESULTS)
    results[key] = {"machine": machine(), "before": args.before, "pairs": rows}
    save_results(RESULTS, results)
    print(table(rows, key))


def table(rows: list[dict[str, Any]], key: str) -> str:
    def span(side: str, pick: Any) -> str:
        values = [pick(row[side]) for row in rows]
        return f"{min(values):.2f}-{max(values):.2f} (median {statistics.median(values):.2f})"

    lines = [f"| {key}, seconds | before | after |", "| --- | --- | --- |"]
    picks = {
        "fixed cost of `train --timings` (2nd command)": lambda r: r["fixed_s"],
        **{f"  {stage}": (lambda s: lambda r: r["stages_s"][s])(stage) for stage in FIXED_STAGES},
        "`train --dry-run`, whole command": lambda r: r["dry_run_wall_s"],
        "`eval <run> -n 1`, whole command": lambda r: r["eval_wall_s"],
    }
    for label, pick in picks.items():
        lines.append(f"| {label} | {span('before', pick)} | {span('after', pick)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
