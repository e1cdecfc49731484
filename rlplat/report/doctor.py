"""``rlplat doctor``: the training-health diagnoses (docs/doctor.md) over a run directory's
results, for any run, older ones (before diagnoses existed) included: the rules replayed over each
trial's ``result.json`` with the trial's own experiment."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from rlplat.callbacks.health import replay
from rlplat.checkpoints import read_results
from rlplat.health import Finding
from rlplat.report.runs import Trial, resolve_run, run_trials


@dataclass
class TrialDiagnoses:
    """One trial's diagnoses, and how much of it the rules saw."""

    trial: str
    results: int
    env_steps: int
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "trial": self.trial,
            "results": self.results,
            "env_steps": self.env_steps,
            "findings": [finding.to_json() for finding in self.findings],
        }


def trial_diagnoses(trial: Trial) -> TrialDiagnoses:
    """The rules over one trial's results, in the order it reported them."""
    rows = read_results(trial.path)
    health = replay(rows, trial.experiment)
    steps = int(health.trace.last.env_steps) if rows else 0
    return TrialDiagnoses(trial.name, len(rows), steps, health.findings)


def run_diagnoses(run_dir: Path) -> list[TrialDiagnoses]:
    return [trial_diagnoses(trial) for trial in run_trials(run_dir)]


@dataclass
class DoctorReport:
    run_dir: str
    trials: list[TrialDiagnoses]
    note: str | None = None  # which run an experiment directory stood for

    def to_json(self) -> dict[str, Any]:
        return {"run_dir": self.run_dir, "trials": [t.to_json() for t in self.trials]}


def doctor(path: Path) -> DoctorReport:
    """The diagnoses of the run ``path`` names (a run directory, or an experiment directory's
    newest run)."""
    run_dir, note = resolve_run(path)
    return DoctorReport(str(run_dir), run_diagnoses(run_dir), note)


def print_doctor(report: DoctorReport, console: Console) -> None:
    if report.note:
        console.print(report.note, highlight=False)
    if not report.trials:
        console.print(f"{report.run_dir}: no trial has reported a result yet.", highlight=False)
        return
    for trial in report.trials:
        head = f"{trial.trial} ({trial.results} results, {trial.env_steps:,} env steps)"
        if not trial.findings:
            console.print(f"{head}: no diagnosis", highlight=False)
            continue
        console.print(f"{head}:", highlight=False)
        for finding in trial.findings:
            console.print(
                f"  [yellow]{finding.rule}[/] at iteration {finding.iteration}: "
                f"{escape(finding.message)}",
                highlight=False,
            )
