"""report.json as rlplat.report.model's dataclasses: reports written by main
(tests/fixtures/report_*, benchmarks/results/reports/*) read back, are written again byte for
byte, and give the same report.md and printed summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from rlplat.report.model import Report
from rlplat.report.render import markdown, print_report

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
WRITTEN_BY_MAIN = [
    *sorted(FIXTURES.glob("report_*")),
    *sorted((REPO / "benchmarks" / "results" / "reports").iterdir()),
]


def read(directory: Path) -> Report:
    return Report.from_json(json.loads((directory / "report.json").read_text()))


@pytest.mark.parametrize("directory", WRITTEN_BY_MAIN, ids=lambda path: path.name)
def test_a_report_written_by_main_is_written_again_byte_for_byte(directory):
    report = read(directory)
    assert json.dumps(report.to_json(), indent=2) + "\n" == (directory / "report.json").read_text()


@pytest.mark.parametrize("name", ["report_eval", "report_train"])
def test_report_md_of_main_is_made_again_from_its_report_json(name):
    directory = FIXTURES / name
    assert markdown(read(directory)) == (directory / "report.md").read_text()


def test_an_evaluated_report_of_main_reads_with_its_fields():
    report = read(FIXTURES / "report_eval")
    assert (report.score, report.checkpoint, report.eval_episodes) == ("eval", "last", 3)
    assert report.eval_seeds == [0, 2] and report.target == 15
    assert report.bootstrap.resamples == 10_000 and report.bootstrap.seed == 0
    first, second = report.experiments
    assert second.label == "tiny-ppo (training.lr=0.001)" and second.seeds == [3, 4]
    assert list(second.aggregates) == ["iqm", "mean", "median", "optimality_gap"]
    assert second.aggregates["iqm"].ci == pytest.approx((9.0, 35 / 3))
    assert first.aggregates["iqm"].ci is None  # one seed: no interval
    trial = first.trials[0]
    assert trial.episode_scores == [53.0, 67.0, 42.0] and trial.final_score == 54.0
    assert trial.to_target.env_steps == 256
    (p,) = [p for p in report.probability_of_improvement if p.x == first.label]
    assert (p.y, p.probability.estimate) == (second.label, 1.0)
    assert second.curve is not None and len(second.curve.x) == len(second.curve.centre)


def test_a_report_scored_by_training_has_no_episodes_and_no_target():
    report = read(FIXTURES / "report_train")
    assert report.score == "training" and report.checkpoint is None and report.target is None
    (entry,) = report.experiments
    assert all(t.episode_scores == [] and t.to_target is None for t in entry.trials)
    assert all("episode_scores" not in t and "to_target" not in t
               for t in report.to_json()["experiments"][0]["trials"])


def test_the_printed_summary_is_the_one_main_printed():
    console = Console(record=True, width=200)
    print_report(read(FIXTURES / "report_eval"), console)
    assert console.export_text() == (FIXTURES / "report_eval" / "printed.txt").read_text()
