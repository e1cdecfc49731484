"""Progress in a Jupyter notebook as one output that updates in place.

Printed to stdout, every progress line of ``rlplat.train()`` in a notebook is appended to the
cell's stream; the front end then shows a long scroll of lines (with Rich's Jupyter mode, one
HTML output per line). ``UpdatingDisplay`` is a text stream that keeps what was written and shows
it as a single display output, replaced each time a line arrives.
"""

from __future__ import annotations

import io
import sys
from typing import Any


def in_jupyter_kernel() -> bool:
    """Whether this process is a Jupyter kernel (IPython's terminal shell is not)."""
    if "IPython" not in sys.modules:  # never import IPython where nothing did
        return False
    from IPython import get_ipython  # noqa: PLC0415 - only in a process that loaded IPython

    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class UpdatingDisplay(io.TextIOBase):
    """A writable text stream shown as one display output of the running cell."""

    def __init__(self) -> None:
        self._text = ""
        self._handle: Any = None

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        from IPython.display import display  # noqa: PLC0415

        self._text += text
        bundle = {"text/plain": self._text}
        if self._handle is None:
            self._handle = display(bundle, raw=True, display_id=True)
        else:
            self._handle.update(bundle, raw=True)
        return len(text)

    @property
    def text(self) -> str:
        return self._text


def progress_stream() -> UpdatingDisplay | None:
    """A stream for a notebook's progress display, or None (stdout) outside a kernel."""
    return UpdatingDisplay() if in_jupyter_kernel() else None
