"""New names beside existing ones: ``stem``, ``stem-1``, ``stem-2``, ... never an existing one;
and directories published whole under such a name (:func:`publish_dir`)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import glob
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def new_path(
    parent: Path,
    stem: str,
    suffix: str = "",
    *,
    make_dir: bool = False,
    claim: Callable[[str], bool] | None = None,
) -> Path:
    """The first of ``parent/stem<suffix>``, ``parent/stem-1<suffix>``, ... that does not exist
    (and, with ``claim``, whose name ``claim`` grants: a name taken elsewhere is skipped too).

    With ``make_dir`` the directory is created here: ``mkdir`` without exist_ok claims the name,
    so two processes never get the same one. A file's writer must create it exclusively itself
    (``os.link``, ``open(..., "x")``). FileExistsError when 10,000 names are taken.
    """
    parent.mkdir(parents=True, exist_ok=True)
    for name in _names(stem, suffix):
        candidate = parent / name
        if not make_dir:
            if not candidate.exists():
                return candidate
            continue
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        if claim is None or claim(candidate.name):
            return candidate
        candidate.rmdir()
    raise FileExistsError(f"no free name for {stem}{suffix} in {parent}")


def _names(stem: str, suffix: str = "") -> Iterator[str]:
    """``stem<suffix>``, ``stem-1<suffix>``, ... (10,000 of them)."""
    yield f"{stem}{suffix}"
    for n in range(1, 10_000):
        yield f"{stem}-{n}{suffix}"


# A draft's name: ``.<name>.partial-<pid>@<host>-<random>``; the pid and host tell whether the
# process writing it is gone, so that the next publish beside it removes what it left.
DRAFT = re.compile(r"\.(?P<name>.+)\.partial-(?:(?P<pid>\d+)@(?P<host>[^-]+)-)?[^.]*")
ABANDONED_AFTER_S = 86_400  # a draft of another machine's (or unnamed) process: a day old
RENAME_NOREPLACE = 1  # renameat2's flag: fail where the destination exists


class DirectoryDraft:
    """A directory being written under a new hidden sibling name, then published whole under a
    free name; see :func:`publish_dir`."""

    def __init__(self, out: Path, next_free: bool):
        self.out = out
        self.next_free = next_free
        self._claimed: Path | None = None
        out.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned_drafts(out)
        prefix = f".{out.name}.partial-{os.getpid()}@{_host()}-"
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=out.parent))
        self.path.chmod(0o755)  # mkdtemp's 0o700 is for the half-written state only

    def claim(self) -> Path:
        """The name the directory will have, claimed now (an empty directory) if it is not yet:
        ``out``, or with ``next_free`` the first free of ``out``, ``out-1``, ..."""
        if self._claimed is None:
            if self.next_free:
                self._claimed = new_path(self.out.parent, self.out.name, make_dir=True)
            else:
                self.out.mkdir()  # FileExistsError: never over what exists
                self._claimed = self.out
        return self._claimed

    @property
    def destination(self) -> Path:
        """Where the directory was published (claimed)."""
        if self._claimed is None:
            raise RuntimeError(f"{self.out} was not published")
        return self._claimed

    def __enter__(self) -> DirectoryDraft:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            if exc_type is None:
                self._publish()
        except BaseException:
            self._unclaim()
            raise
        finally:
            shutil.rmtree(self.path, ignore_errors=True)
        if exc_type is not None:
            self._unclaim()

    def _publish(self) -> None:
        """The draft renamed onto its claimed name, or onto the first free one: never over
        what exists, and no empty directory is left under the name if this process dies."""
        if self._claimed is not None:
            os.replace(self.path, self._claimed)  # onto the empty directory claimed
            return
        names = _names(self.out.name) if self.next_free else [self.out.name]
        for name in names:
            candidate = self.out.parent / name
            if candidate.exists():
                continue
            try:
                _rename_no_replace(self.path, candidate)
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):  # taken since the check
                    continue
                raise
            self._claimed = candidate
            return
        raise FileExistsError(f"no free name for {self.out}")

    def _unclaim(self) -> None:
        """Give back a claimed name that nothing was published under."""
        if self._claimed is not None:
            with contextlib.suppress(OSError):
                self._claimed.rmdir()
            self._claimed = None


def _rename_no_replace(source: Path, target: Path) -> None:
    """Rename ``source`` onto ``target``, failing with FileExistsError where it exists (Linux's
    renameat2; elsewhere a plain rename after the caller's check: a directory is then only ever
    renamed over an empty one)."""
    renameat2 = getattr(_libc(), "renameat2", None) if sys.platform == "linux" else None
    if renameat2 is None:
        os.rename(source, target)
        return
    at_cwd = -100  # AT_FDCWD
    result = renameat2(at_cwd, os.fsencode(source), at_cwd, os.fsencode(target), RENAME_NOREPLACE)
    if result != 0:
        code = ctypes.get_errno()
        if code in (errno.ENOSYS, errno.EINVAL):  # a filesystem without the flag
            os.rename(source, target)
            return
        raise OSError(code, os.strerror(code), str(target))


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _host() -> str:
    return socket.gethostname().replace("-", "_").replace(".", "_") or "host"


def _remove_abandoned_drafts(out: Path) -> None:
    """Drafts of ``out`` whose writer died (a killed export): this machine's by their process
    id; others' and unnamed ones once they are a day old."""
    host = _host()
    for sibling in out.parent.glob(f".{glob.escape(out.name)}.partial-*"):
        match = DRAFT.fullmatch(sibling.name)
        if match is None or match.group("name") != out.name or not sibling.is_dir():
            continue
        if match.group("pid") and match.group("host") == host:
            abandoned = not _alive(int(match.group("pid")))
        else:
            try:
                abandoned = time.time() - sibling.stat().st_mtime > ABANDONED_AFTER_S
            except OSError:
                continue
        if abandoned:
            shutil.rmtree(sibling, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    return True


def publish_dir(out: Path, *, next_free: bool = True) -> DirectoryDraft:
    """Write a directory whole, then publish it atomically without overwriting what exists.

    Write into the returned draft's ``path`` (a new, hidden sibling of ``out``) inside a
    ``with`` block. When the block ends without an error, the draft is renamed in one step onto
    ``out`` (or with ``next_free`` the first free sibling name), never over what exists: readers
    see the whole directory or none. When the block raises, the draft and any name claimed for it
    are removed: nothing appears; drafts a killed process left are removed by the next publish
    beside them. Call ``claim()`` inside the block where the content must name its own directory
    (it holds the name as an empty directory until then).
    """
    return DirectoryDraft(out, next_free)
