"""Standard output that outlives its reader; standard error without a library's noise."""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import TextIO


class StdoutOrStderr(io.TextIOBase):
    """``sys.stdout`` that moves to stderr once its reader is gone.

    ``rlplat train exp.yaml | tee log``: a Ctrl-C in the terminal stops ``tee`` as well, and
    every later line rlplat writes would raise BrokenPipeError in the middle of the graceful
    stop, losing the final checkpoint. Here the rest goes to stderr (still the terminal), so
    the run stops as it should and the ``--resume`` hint is shown."""

    def __init__(self, stdout: TextIO, stderr: TextIO):
        super().__init__()
        self._stream = stdout
        self._stderr = stderr

    def write(self, text: str) -> int:
        try:
            written = self._stream.write(text)
            self._stream.flush()  # a closed pipe shows on flushing
            return written
        except BrokenPipeError:
            self._to_stderr()
            return self._stream.write(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_stderr()

    def _to_stderr(self) -> None:
        # What the dead pipe still buffers is flushed into /dev/null at exit, not reported.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())
        os.close(devnull)
        self._stream = self._stderr

    def isatty(self) -> bool:
        return self._stream.isatty()

    def fileno(self) -> int:
        return self._stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._stream.encoding


@contextlib.contextmanager
def stderr_without(pattern: re.Pattern[str]) -> Iterator[None]:
    """What the process writes to its standard error inside the block (C++ libraries included:
    file descriptor 2 itself is swapped) held back, then written out without the lines that
    match ``pattern``."""
    sys.stderr.flush()
    kept = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(kept, 2)
            os.close(kept)
            held.seek(0)
            for line in held:
                if not pattern.search(line.decode(errors="replace")):
                    os.write(2, line)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """What the process writes to its standard output inside the block goes to standard error
    (file descriptor 1 itself is swapped: pybullet prints its build time from C as it loads), so
    that a ``--json`` answer printed after the block is the only thing on stdout."""
    sys.stdout.flush()
    kept = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(kept, 1)
        os.close(kept)
