"""A restarted trial's history cut back to the checkpoint it continues from.

A trial killed some iterations after its last checkpoint has already logged those iterations;
resumed, it trains them again. Tune appends to ``result.json`` and ``progress.csv`` and TensorBoard
to its event files, so the curves would show those iterations twice and TensorBoard's x-axis
would jump back. Before a trial (re)starts, everything it logged after its checkpoint (or, with no
checkpoint, everything) is removed. Each file is rewritten atomically, so a run killed while
trimming is trimmed again, correctly, when it is resumed next.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

from ray.tune import Callback
from ray.tune.logger import JsonLoggerCallback
from ray.tune.utils import flatten_dict
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.record_writer import RecordWriter

from rlplat.callbacks.observers import resume_point
from rlplat.checkpoints import RESULTS_JSON
from rlplat.metrics import ITERATION
from rlplat.prepare.run_spec import DRIVER_ENV
from rlplat.seams.tune import CSVLoggerHooks, RestoreHook
from rlplat.util.atomic import write_atomic

PROGRESS_CSV = "progress.csv"
EVENTS_GLOB = "events.out.tfevents.*"


def _iteration(row: dict[str, Any]) -> float | None:
    try:
        return float(row[ITERATION])
    except (KeyError, TypeError, ValueError):
        return None  # a line cut short when the run was killed


def trim_results(path: Path, iteration: int) -> None:
    """Keep the JSON lines of iterations up to ``iteration``."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        number = _iteration(row) if isinstance(row, dict) else None
        if number is not None and number <= iteration:
            kept.append(line + "\n")
    write_atomic(path, "".join(kept))


def trim_progress(path: Path, iteration: int) -> None:
    """Keep the header and the CSV rows of iterations up to ``iteration``."""
    if not path.is_file():
        return
    reader = csv.DictReader(io.StringIO(path.read_text(), newline=""))
    fields = reader.fieldnames or []
    rows = [row for row in reader if (n := _iteration(row)) is not None and n <= iteration]
    out = io.StringIO(newline="")
    if fields:
        writer = csv.DictWriter(out, fields)
        writer.writeheader()
        writer.writerows(rows)
    write_atomic(path, out.getvalue())


def trim_events(path: Path, env_steps: int) -> None:
    """Drop the summaries logged at x > ``env_steps`` from one TensorBoard event file."""
    records = list(RawEventFileLoader(str(path)).Load())
    kept = [r for r in records if not _after(Event.FromString(r), env_steps)]
    if len(kept) == len(records):
        return
    temporary = path.with_name(".trimming-" + path.name)
    writer = RecordWriter(str(temporary))
    for record in kept:
        writer.write(record)
    writer.close()
    os.replace(temporary, path)


def _after(event: Any, env_steps: int) -> bool:
    return event.HasField("summary") and event.step > env_steps


def trim_trial_history(trial_dir: Path, iteration: int, env_steps: int) -> None:
    """Remove what a trial logged after ``iteration`` (TensorBoard: after ``env_steps``)."""
    trim_results(trial_dir / RESULTS_JSON, iteration)
    trim_progress(trial_dir / PROGRESS_CSV, iteration)
    for events in sorted(trial_dir.glob(EVENTS_GLOB)):
        trim_events(events, env_steps)


def restored_point(trial: Any) -> tuple[int, int]:
    """The iteration and env steps of the checkpoint a (re)starting trial continues from."""
    point = resume_point(trial)
    return (point.iteration, point.env_steps) if point is not None else (0, 0)


class TrimHistoryOnRestart(Callback):
    """Trims a trial's history when it starts again from a checkpoint (``--resume``, or Tune
    retrying a failed trial). Listed before the loggers, which reopen the files afterwards.

    Not used with population-based schedulers: their trials restart from other trials'
    checkpoints, whose iterations are not this trial's history.
    """

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        # Tune logs into a staging directory (local_path) that it copies to the run directory
        # (path), and restores the files from there when a trial restarts: trim both.
        trial_dirs = {Path(trial.path), Path(trial.local_path)}
        if not any((d / RESULTS_JSON).is_file() for d in trial_dirs):
            return  # a new trial
        for trial_dir in trial_dirs:
            trim_trial_history(trial_dir, *restored_point(trial))


class _TrimWhatIsRestored(RestoreHook):
    """Tune's JSON and CSV loggers copy a restarted trial's file back from the run directory
    just before appending to it. A copy into the run directory that Tune started before
    ``TrimHistoryOnRestart`` ran can land after it and bring the cut lines back: trim the
    file the logger is about to append to."""

    TRIMS = {RESULTS_JSON: trim_results, PROGRESS_CSV: trim_progress}

    def restored_from_run_dir(self, file_name: str, trial: Any) -> None:
        if file_name in self.TRIMS:
            self.TRIMS[file_name](Path(trial.local_path, file_name), restored_point(trial)[0])


class ExperimentJsonLogger(JsonLoggerCallback):
    """Tune's result.json logger, whose ``params.json`` (the trial's experiment, which ``rlplat
    report`` and ``runs`` read) leaves out the driver's env that the trial's config carries to
    its actor (``rlplat.prepare.run_spec.trial_config``)."""

    def update_config(self, trial: Any, config: dict[str, Any]) -> None:
        super().update_config(trial, {k: v for k, v in config.items() if k != DRIVER_ENV})


class TrimmingJsonLogger(_TrimWhatIsRestored, ExperimentJsonLogger):
    """Tune's result.json logger, trimming a restarted trial's file first."""


class TrimmingCSVLogger(_TrimWhatIsRestored, CSVLoggerHooks):
    """Tune's progress.csv logger, trimming a restarted trial's file first, and keeping the file
    one table when the trial continues it: Tune appends a restarted trial's rows in the columns of
    its first new result, without a header, so a column new since the restart (a restored replay
    memory's size, say) made rows longer than the header and the file unreadable to pandas. The
    header is widened (the file rewritten) and every row keeps the header's columns."""

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        if self.appends_without_header(trial):
            unlogged = {k: v for k, v in result.items() if k != "config"}  # as Tune leaves out
            columns = list(flatten_dict(unlogged, delimiter="/"))
            path = Path(trial.local_path, PROGRESS_CSV)
            self.reopen(trial, path, lambda path: widen_progress(path, columns))
        super().log_trial_result(iteration, trial, result)


def widen_progress(path: Path, columns: list[str]) -> list[str]:
    """The columns of ``path``'s header followed by those of ``columns`` it lacks; the file is
    rewritten with that header where it grew (the older rows empty in the new columns)."""
    reader = csv.DictReader(io.StringIO(path.read_text(), newline=""))
    fields = list(reader.fieldnames or [])
    added = [column for column in columns if column not in fields]
    if added:
        out = io.StringIO(newline="")
        writer = csv.DictWriter(out, fields + added)
        writer.writeheader()
        writer.writerows(reader)
        write_atomic(path, out.getvalue())
    return fields + added
