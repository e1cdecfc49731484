"""Run directories: a fresh one per run, never reused, with the resolved experiment and versions."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from rlplat.checkpoints import RESOLVED_EXPERIMENT, RUN_INFO, SUMMARY
from rlplat.errors import UserError
from rlplat.experiment.yaml_io import dump_yaml
from rlplat.util.atomic import write_atomic
from rlplat.util.paths import new_path
from rlplat.util.process import this_process
from rlplat.util.versions import versions


def create_run_dir(experiment_dir: Path, claim: Callable[[str], bool] | None = None) -> Path:
    """Make ``experiment_dir/<timestamp>[-N]``, a name no run had before (in the directory, and
    on the cluster where ``claim`` reserves names: see ``launch.claim_on_cluster``)."""
    try:
        experiment_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create the output directory {experiment_dir}: {exc.strerror}. "
            "Choose another 'output_dir' or fix its permissions."
        ) from None
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    try:
        return new_path(experiment_dir, stamp, make_dir=True, claim=claim)
    except FileExistsError:
        raise UserError(
            f"could not find a free run directory name under {experiment_dir}."
        ) from None


def write_run_files(
    run_dir: Path,
    resolved: dict[str, Any],
    address: str | None,
    cluster: dict[str, Any] | None = None,
) -> None:
    """Write the resolved experiment and run metadata (versions, command, start time, the
    cluster's nodes and the resource choices made on them)."""
    write_atomic(run_dir / RESOLVED_EXPERIMENT, dump_yaml(resolved))
    info = {
        "command": sys.argv,
        "started": datetime.now().isoformat(timespec="seconds"),
        "started_unix": time.time(),
        "ray_address": address,
        "host": platform.node(),
        "versions": versions(),
        "cluster": cluster,
        "drivers": [_driver()],
    }
    write_atomic(run_dir / RUN_INFO, json.dumps(info, indent=2) + "\n")


def _driver() -> dict[str, Any]:
    return {**this_process(), "command": sys.argv, "started_unix": time.time()}


def record_driver(run_dir: Path) -> None:
    """Add this process to the run's drivers (``rlplat train --resume``): ``rlplat runs`` says
    a run is running while its newest driver is."""
    _update_run_info(
        run_dir, lambda info: info.update(drivers=[*info.get("drivers", []), _driver()])
    )


TRIAL_RESTARTS = "trial_restarts"  # in run.json: restarts per trial after a lost process or node


def record_restarts(run_dir: Path, trials: list[str]) -> None:
    """Count one more restart of each of ``trials`` (lost their process or node) in run.json."""

    def add(info: dict[str, Any]) -> None:
        counts = info.setdefault(TRIAL_RESTARTS, {})
        for name in trials:
            counts[name] = counts.get(name, 0) + 1

    _update_run_info(run_dir, add)


def trial_restarts(run_dir: Path) -> dict[str, int]:
    """How often each trial of the run restarted after losing its process or node."""
    try:
        info = json.loads((run_dir / RUN_INFO).read_text())
    except (OSError, ValueError):
        return {}
    counts = info.get(TRIAL_RESTARTS) if isinstance(info, dict) else None
    if not isinstance(counts, dict):
        return {}
    return {name: count for name, count in counts.items() if isinstance(count, int)}


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    write_atomic(run_dir / SUMMARY, json.dumps(summary, indent=2) + "\n")


def record_timings(run_dir: Path, timings: dict[str, Any]) -> None:
    """Add this command's stage timings (``rlplat.util.timings``) to its driver in run.json."""
    pid = os.getpid()

    def add(info: dict[str, Any]) -> None:
        for driver in reversed(info.get("drivers", [])):
            if driver.get("pid") == pid:
                driver["timings"] = timings
                return

    _update_run_info(run_dir, add)


def _update_run_info(run_dir: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = run_dir / RUN_INFO
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    change(info)
    write_atomic(path, json.dumps(info, indent=2) + "\n")


def is_loop_run(run_dir: Path) -> bool:
    """Whether ``run_dir``'s trial was trained by this loop (its run.json says the command's
    process ran it, and it holds no Tune state to restore)."""
    try:
        info = json.loads((run_dir / RUN_INFO).read_text())
    except (OSError, ValueError):
        return False
    cluster = info.get("cluster") if isinstance(info, dict) else None
    process = cluster.get("trial_process") if isinstance(cluster, dict) else None
    return process == "command" and not (run_dir / "tuner.pkl").exists()
