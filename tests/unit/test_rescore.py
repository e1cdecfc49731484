"""What the end-of-run re-scoring (checkpoint.rescore) says about a trial's checkpoints, on
recorded checkpoint infos: which one is best with its interval, which one the training-time
score had ranked first, and a stop condition that fired on a noisy window."""

from __future__ import annotations

from pathlib import Path

from rlplat.checkpoints import CheckpointInfo
from rlplat.run.rescore import Rescored, _noisy_stop, _verdict


def _rescored(name: str, score: float, interval: float, training: float) -> Rescored:
    info = CheckpointInfo(
        score=score, score_interval=interval, training_score=training, evaluation_episodes=5
    )
    return Rescored(Path("trial_00000") / name, info)


def test_the_verdict_names_the_best_and_the_checkpoint_training_had_ranked_first():
    lucky = _rescored("checkpoint_000001", -329.6, 95.2, training=-120.4)
    steady = _rescored("checkpoint_000002", -152.1, 41.3, training=-180.0)
    line = _verdict([lucky, steady], first_pick=lucky.checkpoint, pick=steady.checkpoint)
    assert line.startswith("  best: checkpoint_000002 -152.10 ± 41.30; checkpoint_000001 -329.60")
    assert "During training checkpoint_000001 ranked first (-120.40 over 5 episodes)" in line


def test_the_verdict_says_nothing_of_training_when_both_rankings_agree():
    first = _rescored("checkpoint_000001", -140.0, 40.0, training=-150.0)
    second = _rescored("checkpoint_000002", -300.0, 150.0, training=-190.0)
    line = _verdict([first, second], first_pick=first.checkpoint, pick=first.checkpoint)
    assert "During training" not in line


def test_a_stop_on_a_window_the_greedy_policy_does_not_reach_is_called_noisy():
    newest = CheckpointInfo(episode_return_mean=-195.0)
    below = CheckpointInfo(score=-300.0, score_interval=60.0)
    said = _noisy_stop(-200.0, newest, below)
    assert said is not None and "read -195.00" in said and "-300.00 ± 60.00" in said
    within = CheckpointInfo(score=-230.0, score_interval=40.0)  # the target is inside its interval
    assert _noisy_stop(-200.0, newest, within) is None
    not_reached = CheckpointInfo(episode_return_mean=-250.0)  # another condition stopped it
    assert _noisy_stop(-200.0, not_reached, below) is None
