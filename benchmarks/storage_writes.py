"""What writing the run directory atomically costs, side by side in one run.

    python benchmarks/storage_writes.py [RUN_DIR] [--repeats 20]

Tune copies a run's logs (experiment state, each trial's result.json, progress.csv, events) from
its staging directory into the run directory about once a second, and each checkpoint once. This
copies the same files the same way (pyarrow ``copy_files``, as Tune does), alternately through
pyarrow's plain local filesystem and through rlplat's ``atomic_filesystem`` (temporary file,
fsync, rename), into a directory beside RUN_DIR (so on the same disk). RUN_DIR defaults to the
run under checkpoints/ with the most trials. Prints the median time per copy and writes
benchmarks/results/storage_writes.json.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow.fs
from harness import REPO, results_file, save_results

from rlplat.run.storage import atomic_filesystem

RESULTS = results_file("storage_writes.json")


def newest_big_run() -> Path:
    runs = [p for p in (REPO / "checkpoints").glob("*/*") if p.is_dir()]
    if not runs:
        raise SystemExit("no run under checkpoints/: give a run directory")
    return max(runs, key=lambda run: (len(list(run.glob("trial_*"))), run.name))


def stage(run: Path, into: Path) -> tuple[Path, Path]:
    """The run's log files (what Tune syncs each second) and one checkpoint, copied locally."""
    logs, checkpoint = into / "logs", into / "checkpoint"
    for path in run.rglob("*"):
        if path.is_file() and not any(p.startswith("checkpoint_") for p in path.parts):
            target = logs / path.relative_to(run)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    first = next(run.glob("trial_*/checkpoint_*"), None)
    if first is None:
        raise SystemExit(f"{run} has no checkpoint")
    shutil.copytree(first, checkpoint)
    return logs, checkpoint


def timed_copy(source: Path, target: Path, filesystem: pyarrow.fs.FileSystem) -> float:
    started = time.perf_counter()
    pyarrow.fs.copy_files(str(source), str(target), destination_filesystem=filesystem)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", nargs="?", type=Path)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    run = (args.run or newest_big_run()).resolve()
    systems = {"plain": pyarrow.fs.LocalFileSystem(), "atomic": atomic_filesystem()}
    times: dict[str, dict[str, list[float]]] = {
        name: {"logs": [], "checkpoint": []} for name in systems
    }
    with tempfile.TemporaryDirectory() as local, tempfile.TemporaryDirectory(dir=run.parent) as out:
        sources = dict(zip(("logs", "checkpoint"), stage(run, Path(local)), strict=True))
        files = {kind: [p for p in src.rglob("*") if p.is_file()] for kind, src in sources.items()}
        sizes = {kind: sum(p.stat().st_size for p in paths) for kind, paths in files.items()}
        for _ in range(args.repeats):
            for name, filesystem in systems.items():  # alternate, so drift hits both alike
                for kind, source in sources.items():
                    times[name][kind].append(
                        timed_copy(source, Path(out) / name / kind, filesystem)
                    )
    report = {
        "run": str(run.relative_to(REPO) if run.is_relative_to(REPO) else run),
        "repeats": args.repeats,
        "files": {kind: len(paths) for kind, paths in files.items()},
        "bytes": sizes,
        "median_ms": {
            name: {
                kind: round(1000 * statistics.median(values), 2) for kind, values in kinds.items()
            }
            for name, kinds in times.items()
        },
    }
    save_results(RESULTS, report)
    print(f"{run}: {args.repeats} copies each, median ms")
    print("| filesystem | logs sync | one checkpoint |")
    print("|---|---|---|")
    for name, kinds in report["median_ms"].items():
        print(f"| {name} | {kinds['logs']} | {kinds['checkpoint']} |")
    print(f"files: {report['files']}, bytes: {report['bytes']}")


if __name__ == "__main__":
    main()
