"""Where the seconds of one ``rlplat train`` command go: its stages, one after another.

``imports`` runs from the interpreter's start (the process's start time, so Python's own start
and the hash-seed restart count) until the command's modules are loaded; ``validation`` builds
the env and the RLlib config; ``ray_start`` starts the embedded Ray or joins the cluster (a
cluster is joined before validation, which plans on its nodes); ``trial_start`` lasts until the
first trial's first training iteration begins (Tune, the trial's process, the algorithm's
build); ``training`` until the last result arrives; ``shutdown`` until the timings are written
(final checkpoints, the summary, a search's report, ``export.at_end``, Ray's shutdown). The
stages add up to the command's time up to that point; the interpreter's exit follows.
"""

from __future__ import annotations

import time
from typing import Any

from rlplat.util.process import started_at

STAGES = (
    "imports", "validation", "ray_start", "trial_start", "training", "rescore", "shutdown"
)


class StageClock:
    """Wall-clock seconds per stage of one command; ``lap(stage)`` ends ``stage`` now."""

    def __init__(self, started: float | None = None) -> None:
        self.started = started if started is not None else (started_at() or time.time())
        self._last = self.started
        self.seconds: dict[str, float] = {}

    def lap(self, stage: str, at: float | None = None) -> None:
        """End ``stage`` at ``at`` (now by default); it began where the previous stage ended."""
        now = time.time() if at is None else at
        self.seconds[stage] = self.seconds.get(stage, 0.0) + max(now - self._last, 0.0)
        self._last = max(now, self._last)

    def record(self) -> dict[str, Any]:
        """The stages in order (missing ones 0) and their total, rounded."""
        stages = {stage: round(self.seconds.get(stage, 0.0), 2) for stage in STAGES}
        return {"stages_s": stages, "total_s": round(self._last - self.started, 2)}
