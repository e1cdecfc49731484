"""Seeds and the report's statistics without training: refusals before Ray, the seed repeater,
ranking by the mean over seeds, the live table, the statistics by hand."""

from __future__ import annotations

import numpy as np
import pytest

from rlplat.report import stats
from tests.helpers import EXPERIMENTS, rejection


def test_seeds_refuse_early_stopping_schedulers_and_a_searched_seed(tmp_path):
    """rlplat train --seeds N is the override seeds=N."""
    experiment = EXPERIMENTS / "cartpole_ppo_asha.yaml"
    cases = [
        ([], ["cannot run with scheduler asha", "best.yaml with --seeds N"]),
        (["seed={choice: [1, 2]}", "tune.scheduler=fifo"], ["seed is a search space and seeds"]),
        (["tune.searcher=bohb", "tune.scheduler=null"], ["cannot run with searcher bohb"]),
    ]
    for overrides, expected in cases:
        message = rejection(experiment, "seeds=2", *overrides, f"output_dir={tmp_path}")
        assert all(fragment in message for fragment in expected), message
    assert not any(tmp_path.iterdir())


def test_seed_repeater_runs_each_suggestion_on_every_seed():
    """Optuna and HyperOpt get Tune's Repeater: a configuration per suggestion, one trial per
    seed with the seed set (no trial index left), the searcher told the mean over seeds."""
    from ray.tune.search import Searcher

    from rlplat.prepare.search import SeedRepeater

    class Counting(Searcher):
        def __init__(self):
            super().__init__(metric="score", mode="max")
            self.suggested, self.completed = 0, []

        def suggest(self, trial_id):
            self.suggested += 1
            return {"training": {"lr": self.suggested / 10}, "seed": 0}

        def on_trial_complete(self, trial_id, result=None, error=False):
            self.completed.append((trial_id, result))

    inner = Counting()
    repeater = SeedRepeater(inner, [5, 9])
    configs = [repeater.suggest(f"t{i}") for i in range(4)]
    assert [c["seed"] for c in configs] == [5, 9, 5, 9]
    assert [c["training"]["lr"] for c in configs] == [0.1, 0.1, 0.2, 0.2]
    assert all("__trial_index__" not in c for c in configs)
    repeater.on_trial_complete("t0", {"score": 1.0})
    repeater.on_trial_complete("t1", {"score": 3.0})
    assert inner.completed == [("t0", {"score": 2.0})]


def test_ranking_with_seeds_judges_a_configuration_by_all_its_seeds():
    """Configurations rank by their mean over seeds; one whose seed failed has no mean and goes
    last, however well its surviving seed did."""
    from rlplat.callbacks.search_report import TrialRow, rank_rows

    def row(name, lr, seed, final):
        experiment = {"training": {"lr": lr}, "seed": seed}
        return TrialRow(
            name,
            "finished",
            "stop.iterations",
            1,
            100,
            final,
            final,
            1.0,
            {"training.lr": lr},
            experiment,
            seed=seed,
        )

    rows = [
        row("a0", 0.1, 0, 10.0),
        row("a1", 0.1, 1, 30.0),  # mean 20
        row("b0", 0.2, 0, 25.0),
        row("b1", 0.2, 1, 25.0),  # mean 25
        row("c0", 0.3, 0, 90.0),
        row("c1", 0.3, 1, None),  # a seed without a value
    ]
    ranked = rank_rows(rows, "max")
    assert [(r.name, r.rank) for r in ranked] == [
        ("b0", 1),
        ("b1", 1),
        ("a0", 2),
        ("a1", 2),
        ("c0", 3),
        ("c1", 3),
    ]
    assert ranked[0].config_mean == 25.0 and ranked[-1].config_mean is None


def test_live_table_shows_each_trials_seed(capsys):
    """While a seeded search runs, the trial table says which seed each trial is."""
    from rich.console import Console

    from rlplat.callbacks.search_report import LiveTrialTable
    from rlplat.experiment.spaces import Space

    class Trial:  # what the table reads of Tune's Trial
        status, last_result = "RUNNING", {}

        def __init__(self, seed: int):
            self.config = {"seed": seed, "seeds": [5, 9], "training": {"lr": 0.1}}

        def __str__(self) -> str:
            return f"trial_{self.config['seed']}"

    space = Space(("training", "lr"), "choice", (0.1, 0.2))
    trials = [Trial(5), Trial(9)]
    console = Console(width=200)
    console.print(LiveTrialTable([space], console, seeded=True).table(trials))
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if "status" in line)
    assert header.split()[:4] == ["trial", "status", "seed", "training.lr"]
    assert [line.split()[2] for line in lines if "running" in line] == ["5", "9"]


def test_stats_by_hand():
    scores = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 100.0]
    # IQM: the middle half (3, 4, 5, 6) after cutting two from each end.
    assert stats.bootstrap_estimate(scores, stats.iqm, 0).estimate == pytest.approx(4.5)
    assert stats.optimality_gap(5.0)(np.array(scores)) == pytest.approx((4 + 3 + 2 + 1) / 8)
    one = stats.bootstrap_estimate([3.0], stats.mean, 0)
    assert one.estimate == 3.0 and one.ci is None  # no interval from one seed
    assert stats.improvement([2.0, 3.0], [1.0, 3.0], 0).estimate == pytest.approx(
        (1 + 0 + 1 + 0.5) / 4  # 2>1, 2<3, 3>1, 3=3
    )


def test_labels_name_only_the_differing_settings_short():
    """A search's legend: short names, values at the fewest digits that tell them apart."""
    from rlplat.report.labels import short_labels, short_value
    from rlplat.report.plots import steps_text

    assert [short_value(v) for v in (3e-4, 3.4123e-4, 0.2, 0.99, 5, 12345.0, [64, 64])] == [
        "3e-4", "3.4e-4", "0.2", "0.99", "5", "1.2e4", "[64, 64]",
    ]
    searched = [
        {"training.clip_param": 0.2, "training.lambda_": 0.9512, "training.lr": 3.4123e-4},
        {"training.clip_param": 0.3, "training.lambda_": 0.9, "training.lr": 1e-3},
    ]
    assert short_labels(searched) == [
        "clip=0.2, lambda=0.95, lr=3.4e-4", "clip=0.3, lambda=0.9, lr=1e-3",
    ]
    steps = [950, 10_031, 20_063, 1_500_000]
    assert [steps_text(n) for n in steps] == ["950", "10k", "20.1k", "1.5M"]
    close = [{"training.lr": 3.41e-4}, {"training.lr": 3.44e-4}]
    assert short_labels(close) == ["lr=3.41e-4", "lr=3.44e-4"]
    clashing = [{"critic.lr": 0.2, "training.lr": 0.1}, {"critic.lr": 0.3, "training.lr": 0.2}]
    assert short_labels(clashing) == [
        "critic.lr=0.2, training.lr=0.1", "critic.lr=0.3, training.lr=0.2",
    ]


def test_final_figure_claims_intervals_only_where_seeds_allow_them():
    """One seed each: one panel of scores, no interval claimed; some single seeds: said so."""
    from rlplat.report.plots import statistics_shown

    names = ["iqm", "mean", "median", "optimality_gap"]
    assert statistics_shown(names, [1, 1, 1, 1], "Return") == (
        ["iqm"], "Return; one seed each, no interval",
    )
    assert statistics_shown(names, [3, 1], "Return") == (
        names, "Return; 95% bootstrap CIs where 2 or more seeds, dots: seeds",
    )
    assert statistics_shown(names, [3, 3], "Return")[1] == "Return; 95% bootstrap CIs, dots: seeds"


def test_report_labels_must_name_something_and_stay_distinct():
    from types import SimpleNamespace

    from rlplat.errors import UserError
    from rlplat.report.options import ReportOptions
    from rlplat.report.report import _rename, check_options

    with pytest.raises(UserError, match="is not LABEL=NAME"):
        check_options(ReportOptions(label=["cartpole-ppo="]))
    runs = [SimpleNamespace(label="ppo (lr=0.001)"), SimpleNamespace(label="ppo (lr=0.01)")]
    with pytest.raises(UserError, match="2 experiments would show as 'PPO'"):
        _rename(runs, ["ppo (lr=0.001)=PPO", "ppo (lr=0.01)=PPO"])
    _rename(runs, ["ppo (lr=0.001)=slow"])
    assert [run.label for run in runs] == ["slow", "ppo (lr=0.01)"]
