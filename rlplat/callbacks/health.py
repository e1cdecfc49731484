"""The training-health diagnoses while a run trains (rlplat.health, docs/doctor.md): each trial's
results go through the rules as Tune reports them; a diagnosis that fires is said once per trial,
on the terminal and in the trial's TensorBoard file (Text tab, tag ``diagnoses/<rule>``, x = env
steps). ``summary.json`` and ``rlplat doctor`` replay the same rules over ``result.json``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape

from rlplat.algorithms.registry import default_settings, q_metrics_of, takes_rnd
from rlplat.callbacks.observers import KeepsConsole, Observer, TrialView
from rlplat.callbacks.tensorboard import TensorBoardWriter
from rlplat.health import Finding, Settings, TrialHealth
from rlplat.health import replay as replay_rules

DIAGNOSIS_TAG = "diagnoses"


def trial_settings(experiment: Mapping[str, Any]) -> Settings:
    """A trial's settings as the rules name them: its experiment over its algorithm's defaults,
    the metrics its algorithm declares as Q-value estimates, and whether it takes RND."""
    name = str(experiment.get("algorithm", ""))
    return Settings.of(experiment, default_settings(name), q_metrics_of(name), takes_rnd(name))


def replay(rows: Iterable[Mapping[str, Any]], experiment: Mapping[str, Any]) -> TrialHealth:
    """The rules over a trial's results with its experiment's settings (summary.json,
    ``rlplat runs``, ``rlplat doctor``: the same lines the run said while it trained)."""
    return replay_rules(rows, trial_settings(experiment))


def diagnosis_line(trial: str, finding: Finding) -> str:
    return (
        f"[yellow]diagnosis[/] {trial} ({finding.rule}): {escape(finding.message)} "
        f"[dim](diagnoses.off: {escape(f'[{finding.rule}]')} silences it)[/]"
    )


class TrainingDoctor(KeepsConsole, Observer):
    """Feeds each result to its trial's ``TrialHealth`` and says what fires."""

    def __init__(self, console: Console, tensorboard: TensorBoardWriter):
        self.console = console
        self.tensorboard = tensorboard
        self._trials: dict[str, TrialHealth] = {}

    def trial_started(self, trial: TrialView) -> None:
        self._trials[trial.name] = TrialHealth(trial_settings(trial.experiment))

    def trial_result(self, trial: TrialView, result: dict[str, Any]) -> None:
        health = self._trials.get(trial.name)
        if health is None:  # a trial restored without a start event
            health = self._trials[trial.name] = TrialHealth(trial_settings(trial.experiment))
        for finding in health.observe(result):
            self.console.print(diagnosis_line(trial.name, finding), highlight=False)
            self.tensorboard.add_text(
                trial, f"{DIAGNOSIS_TAG}/{finding.rule}", finding.message, finding.env_steps
            )
