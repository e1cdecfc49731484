"""Hyperparameter search for real: --dry-run, searches on the session's Ray, PBT, resume."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlplat.callbacks.search_report import BEST_YAML, RESULTS_CSV
from rlplat.experiment.load import load_experiment
from rlplat.metrics import ENV_STEPS
from tests.helpers import (
    TINY_SEARCH,
    assert_one_branch,
    conditional_search,
    read_results,
    read_scalars,
    replace,
)

# --- the resolved file ---------------------------------------------------------------------


def test_dry_run_shows_the_spaces_as_written(search_file, capsys):
    from rlplat.cli import main

    main(["train", str(search_file()), "--dry-run"])
    resolved = capsys.readouterr().out
    assert "loguniform:\n    - 0.0001\n    - 0.01" in resolved
    assert "length:\n      grid:\n      - 4\n      - 7" in resolved
    assert "num_samples: 2" in resolved


# --- real searches -----------------------------------------------------------------------------


ITERATIONS = 5  # of each trial of the search below


@pytest.fixture(scope="module")
def tiny_search(ray_session, mlflow_server, tmp_path_factory) -> SimpleNamespace:
    """A grid over the corridor length x 2 samples of lr: four trials of five iterations, tracked
    by MLflow and W&B. ``rlplat train`` is killed (SIGKILL) once a trial has finished while
    another is mid-way, and ``--resume`` finishes the run: the tests below read what the
    resumed search wrote. Tune's saved state may hold "STOP once this save is written" for a
    trial whose save was in flight; the resumed run must not apply it to that trial's first
    checkpoint (the state below holds one for an unfinished trial).

    Returns summary.json's trials as objects, the run directory, the MLflow experiment and the
    killed run's state."""
    tmp = tmp_path_factory.mktemp("search")
    experiment = f"killed-search-{tmp.name}"
    text = (
        replace(TINY_SEARCH, "iterations: 3", f"iterations: {ITERATIONS}")
        .replace("keep: 1", "keep: 2")
        .replace("OUTPUT", str(tmp / "out"))
    ) + (
        f"loggers:\n  mlflow: {{tracking_uri: '{mlflow_server}', experiment: {experiment}}}\n"
        "  wandb: {project: rlplat-tests, mode: offline}\n"
    )
    path = tmp / "exp.yaml"
    path.write_text(text)
    command = [sys.executable, "-m", "rlplat.cli", "train", "--address", ray_session]
    # Tune saves which checkpoint each trial resumes from every ~10 s by default; every second
    # here, so that the trials already running have a checkpoint to continue from.
    process = subprocess.Popen(
        [*command, str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, "TUNE_GLOBAL_CHECKPOINT_S": "1"},
    )
    run_dir = None
    finished = 0
    for line in process.stdout:
        if line.startswith("Run directory:"):
            run_dir = Path(line.split(":", 1)[1].strip())
        if line.startswith("trial_") and line.rstrip().endswith("finished"):
            finished += 1
        elif finished and line.startswith("trial_"):
            os.killpg(process.pid, signal.SIGKILL)  # a trial is done, another is mid-way
            break
    process.wait()
    assert run_dir is not None
    killed = {"code": process.returncode, "results_csv": (run_dir / RESULTS_CSV).exists()}
    [state_file] = run_dir.glob("experiment_state-*.json")
    state = json.loads(state_file.read_text())
    trials = [json.loads(trial) for trial, _ in state["trial_data"]]
    unfinished = [trial["trial_id"] for trial in trials if trial["status"] != "TERMINATED"]
    state["runner_data"]["_cached_trial_decisions"] = {unfinished[0]: "STOP"}
    state_file.write_text(json.dumps(state))

    done = subprocess.run(
        [*command, "--resume", str(run_dir)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    return SimpleNamespace(
        run_dir=str(run_dir),
        trials=[SimpleNamespace(**trial) for trial in summary["trials"]],
        mlflow=(mlflow_server, experiment),
        killed=killed,
    )


def test_search_runs_every_trial_with_its_own_values(tiny_search):
    assert len(tiny_search.trials) == 4
    assert all(t.status == "finished" and t.iterations == ITERATIONS for t in tiny_search.trials)
    for trial in tiny_search.trials:
        checkpoint = load_experiment(Path(trial.best_checkpoint) / "experiment.yaml")
        params = json.loads((Path(trial.path) / "params.json").read_text())
        assert checkpoint.experiment.env.kwargs == params["env"]["kwargs"]
        assert checkpoint.experiment.training["lr"] == params["training"]["lr"]
        assert checkpoint.experiment.tune is None, "a trial's experiment is a single run"
        learner = read_results(Path(trial.path))[-1]["learners"]["default_policy"]
        assert learner["default_optimizer_learning_rate"] == pytest.approx(
            params["training"]["lr"]
        ), "RLlib trained with the sampled learning rate"
    lengths = sorted(
        json.loads((Path(t.path) / "params.json").read_text())["env"]["kwargs"]["length"]
        for t in tiny_search.trials
    )
    assert lengths == [4, 4, 7, 7], "the grid is crossed with num_samples"


def test_searched_env_kwargs_shape_the_env(tiny_search):
    """A 4-cell corridor's episodes are shorter than a 7-cell one's under the same policy."""
    by_length: dict[int, list[float]] = {}
    for trial in tiny_search.trials:
        params = json.loads((Path(trial.path) / "params.json").read_text())
        first = read_results(Path(trial.path))[0]
        by_length.setdefault(params["env"]["kwargs"]["length"], []).append(
            first["window"]["episode_len_mean"]
        )
    assert max(by_length[4]) < min(by_length[7])


def test_results_csv_ranks_every_trial(tiny_search):
    run_dir = Path(tiny_search.run_dir)
    with open(run_dir / RESULTS_CSV) as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["rank"]) for r in rows] == [1, 2, 3, 4]
    finals = [float(r["episode_return_mean_final"]) for r in rows]
    assert finals == sorted(finals, reverse=True)
    assert {r["stop_reason"] for r in rows} == {"stop.iterations"}
    assert {r["trial"] for r in rows} == {t.name for t in tiny_search.trials}
    for row in rows:
        assert 1e-4 <= float(row["training.lr"]) <= 1e-2
        assert row["env.kwargs.length"] in ("4", "7")
        assert Path(row["best_checkpoint"]).is_dir()


def test_best_yaml_is_the_winner_as_a_single_trial(tiny_search):
    run_dir = Path(tiny_search.run_dir)
    with open(run_dir / RESULTS_CSV) as handle:
        winner = next(csv.DictReader(handle))
    best = load_experiment(run_dir / BEST_YAML)
    assert best.spaces == [] and best.experiment.tune is None
    assert best.experiment.name == "tiny-search-best"
    assert best.experiment.training["lr"] == pytest.approx(float(winner["training.lr"]))
    assert best.experiment.env.kwargs["length"] == int(winner["env.kwargs.length"])
    assert best.experiment.seed == 3


def test_hparams_compare_trials_in_tensorboard(tiny_search):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    for trial in tiny_search.trials:
        events = EventAccumulator(trial.path)
        events.Reload()
        content = events.PluginTagToContent("hparams")
        session = plugin_data_pb2.HParamsPluginData.FromString(
            content["_hparams_/session_start_info"]
        ).session_start_info
        params = json.loads((Path(trial.path) / "params.json").read_text())
        assert session.hparams["training.lr"].number_value == pytest.approx(
            params["training"]["lr"]
        )
        length = params["env"]["kwargs"]["length"]
        assert session.hparams["env.kwargs.length"].number_value == length
        assert "episode/return_mean" in read_scalars(Path(trial.path)), "the metric HParams shows"


PBT = """name: tiny-pbt
algorithm: PPO
seed: 0
env:
  id: CartPole-v1
training:
  lr: {loguniform: [1.0e-5, 3.0e-3]}
  train_batch_size_per_learner: 500
  minibatch_size: 100
  num_epochs: 1
resources:
  env_runners: {count: 0}
stop:
  iterations: 4
checkpoint: {every: 2, keep: 2}
evaluation: {evaluation_interval: null}   # PBT ranks by the training return
tune:
  num_samples: 2
  scheduler:
    pbt:
      perturbation_interval: 2
      quantile_fraction: 0.5
      resample_probability: 1.0
      synch: true   # decide once both trials reached the interval: no race on who is first
output_dir: OUTPUT
"""


def test_pbt_exploits_and_changes_the_trials_config(ray_session, write_yaml, tmp_path):
    """Two trials: the worse one copies the better one's weights and draws a new lr."""
    from rich.console import Console

    from rlplat.run.launch import train

    path = write_yaml(PBT.replace("OUTPUT", str(tmp_path / "out")))
    console = Console(record=True, width=300)
    summary = train(load_experiment(path), console=console)
    output = console.export_text()
    assert "PBT exploit" in output, output[-3000:]
    log = (Path(summary.run_dir) / "pbt_global.txt").read_text().splitlines()
    assert log, "Tune's own PBT log records the exploit"
    changed = []
    for trial in summary.trials:
        rates = [
            r["learners"]["default_policy"]["default_optimizer_learning_rate"]
            for r in read_results(Path(trial.path))
        ]
        changed.append(len(set(rates)) > 1)
    assert any(changed), "an exploited trial trains on with its new learning rate"


def test_killed_search_resumes_with_every_trial_accounted_for(tiny_search):
    """The search of ``tiny_search`` was killed halfway and resumed: every trial finished once,
    none started over, checkpoint.keep held, and its MLflow and W&B runs are the same ones,
    each step logged once."""
    assert tiny_search.killed == {"code": -signal.SIGKILL, "results_csv": False}
    run_dir = Path(tiny_search.run_dir)
    with open(run_dir / RESULTS_CSV) as handle:
        assert len(list(csv.DictReader(handle))) == 4
    for trial in tiny_search.trials:
        iterations = [r["training_iteration"] for r in read_results(Path(trial.path))]
        assert iterations.count(1) == 1, "no trial started over from scratch"
        assert iterations[-1] == ITERATIONS
        kept = list(Path(trial.path).glob("checkpoint_*"))
        assert len(kept) <= 3, "checkpoint.keep (2) held: the two best and the newest"
    uri, experiment = tiny_search.mlflow
    assert_tracked_once(uri, experiment, run_dir, [vars(t) for t in tiny_search.trials])


def assert_tracked_once(uri: str, experiment: str, run_dir: Path, trials: list[dict]) -> None:
    """One MLflow run per trial under the search's parent, with its searched values as
    parameters and each iteration at its env step once; one W&B run per trial, in one group."""
    from mlflow.tracking import MlflowClient

    from tests.e2e.helpers import wandb_offline_runs

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    [parent] = [run for run in runs if "mlflow.parentRunId" not in run.data.tags]
    children = {run.data.tags["rlplat.trial_dir"]: run for run in runs if run is not parent}
    assert sorted(children) == sorted(trial["path"] for trial in trials)
    assert all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children.values())
    assert parent.info.status == "FINISHED" and parent.info.run_name == run_dir.name
    assert "summary.json" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    for path, child in children.items():
        assert child.info.status == "FINISHED"
        assert child.data.params["env.kwargs.length"] in ("4", "7"), child.data.params
        assert float(child.data.params["training.lr"]) > 0
        iterations = client.get_metric_history(child.info.run_id, "perf/iteration")
        logged = sorted((point.step, point.value) for point in iterations)
        assert logged == [(step, i + 1) for i, step in enumerate(env_steps(path))], logged
        assert client.get_metric_history(child.info.run_id, "episode/return_mean")

    wandb_runs = {run["name"]: run for run in wandb_offline_runs(run_dir).values()}
    search_run = wandb_runs.pop(run_dir.name)  # the group's own run, with summary.json
    assert search_run["group"] == run_dir.name and not search_run["steps"]
    assert sorted(wandb_runs) == sorted(Path(path).name for path in children)
    for path in children:
        run = wandb_runs[Path(path).name]
        assert run["group"] == run_dir.name and run["config"]["env.kwargs.length"] in (4, 7)
        # An offline run killed mid-write may lose its last rows; none is written twice.
        steps = run["steps"]
        assert steps == sorted(set(steps)) and steps[-1] == env_steps(path)[-1], steps


def env_steps(trial_dir: str) -> list[int]:
    return [result[ENV_STEPS] for result in read_results(Path(trial_dir))]


COMBINATIONS = {
    # id: tune section lines (the spaces are TINY_SEARCH's, with the grid made a choice); optuna
    # with the median stopping rule: test_conditional_search_trains_each_trial_with_...
    "hyperopt + hyperband": "searcher: hyperopt\n  scheduler: hyperband",
    "bohb": "searcher: bohb",
    # One perturbation (at iteration 2 of 3): each restarts a trial in a new actor.
    "random + pb2": "scheduler: {pb2: {perturbation_interval: 2}}",
}


@pytest.mark.parametrize("case", COMBINATIONS)
def test_each_searcher_and_scheduler_runs_a_search(case, ray_session, write_yaml, tmp_path):
    """Every searcher and scheduler rlplat offers drives a real (two-trial) search to its end."""
    from rich.console import Console

    from rlplat.run.launch import train

    text = replace(TINY_SEARCH, "{grid: [4, 7]}", "{randint: [4, 8]}")
    text = replace(text, "num_samples: 2", "num_samples: 2\n  " + COMBINATIONS[case])
    path = write_yaml(text.replace("OUTPUT", str(tmp_path / "out")))
    summary = train(load_experiment(path), console=Console(record=True, width=200))
    assert len(summary.trials) == 2
    assert all(t.status == "finished" and t.best_checkpoint for t in summary.trials)
    assert (Path(summary.run_dir) / BEST_YAML).is_file()


def _optimizer_in_checkpoint(checkpoint: Path) -> dict:
    """The learner's optimizer as the checkpoint holds it: its settings (param group)."""
    import pickle

    state = pickle.loads((checkpoint / "learner_group/learner/state.pkl").read_bytes())
    [optimizer] = state["optimizer"].values()
    return optimizer["state"]["param_groups"][0]


def test_conditional_search_trains_each_trial_with_the_optimizer_it_drew(
    ray_session, write_yaml, tmp_path
):
    """A choice between Adam (with its lr range) and SGD (with lr and momentum ranges), searched
    by optuna under the median stopping rule: each trial's learner steps the optimizer of its
    branch with the drawn values, and results.csv and best.yaml record the branch. (HyperOpt's
    suggestions of the same choice: tests/unit/test_search.py.)"""
    from rich.console import Console

    from rlplat.run.launch import train

    text = replace(conditional_search("optuna", 4), "iterations: 3", "iterations: 1")
    median = "searcher: optuna\n  scheduler: {median: {grace_period: 1}}"
    text = replace(text, "searcher: optuna", median)
    path = write_yaml(text.replace("OUTPUT", str(tmp_path / "out")))
    summary = train(load_experiment(path), console=Console(record=True, width=200))
    assert len(summary.trials) == 4
    drawn = {}
    for trial in summary.trials:
        assert trial.status == "finished", trial.error
        checkpoint = Path(trial.best_checkpoint)
        optimizer = load_experiment(checkpoint / "experiment.yaml").experiment.training["optimizer"]
        group = _optimizer_in_checkpoint(checkpoint)
        assert group["lr"] == pytest.approx(optimizer["lr"]), "the branch's own learning rate"
        assert_one_branch(optimizer)
        if optimizer["type"] == "sgd":
            assert group["momentum"] == pytest.approx(optimizer["momentum"]), "SGD stepped"
        else:
            assert "betas" in group and "momentum" not in group, "Adam stepped"
        drawn[trial.name] = optimizer
    assert {o["type"] for o in drawn.values()} == {"adam", "sgd"}, drawn

    run_dir = Path(summary.run_dir)
    with open(run_dir / RESULTS_CSV) as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        optimizer = drawn[row["trial"]]
        assert row["training.optimizer.type"] == optimizer["type"]
        assert float(row["training.optimizer.lr"]) == pytest.approx(optimizer["lr"])
        assert row["training.optimizer.momentum"] == str(optimizer.get("momentum", ""))
    best = load_experiment(run_dir / BEST_YAML).experiment
    assert best.training["optimizer"] == drawn[rows[0]["trial"]]
