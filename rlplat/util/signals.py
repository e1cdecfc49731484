"""Signal handlers that last as long as the stage that set them.

Tune installs its Ctrl-C handler for a run, and rlplat's ``GracefulStop`` one over it ("stopping
after the current iteration"); neither is taken back when the run ends, so a Ctrl-C during what
follows (re-scoring the checkpoints) printed the training's lines and stopped nothing.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STOPPING = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """The SIGINT and SIGTERM handlers as they were before the block, whatever it installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {number: signal.getsignal(number) for number in STOPPING}
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


class StopRequest:
    """The signal that asked a ``stopped_by_signals`` block to stop: None until one came.

    The handler raises KeyboardInterrupt at once, but Python drops an exception raised while a
    weakref or garbage-collection callback runs ("Exception ignored in ..."): a Ctrl-C that
    lands there is lost. A loop in the block calls ``raise_if_asked`` between its steps, so
    that the signal stops it all the same."""

    def __init__(self) -> None:
        self.signal: str | None = None

    def raise_if_asked(self) -> None:
        if self.signal is not None:
            raise KeyboardInterrupt(self.signal)


@contextmanager
def stopped_by_signals() -> Iterator[StopRequest]:
    """Within the block, Ctrl-C and SIGTERM raise KeyboardInterrupt (SIGTERM would otherwise
    end the process before it writes what it has), for the block to stop and keep its work."""
    request = StopRequest()

    def interrupt(number: int, _frame: Any) -> None:
        request.signal = signal.Signals(number).name
        raise KeyboardInterrupt(request.signal)

    with signal_handlers_kept():
        if threading.current_thread() is threading.main_thread():
            for number in STOPPING:
                signal.signal(number, interrupt)
        yield request
