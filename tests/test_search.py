"""Hyperparameter search from YAML: spaces, checks before Ray, a real search, PBT, resume."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_config_errors import assert_rejected, replace
from test_train import read_results, read_scalars

from rlplat.callbacks.search_report import BEST_YAML, RESULTS_CSV, TrialRow, rank_rows, stop_reason
from rlplat.experiment.load import load_experiment
from rlplat.experiment.spaces import Space, find_spaces

TINY_SEARCH = """\
name: tiny-search
algorithm: PPO
seed: 3
env:
  factory: envs.corridor:Corridor
  kwargs:
    length: {grid: [4, 7]}
training:
  lr: {loguniform: [1.0e-4, 1.0e-2]}
  train_batch_size_per_learner: 128
  minibatch_size: 64
  num_epochs: 1
resources:
  env_runners: {count: 0}
stop:
  iterations: 3
checkpoint: {every: 1, keep: 1}
tune:
  num_samples: 2
output_dir: OUTPUT
"""


# A conditional choice: each trial's optimizer is Adam with its learning rate, or SGD with its
# learning rate and momentum.
OPTIMIZER_CHOICE = """\
  optimizer:
    choice:
      - {type: adam, lr: {loguniform: [1.0e-4, 1.0e-2]}}
      - {type: sgd, lr: {loguniform: [1.0e-3, 1.0e-1]}, momentum: {uniform: [0.5, 0.99]}}"""


@pytest.fixture
def search_file(write_yaml, tmp_path: Path):
    def _write(text: str = TINY_SEARCH) -> Path:
        return write_yaml(text.replace("OUTPUT", str(tmp_path / "out")))

    return _write


def _never(dotted: str) -> str:
    return "here"


# --- the YAML syntax -----------------------------------------------------------------------


def test_spaces_are_found_where_trials_may_vary_them():
    data = {
        "seed": {"grid": [0, 1]},
        "env": {"id": "CartPole-v1", "kwargs": {"length": {"randint": [3, 9]}}},
        "training": {"lr": {"loguniform": [1e-5, 1e-3]}, "model": {"x": {"choice": [1, 2]}}},
        "multi_agent": {"overrides": {"p": {"lr": {"uniform": [0.1, 0.2]}}}},
        "tune": {"scheduler": {"pbt": {"perturbation_interval": 2}}},
    }
    found = {space.dotted: space.kind for space in find_spaces(data, _never)}
    assert found == {
        "seed": "grid",
        "env.kwargs.length": "randint",
        "training.lr": "loguniform",
        "training.model.x": "choice",
        "multi_agent.overrides.p.lr": "uniform",
    }


def test_space_values_and_tune_domains():
    lr = Space(("training", "lr"), "loguniform", (1e-5, 1e-3))
    assert lr.representative() == 1e-5
    assert lr.bounds() == (1e-5, 1e-3)
    assert 1e-5 <= lr.to_tune().sample() <= 1e-3
    epochs = Space(("training", "num_epochs"), "randint", (2, 5))
    assert isinstance(epochs.to_tune().sample(), int)
    assert epochs.candidates() == [2, 5]
    batch = Space(("training", "minibatch_size"), "qrandint", (32, 256, 32))
    assert batch.to_tune().sample() % 32 == 0
    grid = Space(("seed",), "grid", (0, 1, 2))
    assert grid.to_tune() == {"grid_search": [0, 1, 2]}
    assert grid.bounds() is None


SPACE_ERRORS = {
    # id: (edit of TINY_SEARCH, fragments of the message)
    "low above high": (
        lambda t: replace(t, "[1.0e-4, 1.0e-2]", "[1.0e-2, 1.0e-4]"),
        ["exp.yaml:9", "'training.lr'", "loguniform needs low < high"],
    ),
    "loguniform from zero": (
        lambda t: replace(t, "[1.0e-4, 1.0e-2]", "[0, 1.0e-2]"),
        ["'training.lr'", "loguniform needs 0 < low"],
    ),
    "wrong arity": (
        lambda t: replace(t, "{loguniform: [1.0e-4, 1.0e-2]}", "{uniform: [1.0e-4]}"),
        ["uniform takes 2 numbers"],
    ),
    "randint of floats": (
        lambda t: replace(t, "{loguniform: [1.0e-4, 1.0e-2]}", "{randint: [0.5, 3]}"),
        ["randint takes integers"],
    ),
    "misspelt space": (
        lambda t: replace(t, "{loguniform:", "{logunifrom:"),
        ["'logunifrom' is not a search space", "Did you mean 'loguniform'?"],
    ),
    "space where trials cannot vary it": (
        lambda t: replace(t, "iterations: 3", "iterations: {grid: [2, 3]}"),
        ["'stop.iterations'", "a search space (grid) cannot stand here"],
    ),
    "a category RLlib would reject": (
        lambda t: replace(t, "num_epochs: 1", "num_epochs: {choice: [1, many]}"),
        ["'training.num_epochs'", "wrong type", "'many'"],
    ),
    "unknown searcher": (
        lambda t: replace(t, "num_samples: 2", "num_samples: 2\n  searcher: optuno"),
        ["'tune.searcher'", "unknown searcher 'optuno'", "Did you mean 'optuna'?"],
    ),
    "unknown scheduler": (
        lambda t: replace(t, "num_samples: 2", "num_samples: 2\n  scheduler: asah"),
        ["'tune.scheduler'", "unknown scheduler 'asah'", "Did you mean 'asha'?"],
    ),
    "grid with a sampling searcher": (
        lambda t: replace(t, "num_samples: 2", "num_samples: 2\n  searcher: optuna"),
        ["'env.kwargs.length'", "searcher optuna", "cannot enumerate a grid", "use choice"],
    ),
    "unknown scheduler option": (
        lambda t: replace(
            t, "num_samples: 2", "num_samples: 2\n  scheduler: {asha: {grace_periods: 1}}"
        ),
        ["'tune.scheduler.asha.grace_periods'", "Did you mean 'grace_period'?"],
    ),
    "option rlplat sets": (
        lambda t: replace(t, "num_samples: 2", "num_samples: 2\n  scheduler: {asha: {metric: x}}"),
        ["'tune.scheduler.asha.metric'", "set it with tune.metric"],
    ),
    "asha without a budget": (
        lambda t: replace(
            t, "num_samples: 2", "num_samples: 2\n  time_attr: env_steps\n  scheduler: asha"
        ),
        ["asha needs max_t", "stop.env_steps"],
    ),
    "pb2 over a category": (
        lambda t: replace(
            replace(t, "{grid: [4, 7]}", "{choice: [4, 7]}"),
            "num_samples: 2",
            "num_samples: 2\n  scheduler: {pb2: {perturbation_interval: 1}}",
        ),
        ["'env.kwargs.length'", "pb2 explores numeric ranges"],
    ),
    "conditional choice under bohb": (
        lambda t: replace(
            replace(t, "{grid: [4, 7]}", "5"),
            "num_samples: 2",
            "num_samples: 2\n  searcher: bohb",
        ).replace("  lr: {loguniform: [1.0e-4, 1.0e-2]}", OPTIMIZER_CHOICE),
        ["'training.optimizer'", "searcher bohb cannot sample a conditional choice", "hyperopt"],
    ),
    "conditional choice under pbt": (
        lambda t: replace(
            replace(t, "{grid: [4, 7]}", "5"), "num_samples: 2", "num_samples: 2\n  scheduler: pbt"
        ).replace("  lr: {loguniform: [1.0e-4, 1.0e-2]}", OPTIMIZER_CHOICE),
        ["'training.optimizer'", "pbt mutates each hyperparameter on its own", "branches"],
    ),
    "grid inside a branch": (
        lambda t: replace(
            t,
            "  lr: {loguniform: [1.0e-4, 1.0e-2]}",
            OPTIMIZER_CHOICE.replace("{uniform:", "{grid:"),
        ),
        ["'training.optimizer'", "branch 2, key 'momentum'", "a grid cannot stand inside a choice"],
    ),
    "choice mixing mappings and values": (
        lambda t: replace(t, "{loguniform: [1.0e-4, 1.0e-2]}", "{choice: [0.001, {type: sgd}]}"),
        ["'training.lr'", "a conditional choice takes only mappings"],
    ),
    "pbt with nothing to mutate": (
        lambda t: replace(
            replace(replace(t, "{grid: [4, 7]}", "5"), "{loguniform: [1.0e-4, 1.0e-2]}", "0.001"),
            "num_samples: 2",
            "num_samples: 2\n  scheduler: pbt",
        ),
        ["pbt mutates the experiment's search spaces, and there are none"],
    ),
}


@pytest.mark.parametrize("case", list(SPACE_ERRORS))
def test_invalid_search_is_rejected_before_ray(case, search_file, capsys, tmp_path):
    edit, expected = SPACE_ERRORS[case]
    assert_rejected(search_file(edit(TINY_SEARCH)), expected, capsys, tmp_path / "out")


def test_searcher_without_its_library_is_rejected(search_file, tmp_path):
    """The library is made unimportable in a fresh interpreter, as if it were not installed."""
    path = search_file(
        replace(
            replace(TINY_SEARCH, "{grid: [4, 7]}", "{choice: [4, 7]}"),
            "num_samples: 2",
            "num_samples: 2\n  searcher: hyperopt",
        )
    )
    code = (
        "import sys; sys.modules['hyperopt'] = None\n"
        "from rlplat.cli import main\n"
        f"main(['train', {str(path)!r}])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    message = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr
    assert "searcher hyperopt needs the Python package 'hyperopt'" in message
    assert "pip install 'rlplat[tune]'" in message
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_dry_run_shows_the_spaces_as_written(search_file, capsys):
    from rlplat.cli import main

    main(["train", str(search_file()), "--dry-run"])
    resolved = capsys.readouterr().out
    assert "loguniform:\n    - 0.0001\n    - 0.01" in resolved
    assert "length:\n      grid:\n      - 4\n      - 7" in resolved
    assert "num_samples: 2" in resolved


# --- ranking and stop reasons ------------------------------------------------------------------


def _row(name: str, final: float | None, steps: int, reason: str = "stop.iterations") -> TrialRow:
    return TrialRow(name, "finished", reason, 1, steps, final, final, 1.0, {}, {})


def test_ranking_prefers_reaching_the_target_sooner():
    rows = [
        _row("late", 490.0, 100_000, "stop.episode_return_mean"),
        _row("early", 480.0, 60_000, "stop.episode_return_mean"),
        _row("short", 300.0, 20_000, "asha (early stop)"),
        _row("none", None, 1_000, "error"),
    ]
    ranked = rank_rows(rows, "max", "stop.episode_return_mean")
    assert [r.name for r in ranked] == ["early", "late", "short", "none"]
    assert [r.rank for r in ranked] == [1, 2, 3, 4]
    by_final = rank_rows(rows, "max")
    assert [r.name for r in by_final] == ["late", "early", "short", "none"]


def test_stop_reason_names_the_condition_or_the_scheduler():
    from rlplat.experiment.schema import StopSpec

    stop = StopSpec(episode_return_mean=475, env_steps=10_000)
    solved = {"window": {"episode_return_mean": 480.0}, "num_env_steps_sampled_lifetime": 4000}
    budget = {"window": {"episode_return_mean": 100.0}, "num_env_steps_sampled_lifetime": 10_000}
    cut = {"window": {"episode_return_mean": 50.0}, "num_env_steps_sampled_lifetime": 2000}
    assert stop_reason("finished", solved, stop, "asha") == "stop.episode_return_mean"
    assert stop_reason("finished", budget, stop, "asha") == "stop.env_steps"
    assert stop_reason("finished", cut, stop, "asha") == "asha (early stop)"
    assert stop_reason("error", cut, stop, "asha") == "error"


# --- real searches -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_search(ray_session, tmp_path_factory):
    """A grid over the corridor length x 2 samples of lr: four trials of three iterations."""
    from rich.console import Console

    from rlplat.run.launch import train

    tmp = tmp_path_factory.mktemp("search")
    path = tmp / "exp.yaml"
    path.write_text(TINY_SEARCH.replace("OUTPUT", str(tmp / "out")))
    summary = train(load_experiment(path), console=Console(record=True, width=200))
    return summary


def test_search_runs_every_trial_with_its_own_values(tiny_search):
    assert len(tiny_search.trials) == 4
    assert all(t.status == "finished" and t.iterations == 3 for t in tiny_search.trials)
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
  num_epochs: 4
resources:
  env_runners: {count: 0}
stop:
  iterations: 8
checkpoint: {every: 2, keep: 2}
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


def test_killed_search_resumes_with_every_trial_accounted_for(ray_session, write_yaml, tmp_path):
    """SIGKILL ``rlplat train`` once a trial has finished, then ``--resume`` the run."""
    text = (
        TINY_SEARCH.replace("OUTPUT", str(tmp_path / "out"))
        .replace("iterations: 3", "iterations: 25")
        .replace("keep: 1", "keep: 2")
    )
    path = write_yaml(text)
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
    assert process.returncode == -signal.SIGKILL, "the run was killed halfway"
    assert run_dir is not None and not (run_dir / RESULTS_CSV).exists()

    done = subprocess.run(
        [*command, "--resume", str(run_dir)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert len(summary["trials"]) == 4
    assert all(t["status"] == "finished" and t["iterations"] == 25 for t in summary["trials"])
    with open(run_dir / RESULTS_CSV) as handle:
        assert len(list(csv.DictReader(handle))) == 4
    for trial in summary["trials"]:
        iterations = [r["training_iteration"] for r in read_results(Path(trial["path"]))]
        assert iterations.count(1) == 1, "no trial started over from scratch"
        assert iterations[-1] == 25
        kept = list(Path(trial["path"]).glob("checkpoint_*"))
        assert len(kept) <= 3, "checkpoint.keep (2) held: the two best and the newest"


COMBINATIONS = {
    # id: tune section lines (the spaces are TINY_SEARCH's, with the grid made a choice)
    "optuna + median": "searcher: optuna\n  scheduler: {median: {grace_period: 1}}",
    "hyperopt + hyperband": "searcher: hyperopt\n  scheduler: hyperband",
    "bohb": "searcher: bohb",
    "random + pb2": "scheduler: {pb2: {perturbation_interval: 1}}",
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


@pytest.mark.parametrize("searcher", ["hyperopt", "optuna"])
def test_conditional_search_trains_each_trial_with_the_optimizer_it_drew(
    searcher, ray_session, write_yaml, tmp_path
):
    """A choice between Adam (with its lr range) and SGD (with lr and momentum ranges): each
    trial's learner steps the optimizer of its branch with the drawn values, and results.csv and
    best.yaml record the branch."""
    from rich.console import Console

    from rlplat.run.launch import train

    text = replace(TINY_SEARCH, "{grid: [4, 7]}", "5")
    text = replace(text, "  lr: {loguniform: [1.0e-4, 1.0e-2]}", OPTIMIZER_CHOICE)
    text = replace(text, "num_samples: 2", f"num_samples: 4\n  searcher: {searcher}")
    text = replace(text, "iterations: 3", "iterations: 1")
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
        if optimizer["type"] == "sgd":
            assert set(optimizer) == {"type", "lr", "momentum"}
            assert 1e-3 <= optimizer["lr"] <= 1e-1 and 0.5 <= optimizer["momentum"] <= 0.99
            assert group["momentum"] == pytest.approx(optimizer["momentum"]), "SGD stepped"
        else:
            assert set(optimizer) == {"type", "lr"} and 1e-4 <= optimizer["lr"] <= 1e-2
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
