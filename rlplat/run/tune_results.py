"""What Tune's results of a fit say of each trial, as the run's summary reads it (``TrialOutcome``).

Tune's saved record of the trials gives each one's status and config (population-based training
changes the config as the trial runs); its ``ResultGrid`` gives each one's last result and error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.tune import ExperimentAnalysis

from rlplat.experiment.load import trial_experiment
from rlplat.run.summary import TrialOutcome
from rlplat.seams.tune import failed_in_this_process


def tune_outcomes(grid: Any, run_dir: Path) -> list[TrialOutcome]:
    """Each trial of a finished ``Tuner.fit()`` (its ``ResultGrid``) in ``run_dir``."""
    trials = {Path(trial.path).name: trial for trial in _saved_trials(run_dir)}
    # The trials that failed in this process: the record above is older when the run
    # directory's disk failed, and so is the error report copied there.
    failed = failed_in_this_process(grid)
    outcomes = []
    for result in grid:
        path = Path(result.path)
        trial = trials.get(path.name)
        error = _report(result.error) if result.error is not None else None
        if error is None and path.name in failed:
            error = _staged_error(failed[path.name])
        outcomes.append(
            TrialOutcome(
                path=path,
                status=_status(trial.status if trial else None, error),
                last_result=result.metrics or {},
                experiment=trial_experiment(trial.config if trial else {}),
                error=error,
            )
        )
    return outcomes


def _report(error: BaseException) -> str:
    """The error as the summary reads it: its text, or its class where it has none."""
    return str(error) or type(error).__name__


def _saved_trials(run_dir: Path) -> list[Any]:
    """Tune's saved record of the trials; none when the run directory's disk kept it from being
    saved whole (the trials' own results then tell what happened)."""
    try:
        return list(ExperimentAnalysis(str(run_dir)).trials)
    except (ValueError, OSError):
        return []


def _status(tune_status: str | None, error: str | None) -> str:
    if error or tune_status == "ERROR":
        return "error"
    return "finished" if tune_status == "TERMINATED" else "not finished"


def _staged_error(trial: Any) -> str | None:
    """A failed trial's error report in Tune's local staging directory: the copy in the run
    directory is missing when that directory's disk was what failed."""
    try:
        return Path(trial.local_path, "error.txt").read_text() or None
    except OSError:
        return None
