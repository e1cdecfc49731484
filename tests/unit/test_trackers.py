"""Experiment trackers: what is refused before Ray, what a tracker run gets, and a tracker that
fails mid-run costing only itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from rlplat.callbacks.mlflow_tracker import mlflow_name
from rlplat.callbacks.observers import FINISHED, TrialView, TuneObservers
from rlplat.callbacks.trackers import TrackerObserver
from rlplat.callbacks.tracking import Tracker, flat_params
from rlplat.callbacks.wandb_tracker import check as check_wandb
from rlplat.errors import ConfigError
from rlplat.experiment.load import load_experiment
from rlplat.experiment.schema import WandbLogger

EXPERIMENT = """\
name: tracked
algorithm: PPO
env: {id: CartPole-v1}
stop: {iterations: 2}
"""


def test_an_unknown_logger_is_refused_with_a_suggestion(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT + "loggers:\n  mlfow: {tracking_uri: 'file:/tmp/x'}\n")
    with pytest.raises(ConfigError) as error:
        load_experiment(path)
    message = str(error.value)
    assert "loggers.mlfow" in message and "Did you mean 'mlflow'?" in message
    assert "csv, mlflow, tensorboard, wandb" in message


def test_wandb_online_needs_a_key_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with pytest.raises(ConfigError) as error:
        check_wandb(WandbLogger(project="p"), "exp.yaml:7")
    message = str(error.value)
    assert "WANDB_API_KEY" in message and "never in the experiment file" in message
    assert "loggers.wandb.mode=offline" in message
    check_wandb(WandbLogger(project="p", mode="offline"), "exp.yaml:7")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    check_wandb(WandbLogger(project="p"), "exp.yaml:7")
    (tmp_path / "netrc").write_text("machine api.wandb.ai login user password " + "y" * 40)
    monkeypatch.delenv("WANDB_API_KEY")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    check_wandb(WandbLogger(project="p"), "exp.yaml:7")


def test_parameters_are_the_experiment_flattened_to_dotted_keys():
    config = {"seed": 3, "training": {"lr": 1e-3, "model": {"fcnet_hiddens": [64, 64]}}, "x": {}}
    assert flat_params(config) == {
        "seed": 3,
        "training.lr": 1e-3,
        "training.model.fcnet_hiddens": [64, 64],
        "x": {},
    }


def test_metric_names_keep_tensorboards_tags_where_mlflow_allows():
    assert mlflow_name("policy_return/player_0") == "policy_return/player_0"
    assert mlflow_name("agent_return/robot#1") == "agent_return/robot_1"


def trial_at(path: Path) -> TrialView:
    return TrialView(name="trial_0", path=path / "trial_0", staging=path, experiment={})


class Recording(Tracker):
    """A tracker that keeps what it is sent, and fails on the steps in ``fail_at``."""

    def __init__(self, label: str, fail_at: tuple[int, ...] = ()):
        self.label = label
        self.fail_at = fail_at
        self.calls: list[int] = []
        self.steps: list[int] = []
        self.ended: list[str] = []

    def start(self, trial):
        return 0

    def log(self, trial, scalars, step):
        self.calls.append(step)
        if step in self.fail_at:
            raise ConnectionError(f"{self.label} is down")
        self.steps.append(step)

    def end(self, trial, status):
        self.ended.append(status)


def run_trial(tmp_path: Path, trackers: list[Tracker], steps: range) -> str:
    """A trial's results through the callback; what it printed."""
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    console = Console(record=True, width=300)
    observer = TrackerObserver(load_experiment(path).experiment, tmp_path, False, console)
    observer.trackers = list(trackers)
    trial = trial_at(tmp_path)
    observer.trial_started(trial)
    for iteration, step in enumerate(steps, start=1):
        result = {"num_env_steps_sampled_lifetime": step, "training_iteration": iteration}
        observer.trial_result(trial, result)
    observer.trial_ended(trial, FINISHED)
    return console.export_text()


def test_a_tracker_failing_mid_run_warns_once_and_the_run_goes_on(tmp_path):
    healthy, flaky = Recording("MLflow"), Recording("W&B", fail_at=(200, 300, 500))
    printed = run_trial(tmp_path, [healthy, flaky], range(100, 700, 100))
    assert healthy.steps == [100, 200, 300, 400, 500, 600] and healthy.ended == ["FINISHED"]
    assert flaky.steps == [100, 400, 600] and flaky.ended == ["FINISHED"], "kept: it recovered"
    assert printed.count("W&B failed (W&B is down)") == 1, printed
    assert "TensorBoard files and checkpoints are not affected" in printed


def test_a_tracker_failing_three_calls_in_a_row_is_not_called_again(tmp_path):
    healthy, down = Recording("MLflow"), Recording("W&B", fail_at=(200, 300, 400, 500))
    printed = run_trial(tmp_path, [healthy, down], range(100, 700, 100))
    assert down.calls == [100, 200, 300, 400] and down.ended == []
    assert healthy.steps == [100, 200, 300, 400, 500, 600] and healthy.ended == ["FINISHED"]
    assert printed.count("W&B failed") == 1, printed


def test_a_resumed_trial_sends_only_steps_the_tracker_lacks(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    observer = TrackerObserver(load_experiment(path).experiment, tmp_path, False, Console())
    tracker = Recording("MLflow")
    tracker.start = lambda trial: 200  # its run already holds steps up to 200
    observer.trackers = [tracker]
    trial = trial_at(tmp_path)
    observer.trial_started(trial)
    for steps in (100, 200, 300):  # the trial continues from a checkpoint at step 100
        observer.trial_result(trial, {"num_env_steps_sampled_lifetime": steps})
    assert tracker.steps == [300]


def test_tune_pickles_the_observer_without_its_connections(tmp_path):
    import pickle

    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT)
    observer = TrackerObserver(load_experiment(path).experiment, Path("/runs/x"), True, Console())
    observer.trackers = [Recording("MLflow")]
    restored = pickle.loads(pickle.dumps(TuneObservers([observer]))).observers[0]
    assert restored.trackers == [] and restored.run_dir == Path("/runs/x") and restored.grouped
