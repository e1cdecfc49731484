"""The Atari suite end to end: a tiny Breakout PPO run on the preset's uint8 frames trains (its
env runner stepping an EnvPool, env.backend: envpool), evaluates whole games on Gymnasium's chain
scored as the game scores them, renders the game's own frames and exports its CNN with a passing
parity certificate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from tests.e2e.helpers import train_yaml
from tests.helpers import EXPERIMENTS, read_results, rlplat


@pytest.fixture(scope="module")
def tiny_breakout(ray_session, tmp_path_factory):
    """breakout_ppo.yaml (EnvPool's envs in training) for two 64-step iterations on 2 envs,
    exported at its end."""
    text = (EXPERIMENTS / "atari/breakout_ppo.yaml").read_text() + (
        "export: {at_end: true, episodes: 1}\noutput_dir: OUTPUT\n"
    )
    return train_yaml(
        text,
        tmp_path_factory.mktemp("breakout"),
        "resources.env_runners.envs=2",
        "training.train_batch_size_per_learner=64",
        "training.minibatch_size=32",
        "training.num_epochs=1",
        "stop.env_steps=128",
        "checkpoint.every=1",
        "evaluation.evaluation_duration=1",
    )


def test_uint8_frames_train_and_evaluation_plays_a_whole_game(tiny_breakout):
    last = read_results(Path(tiny_breakout.trials[0].path))[-1]
    assert last["learners"]["__all_modules__"]["num_env_steps_trained_lifetime"] >= 128
    evaluation = last["evaluation"]["env_runners"]
    # One evaluation episode is one game, all 5 lives, its return the unclipped game score.
    assert evaluation["num_games"] == evaluation["num_episodes"] == 1
    assert evaluation["game_score_mean"] == evaluation["episode_return_mean"]
    assert evaluation["game_length_mean"] == evaluation["episode_len_mean"] > 100


def test_eval_renders_the_game_frames(tiny_breakout, tmp_path):
    done = rlplat("eval", tiny_breakout.run_dir, "-n", "1", "--render", "gif", "--out", tmp_path)
    assert done.returncode == 0, done.stderr
    [gif] = tmp_path.glob("*.gif")
    with Image.open(gif) as image:
        assert image.size == (160, 210)  # ALE's screen, not the 84x84 frames the policy sees
        assert image.n_frames > 100


def test_the_cnn_policy_exports_with_a_passing_certificate(tiny_breakout):
    export = tiny_breakout.export
    assert export is not None and export.get("passed"), export
    parity = json.loads((Path(export["directory"]) / "parity.json").read_text())
    assert parity["agreement"] == 1.0 and parity["compared_actions"] > 100
