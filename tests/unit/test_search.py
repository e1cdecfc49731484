"""Hyperparameter search from YAML without training: spaces, checks before Ray, ranking and
stop reasons."""

from __future__ import annotations

import sys

import pytest

from rlplat.callbacks.search_report import TrialRow, rank_rows, stop_reason
from rlplat.experiment.spaces import Space, find_spaces
from tests.helpers import (
    OPTIMIZER_CHOICE,
    TINY_SEARCH,
    assert_one_branch,
    assert_rejected,
    conditional_search,
    replace,
)


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
def test_invalid_search_is_rejected_before_ray(case, search_file, tmp_path):
    edit, expected = SPACE_ERRORS[case]
    assert_rejected(search_file(edit(TINY_SEARCH)), expected, tmp_path / "out")


def test_searcher_without_its_library_is_rejected(search_file, tmp_path, monkeypatch):
    """The library is made unimportable, as if it were not installed."""
    monkeypatch.setitem(sys.modules, "hyperopt", None)
    path = search_file(
        replace(
            replace(TINY_SEARCH, "{grid: [4, 7]}", "{choice: [4, 7]}"),
            "num_samples: 2",
            "num_samples: 2\n  searcher: hyperopt",
        )
    )
    assert_rejected(
        path,
        ["searcher hyperopt needs the Python package 'hyperopt'", "pip install 'rlplat[tune]'"],
        tmp_path / "out",
    )


@pytest.mark.parametrize("searcher", ["hyperopt", "optuna"])
def test_a_conditional_choice_draws_a_branch_then_only_its_values(searcher, search_file):
    """Each suggestion of the searcher, merged into the trial's config as Tune merges it, is
    one optimizer: Adam with an lr in Adam's range, or SGD with lr and momentum in SGD's; both
    branches are drawn. (tests/e2e/test_search.py trains such trials with optuna.)"""
    from ray.tune.utils.util import merge_dicts

    from rlplat.experiment.load import load_experiment
    from rlplat.prepare.run_spec import prepare

    search = prepare(load_experiment(search_file(conditional_search(searcher, 8)))).search
    search.searcher.set_search_properties(None, None, search.param_space)
    drawn = []
    for index in range(12):
        suggestion = search.searcher.suggest(f"trial_{index}")
        optimizer = merge_dicts(search.param_space, suggestion)["training"]["optimizer"]
        assert_one_branch(optimizer)
        drawn.append(optimizer["type"])
    assert set(drawn) == {"adam", "sgd"}, drawn


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
