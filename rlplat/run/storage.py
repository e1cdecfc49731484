"""The run directory's storage: Tune writes each file whole, and a failing disk is named.

Tune copies its experiment state, the trials' logs and error reports, and each checkpoint's files
from a local staging directory into the run directory. On pyarrow's plain local filesystem a full
disk (or a killed process) leaves truncated files there: Tune then cannot read its experiment state
on ``--resume``, and a zero-byte ``error.pkl`` breaks the results of the run that just failed.
``AtomicLocalFileSystem`` writes each file as an ``AtomicFile`` instead.
"""

from __future__ import annotations

import errno
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow
import pyarrow.fs

from rlplat.checkpoints import best_and_last, describe_checkpoint
from rlplat.errors import StorageFailed
from rlplat.seams.tune import newest_state, resume_points
from rlplat.util.atomic import AtomicFile
from rlplat.util.disk import free_space

EXPERIMENT_STATE = re.compile(r"experiment_state-.*\.json")


class AtomicLocalHandler(pyarrow.fs.FileSystemHandler):
    """pyarrow's LocalFileSystem, except that every file written is an ``AtomicFile``."""

    def __init__(self) -> None:
        self.local = pyarrow.fs.LocalFileSystem()

    def __reduce__(self) -> tuple:  # Tune ships the filesystem to every trial actor
        return (AtomicLocalHandler, ())

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def get_type_name(self) -> str:
        return "rlplat-atomic-local"

    def normalize_path(self, path: str) -> str:
        return self.local.normalize_path(path)

    def get_file_info(self, paths: list[str]) -> list:
        return self.local.get_file_info(paths)

    def get_file_info_selector(self, selector: Any) -> list:
        return self.local.get_file_info(selector)

    def create_dir(self, path: str, recursive: bool) -> None:
        self.local.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.local.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError(errno.EPERM, "rlplat never empties the root directory")

    def delete_file(self, path: str) -> None:
        self.local.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        self.local.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        with open(src, "rb") as source, AtomicFile(dest, _completeness_check(dest)) as target:
            shutil.copyfileobj(source, target)

    def open_input_stream(self, path: str) -> Any:
        return self.local.open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        return self.local.open_input_file(path)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        return pyarrow.PythonFile(AtomicFile(path, _completeness_check(path)), mode="w")

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        return self.local.open_append_stream(path)  # Tune never appends to its storage


def _completeness_check(path: str) -> Callable[[Path], bool] | None:
    """Tune rewrites its experiment state in place in its staging directory (emptied first)
    while a background thread copies that directory here: a copy can read it empty or cut off.
    Such a copy never replaces the complete state; the next sync, a second later, brings it."""
    return _whole_json if EXPERIMENT_STATE.fullmatch(Path(path).name) else None


def _whole_json(path: Path) -> bool:
    try:
        json.loads(path.read_bytes())
    except ValueError:
        return False
    return True


def atomic_filesystem() -> pyarrow.fs.FileSystem:
    """The local filesystem with atomic file writes, for ``RunConfig(storage_filesystem=...)``."""
    return pyarrow.fs.PyFileSystem(AtomicLocalHandler())


def storage_failed(run_dir: Path, reason: str) -> StorageFailed:
    """The paragraph for a run its disk stopped: what failed, what is safe, what to run."""
    return StorageFailed(
        f"writing the run directory {run_dir} failed: {reason}{free_space(run_dir, reason)}. "
        "Earlier checkpoints are intact (one cut short by the failure is never used). "
        f"{_resume_points(run_dir)} "
        "Free some space or make the directory writable, then continue with: rlplat train "
        f"--resume {run_dir} --retry-errored"
    )


def _resume_points(run_dir: Path) -> str:
    """Where each trial continues on --resume: the checkpoint in Tune's last saved state, which
    is older than the newest complete checkpoint when the disk stopped Tune saving its state; a
    run without Tune's state (rlplat's own loop) continues from the newest complete one."""
    if newest_state(run_dir) is None:
        return " ".join(
            f"On resume {trial.name} continues from "
            + (describe_checkpoint(newest) if newest else "its start (it has no checkpoint)")
            + "."
            for trial in sorted(t for t in run_dir.glob("trial_*") if t.is_dir())
            for newest in [best_and_last(trial)[1]]
        )
    points = resume_points(run_dir)
    if points is None:
        return "Tune's saved state of the run could not be read."
    sentences = []
    for trial in sorted(t for t in run_dir.glob("trial_*") if t.is_dir()):
        start = points.get(trial.name)
        newest = best_and_last(trial)[1]
        where = (
            f"from {describe_checkpoint(start)}, the last one Tune's saved state records"
            if start
            else "from its start (Tune's saved state records no checkpoint)"
        )
        newer = (
            f"; the newer {describe_checkpoint(newest)} is complete too, for rlplat eval or --from"
            if newest and newest != start
            else ""
        )
        sentences.append(f"On resume {trial.name} continues {where}{newer}.")
    return " ".join(sentences)
