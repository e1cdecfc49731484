"""New names beside existing ones: ``stem``, ``stem-1``, ``stem-2``, ... never an existing one;
and directories published whole under such a name (:func:`publish_dir`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
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
    for n in range(10_000):
        candidate = parent / (f"{stem}{suffix}" if n == 0 else f"{stem}-{n}{suffix}")
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


class DirectoryDraft:
    """A directory being written under a new hidden sibling name (``.<name>.partial-<random>``),
    then published whole under a claimed name; see :func:`publish_dir`."""

    def __init__(self, out: Path, next_free: bool):
        self.out = out
        self.next_free = next_free
        self._claimed: Path | None = None
        out.parent.mkdir(parents=True, exist_ok=True)
        self.path = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
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
                os.replace(self.path, self.claim())  # onto the empty directory claimed
        except BaseException:
            self._unclaim()
            raise
        finally:
            shutil.rmtree(self.path, ignore_errors=True)
        if exc_type is not None:
            self._unclaim()

    def _unclaim(self) -> None:
        """Give back a claimed name that nothing was published under."""
        if self._claimed is not None:
            with contextlib.suppress(OSError):
                self._claimed.rmdir()
            self._claimed = None


def publish_dir(out: Path, *, next_free: bool = True) -> DirectoryDraft:
    """Write a directory whole, then publish it atomically without overwriting what exists.

    Write into the returned draft's ``path`` (a new, hidden sibling of ``out``) inside a
    ``with`` block. When the block ends without an error, the name is claimed
    (:meth:`DirectoryDraft.claim`: ``out``, or with ``next_free`` the next free sibling name) and
    the draft renamed onto it in one step: readers see the whole directory or none. When the block
    raises, the draft and any name claimed for it are removed: nothing appears. Call ``claim()``
    inside the block where the content must name its own directory.
    """
    return DirectoryDraft(out, next_free)
