"""When training began and ended, as the driver saw it, for ``rlplat train --timings``.

Tune pickles its callbacks (with their observers) with the run and ``--resume`` brings back those
copies, so the times are kept in this module (the driver's process), not on the observer: a
resumed run's restored observer records into the resuming command's window.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rlplat.callbacks.observers import Observer, TrialView


@dataclass
class TrainingWindow:
    """Unix seconds: when the first reported iteration began and when the last result came."""

    first_iteration_started: float | None = None
    last_result: float | None = None


_window = TrainingWindow()


def reset_training_window() -> None:
    """Forget the previous fit's times (one command runs one fit)."""
    global _window
    _window = TrainingWindow()


def training_window() -> TrainingWindow:
    """The times the ``TrainingClock`` callbacks noted in this process since the last reset."""
    return _window


class TrainingClock(Observer):
    """Notes the first iteration's start (its arrival less its own seconds) and the last result."""

    def trial_result(self, trial: TrialView, result: dict[str, Any]) -> None:
        now = time.time()
        if _window.first_iteration_started is None:
            _window.first_iteration_started = now - float(result.get("time_this_iter_s") or 0.0)
        _window.last_result = now
