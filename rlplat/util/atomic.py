"""Files that readers see whole: the old content or the complete new one, never a cut-off file.

A file is written under a temporary name beside its target, flushed to disk and renamed over the
target. If a write fails (a full disk, a read-only directory), the temporary file is deleted and
the target stays as it was; a process killed mid-write leaves only a ``.<name>.*.partial`` file,
which ``remove_partial_files`` clears.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

PARTIAL_SUFFIX = ".partial"


class AtomicFile:
    """A binary file that replaces ``path`` when closed, unless a write to it failed or
    ``complete`` (called with the written temporary file) says the content is not whole."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        complete: Callable[[Path], bool] | None = None,
    ):
        self.path = Path(path)
        self._complete = complete
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            dir=self.path.parent, prefix=f".{self.path.name}.", suffix=PARTIAL_SUFFIX
        )
        self._tmp = Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp creates 0600; give the file normal permissions
        self._file = os.fdopen(fd, "wb")

    @property
    def closed(self) -> bool:
        return self._file.closed

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._file.tell()

    def write(self, data: bytes) -> int:
        return self._guarded(self._file.write, data)

    def flush(self) -> None:
        self._guarded(self._file.flush)

    def close(self) -> None:
        if self._file.closed:
            return
        try:
            self._file.flush()
            os.fsync(self._file.fileno())  # on disk before it replaces the old content
            self._file.close()
        except BaseException:
            self._abandon()
            raise
        if self._complete is not None and not self._complete(self._tmp):
            self._abandon()
            raise OSError(errno.EIO, f"refusing to replace {self.path} with incomplete content")
        os.replace(self._tmp, self.path)

    def _guarded(self, call: Any, *args: Any) -> Any:
        try:
            return call(*args)
        except BaseException:
            # pyarrow does not close a stream whose write failed: clean up here
            self._abandon()
            raise

    def _abandon(self) -> None:
        try:
            self._file.close()
        except OSError:
            pass  # the buffered bytes that cannot be written are dropped with the file
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.close()
        elif not self._file.closed:
            self._abandon()


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object written with ``write_atomic``; None where the file is missing, unreadable
    or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_atomic(path: Path, text: str) -> None:
    """Write a text file so that readers see either the old content or the complete new one."""
    with AtomicFile(path) as handle:
        handle.write(text.encode())


def remove_partial_files(directory: Path) -> None:
    """Delete the temporary files of writes that a killed process never finished."""
    for partial in directory.rglob(f".*{PARTIAL_SUFFIX}"):
        partial.unlink(missing_ok=True)
