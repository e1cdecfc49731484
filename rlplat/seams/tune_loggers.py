"""Tune's JSON and CSV logger callbacks' private parts that rlplat's trimming loggers use.

rlplat cuts a restarted trial's ``result.json`` and ``progress.csv`` back to its checkpoint and
keeps ``progress.csv`` one table when a restarted trial brings new columns. Tune's loggers copy a
restarted trial's file back from the run directory in the private ``_restore_from_remote`` and
keep their open files and row writers in private dicts, with no public hook; they have to stay
Tune's own classes (subclasses), or Tune adds its default loggers beside them.
"""

from __future__ import annotations

import csv
from typing import IO, Any

from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

__all__ = ["CsvLoggerHooks", "JsonLoggerHooks"]


class _RestoreHook:
    """Logger mixin: Tune's ``LoggerCallback._restore_from_remote`` as ``restore_from_remote``."""

    def _restore_from_remote(self, file_name: str, trial: Any) -> None:
        self.restore_from_remote(file_name, trial)

    def restore_from_remote(self, file_name: str, trial: Any) -> None:
        """Copy a restarted trial's ``file_name`` from the run directory into its local staging
        directory, just before the logger appends to it (Tune's ``_restore_from_remote``)."""
        super()._restore_from_remote(file_name, trial)  # type: ignore[misc]


class JsonLoggerHooks(_RestoreHook, JsonLoggerCallback):
    """Tune's ``result.json`` logger whose copy of a restarted trial's file back from the run
    directory is ``restore_from_remote`` (Tune's private ``_restore_from_remote``), Tune's own
    until a subclass overrides it."""


class CsvLoggerHooks(_RestoreHook, CSVLoggerCallback):
    """Tune's ``progress.csv`` logger with ``restore_from_remote`` as ``JsonLoggerHooks`` has,
    and its per-trial state under public names: the open files (``_trial_files``), the row
    writers (``_trial_csv``, None until the trial's first result picks the columns), whether a
    trial continues a file it already wrote (``_trial_continue``: no header then) and the opening
    of a trial's file (``_setup_trial``). Tune's ``log_trial_result`` reads and fills them."""

    @property
    def progress_files(self) -> dict[Any, IO[str]]:
        """The open ``progress.csv`` of each trial set up (``_trial_files``)."""
        return self._trial_files

    @property
    def row_writers(self) -> dict[Any, csv.DictWriter | None]:
        """Each trial's row writer, None before its first result (``_trial_csv``)."""
        return self._trial_csv

    @property
    def continues_file(self) -> dict[Any, bool]:
        """Whether each trial appends to a file it already wrote (``_trial_continue``)."""
        return self._trial_continue

    def set_up_trial(self, trial: Any) -> None:
        """Open the trial's ``progress.csv`` for appending, restored from the run directory
        first (``_setup_trial``)."""
        self._setup_trial(trial)
