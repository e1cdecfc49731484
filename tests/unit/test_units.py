"""Small pieces whose behaviour users see: the return window, run directories, the docs page."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlplat.rllib.episode_stats import WindowedEpisodeStats
from rlplat.run.run_dir import create_run_dir
from tests.helpers import REPO


def feed(
    stats: WindowedEpisodeStats,
    window: int,
    iterations: list[tuple[int, float]],
    trained: list[int] | None = None,
) -> dict:
    """Results of iterations of (episodes, their mean return), with the env steps the learners
    had trained on by the end of each (``trained``; default: an update in every iteration)."""
    config = SimpleNamespace(metrics_num_episodes_for_smoothing=window, is_offline=False)
    algorithm = SimpleNamespace(config=config)
    result: dict = {}
    for index, (count, mean) in enumerate(iterations):
        steps = trained[index] if trained else 64 * (index + 1)
        result = {
            "env_runners": {
                "num_episodes": count,
                "episode_return_mean": mean,
                "episode_len_mean": mean,
            },
            "learners": {"__all_modules__": {"num_env_steps_trained_lifetime": steps}},
        }
        stats.on_train_result(algorithm=algorithm, result=result)
    return result


def test_window_counts_the_episodes_played_before_the_first_update():
    # Two warm-up iterations (no update yet), then learning: the warm-up's 5 + 5 episodes stay
    # in a 20-episode window until 20 newer ones push them out.
    warm_up = [(5, -1.0), (5, -1.0)]
    result = feed(WindowedEpisodeStats(), 20, [*warm_up, (10, 3.0)], trained=[0, 64, 128])
    assert result["window"]["episodes_before_learning"] == 10
    result = feed(WindowedEpisodeStats(), 20, [*warm_up, (20, 3.0)], trained=[0, 64, 128])
    assert result["window"]["episodes_before_learning"] == 0


def test_a_checkpoint_is_scored_by_its_greedy_evaluation_or_a_window_after_learning():
    from rlplat.checkpoints import GreedyEvaluation, checkpoint_info_from_result

    result = {"training_iteration": 4, "window": {"episode_return_mean": 9.0, "num_episodes": 20}}
    evaluation = GreedyEvaluation(iteration=4, episodes=10, return_mean=-150.0)
    info = checkpoint_info_from_result(result, "eval_episode_return_mean", "max", evaluation)
    assert info.score == -150.0 and info.scored_by == "greedy return over 10 episodes"
    unevaluated = checkpoint_info_from_result(result, "eval_episode_return_mean", "max")
    assert unevaluated.score is None
    window = checkpoint_info_from_result(result, "episode_return_mean", "max")
    assert window.score == 9.0 and "last 20 episodes" in window.scored_by
    result["window"]["episodes_before_learning"] = 3
    warm_up = checkpoint_info_from_result(result, "episode_return_mean", "max")
    assert warm_up.score is None and "precede learning" in warm_up.scored_by


@pytest.mark.parametrize(
    ("elapsed", "last", "fits"),
    [(60, 60, True), (121, 61, True), (130, 65, True), (140, 70, False), (167, 167, False)],
)
def test_another_iteration_starts_only_if_it_ends_within_the_budget_slack(elapsed, last, fits):
    from rlplat.experiment.schema import StopSpec

    assert StopSpec(time_s=180).another_iteration_fits(elapsed, last) is fits


def test_window_is_the_mean_over_the_last_n_episodes():
    # 60 episodes of 10, then 30 of 100, then 20 of 200: the last 100 hold 50 x 10, 30 x 100,
    # 20 x 200 -> (500 + 3000 + 4000) / 100 = 75.
    result = feed(WindowedEpisodeStats(), 100, [(60, 10.0), (30, 100.0), (20, 200.0)])
    assert result["window"]["episode_return_mean"] == pytest.approx(75.0)
    assert result["window"]["num_episodes"] == 100


def test_window_skips_iterations_without_episodes():
    stats = WindowedEpisodeStats()
    result = feed(stats, 100, [(2, 20.0), (0, float("nan")), (2, 40.0)])
    assert result["window"]["episode_return_mean"] == pytest.approx(30.0)


def test_run_directories_are_never_reused(tmp_path):
    first = create_run_dir(tmp_path / "exp")
    (first / "keep.txt").write_text("data")
    second = create_run_dir(tmp_path / "exp")
    assert first != second and second.is_dir()
    assert (first / "keep.txt").read_text() == "data"


def test_every_key_in_the_schema_reference_has_a_whole_description():
    from rlplat.experiment.schema_doc import EXAMPLE, render

    page = render((REPO / EXAMPLE).read_text())
    rows = [row for row in page.splitlines() if row.startswith("| `")]
    keys = [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]
    keys = [cells for cells in keys if len(cells) == 4]  # key, type, default, description
    assert len(keys) > 80
    cut = [cells[0] for cells in keys if not cells[3].endswith(".")]
    assert not cut, f"descriptions that stop mid-sentence: {cut}"


def test_schema_reference_is_up_to_date():
    from rlplat.experiment.schema_doc import EXAMPLE, render

    expected = render((REPO / EXAMPLE).read_text().strip())
    assert (REPO / "docs/schema.md").read_text() == expected, (
        "regenerate with: python -m rlplat.experiment.schema_doc > docs/schema.md"
    )


def test_did_you_mean_suggests_close_spellings_and_longer_names_holding_the_word():
    from rlplat.errors import did_you_mean

    names = ["episode_return_mean", "episode_len_mean", "policy_return_mean/learner"]
    assert did_you_mean("episode_retrun_mean", names) == " Did you mean 'episode_return_mean'?"
    assert did_you_mean("return", names) == " Did you mean 'episode_return_mean'?"
    assert did_you_mean("xyz", names) == ""
