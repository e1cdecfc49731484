"""The MuJoCo suite: its files validate, and a tiny HalfCheetah PPO run with the suite's pieces
(free log std starting at -2, mean_std_filter, reward_scaling) trains, keeps its reward
statistics in the checkpoint, renders headless with nothing set by the user, and exports with a
passing parity certificate."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from PIL import Image

from rlplat.engine.learner import LEARNER_CONNECTOR
from tests.e2e.helpers import train_yaml
from tests.helpers import EXPERIMENTS, assert_shipped_file_validates, rlplat

SUITE = EXPERIMENTS / "mujoco"
EPISODE_STEPS = 60


@pytest.mark.parametrize("path", sorted(SUITE.glob("*.yaml")), ids=lambda p: p.stem)
def test_suite_file_validates(path, tmp_path):
    assert_shipped_file_validates(path, tmp_path)


@pytest.fixture(scope="module")
def tiny_halfcheetah(ray_session, tmp_path_factory):
    """halfcheetah_ppo.yaml for two 120-step iterations of 60-step episodes, exported at its end."""
    text = (SUITE / "halfcheetah_ppo.yaml").read_text() + (
        "export: {at_end: true, episodes: 2}\noutput_dir: OUTPUT\n"
    )
    return train_yaml(
        text,
        tmp_path_factory.mktemp("halfcheetah"),
        f"env.kwargs.max_episode_steps={EPISODE_STEPS}",
        "training.train_batch_size_per_learner=120",
        "training.minibatch_size=60",
        "training.num_epochs=1",
        "stop.env_steps=240",
        "checkpoint.every=1",
        "evaluation.evaluation_duration=1",
    )


def test_reward_statistics_are_in_the_checkpoint(tiny_halfcheetah):
    checkpoint = Path(tiny_halfcheetah.trials[0].last_checkpoint)
    state = pickle.loads((checkpoint / "learner_group/learner/state.pkl").read_bytes())
    statistics = state[LEARNER_CONNECTOR]["RewardScaling"]
    assert statistics["count"] == 240  # one discounted return per env step learned from
    assert statistics["var"] > 0


def test_eval_renders_a_gif_headless_with_nothing_set(tiny_halfcheetah, tmp_path):
    done = rlplat(
        "eval", tiny_halfcheetah.run_dir, "-n", "1", "--render", "gif", "--out", str(tmp_path),
        unset=("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY"),
    )
    assert done.returncode == 0, done.stderr
    [gif] = tmp_path.glob("*.gif")
    with Image.open(gif) as image:
        assert image.n_frames == EPISODE_STEPS  # one frame per step
        image.seek(EPISODE_STEPS // 2)
        pixels = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert pixels is None or len(pixels) > 50, "the frame is blank"


def test_the_policy_exports_with_a_passing_certificate(tiny_halfcheetah):
    export = tiny_halfcheetah.export
    assert export is not None and export.get("passed"), export
    parity = json.loads((Path(export["directory"]) / "parity.json").read_text())
    assert parity["agreement"] == 1.0 and parity["compared_actions"] > 0


def test_playing_the_checkpoint_leaves_its_observation_statistics(tiny_halfcheetah):
    """A restored policy normalises with the statistics its checkpoint holds, however long it
    plays: its mean_std_filter stops counting observations."""
    import gymnasium as gym

    from rlplat.policy.restore import Policy

    policy = Policy.from_checkpoint(Path(tiny_halfcheetah.trials[0].last_checkpoint))
    [saved] = policy.env_to_module.get_state()["MeanStdFilter"].values()
    env = gym.make("HalfCheetah-v5")
    actor = policy.actor()
    observation, info = env.reset(seed=0)
    actor.reset(env, observation, info, seed=0)
    for _ in range(5):
        action = actor.act(observation, explore=False)
        observation, reward, terminated, truncated, info = env.step(action)
        actor.observe(observation, reward, terminated, truncated, info)
    [played] = policy.env_to_module.get_state()["MeanStdFilter"].values()
    assert saved["running_stats"][0]["num_pushes"] > 0
    assert played["running_stats"] == saved["running_stats"]
