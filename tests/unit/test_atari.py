"""The Atari preset: what it writes out, how its chain plays a real ALE game in training and in
evaluation, and what it refuses before anything runs."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

from rlplat.environments.atari import GAME_LENGTH, GAME_SCORE
from rlplat.environments.make import EnvCreator
from rlplat.errors import ConfigError
from rlplat.experiment.load import load_experiment
from rlplat.experiment.schema import entry_parts
from tests.helpers import EXPERIMENTS, assert_shipped_file_validates

BREAKOUT = """\
name: breakout
algorithm: PPO
env: {id: ALE/Breakout-v5, preset: atari}
stop: {env_steps: 1000}
"""
NOOP = 0


def load(tmp_path, text: str = BREAKOUT, *overrides: str):
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return load_experiment(path, list(overrides)).experiment


@pytest.mark.parametrize(
    "path", sorted((EXPERIMENTS / "atari").glob("*.yaml")), ids=lambda p: p.stem
)
def test_suite_file_validates(path, tmp_path):
    assert_shipped_file_validates(path, tmp_path)


def test_the_preset_is_written_out_and_what_the_user_wrote_wins(tmp_path):
    text = BREAKOUT.replace("preset: atari", "preset: atari, wrappers: [TimeAwareObservation]")
    env = load(tmp_path, text, "env.kwargs.repeat_action_probability=0.0").env
    assert env.preset is None
    assert env.kwargs == {"frameskip": 1, "repeat_action_probability": 0.0}
    names = [entry_parts(entry)[0] for entry in env.wrappers]
    assert names[0] == "AtariPreprocessing" and names[-2].endswith(":SignReward")
    assert names[-1] == "TimeAwareObservation"


def play_noop(env: gym.Env, max_steps: int = 5_000) -> list[tuple[float, dict]]:
    """Episodes of NOOP only until the game is over: (return, last info) of each."""
    episodes: list[tuple[float, dict]] = []
    env.reset(seed=0)
    total = 0.0
    for _ in range(max_steps):
        _, reward, terminated, truncated, info = env.step(NOOP)
        total += reward
        if terminated or truncated:
            episodes.append((total, info))
            if GAME_SCORE in info:
                return episodes
            env.reset()
            total = 0.0
    raise AssertionError(f"the game did not end in {max_steps} NOOP steps")


def test_training_episodes_are_lives_of_one_game_and_evaluation_plays_the_whole_game(tmp_path):
    spec = load(tmp_path).env
    training = EnvCreator(spec)()
    observation, _ = training.reset(seed=0)
    assert observation.shape == (84, 84, 4) and observation.dtype == np.uint8
    # Zeros, then the frames of the reset and of FIRE and action 2 (the start FireReset presses).
    assert not observation[..., 0].any() and observation[..., 1:].any(axis=(0, 1)).all()
    stepped, *_ = training.step(NOOP)
    assert (stepped[..., 2] == observation[..., 3]).all()  # the newest frame moved one back
    lives = training.unwrapped.ale.lives()
    # NOOP only: FIRE at each start launches the ball, the paddle stays put, each life is lost.
    lost = play_noop(training)
    assert len(lost) == lives == 5
    assert [GAME_SCORE in info for _, info in lost] == [False] * (lives - 1) + [True]
    assert lost[-1][1][GAME_SCORE] >= sum(total for total, _ in lost)  # clipped per life

    evaluation = EnvCreator(spec, evaluation=True)()
    [(total, info)] = play_noop(evaluation)
    assert total == info[GAME_SCORE] and info[GAME_LENGTH] > 5 * 20


def test_the_preset_needs_an_ale_id(tmp_path):
    with pytest.raises(ConfigError, match="needs an ALE id such as ALE/Breakout-v5"):
        load(tmp_path, BREAKOUT, "env.id=CartPole-v1")


def test_an_ale_id_without_its_package_names_the_atari_extra(tmp_path, monkeypatch):
    from rlplat.environments.make import check_env

    # As on a machine without ale_py: no ALE ids registered, the package not importable.
    for env_id in [name for name in gym.registry if name.startswith("ALE/")]:
        monkeypatch.delitem(gym.registry, env_id)
    monkeypatch.setitem(sys.modules, "ale_py", None)
    spec = load(tmp_path, BREAKOUT.replace("Breakout-v5, preset: atari", "Pong-v5")).env
    with pytest.raises(ConfigError, match=r"Install the atari extra: pip install 'rlplat\[atari"):
        check_env(spec, lambda key: key)


def test_envpool_plays_the_presets_chain_as_a_vector_of_games(tmp_path):
    """What an env runner gets with env.backend: envpool: the preset's frames and spaces, a
    lost life ending an episode with clipped rewards, the game score at the game's end only,
    and the step after an episode's end resetting it."""
    sticky_off = "env.kwargs.repeat_action_probability=0.0"  # as shipped: FIRE always lands
    spec = load(tmp_path, BREAKOUT, "env.backend=envpool", sticky_off).env
    envs = EnvCreator(spec)({"num_envs": 2})
    assert envs.single_observation_space == EnvCreator(spec)().observation_space
    observations, _ = envs.reset(seed=[3, 4])
    assert observations.shape == (2, 84, 84, 4) and observations.dtype == np.uint8
    episodes, rewards, ends = 0, set(), []
    noop = np.full(2, NOOP)
    for _ in range(5_000):
        _, reward, terminated, truncated, info = envs.step(noop)
        rewards |= set(reward.tolist())
        if terminated[0] or truncated[0]:
            episodes += 1
            ends.append(info.get(f"_{GAME_SCORE}", [False])[0])
            if ends[-1]:
                break
    assert episodes == 5 and ends == [False] * 4 + [True]  # 5 lives, one game
    assert info[GAME_LENGTH][0] > 5 * 20 and rewards <= {0.0, 1.0}
    stepped, reward, terminated, _, info = envs.step(noop)  # env 0 resets: no move, no reward
    assert reward[0] == 0 and not terminated[0]
    assert (stepped[0] == stepped[0, ..., :1]).all()  # a new stack: copies of one frame


def test_envpool_refuses_a_chain_it_cannot_run(tmp_path, monkeypatch):
    from rlplat.environments.make import check_env

    extra = BREAKOUT.replace("preset: atari", "preset: atari, wrappers: [TimeAwareObservation]")
    spec = load(tmp_path, extra, "env.backend=envpool").env
    with pytest.raises(ConfigError, match="cannot run this chain: after StackFrames only"):
        check_env(spec, lambda key: key)
    monkeypatch.setitem(sys.modules, "envpool", None)  # as on a machine without it
    spec = load(tmp_path, BREAKOUT, "env.backend=envpool").env
    with pytest.raises(ConfigError, match=r"Install the envpool extra: pip install -e"):
        check_env(spec, lambda key: key)


def test_envpool_refuses_fire_reset_without_an_episodic_life(tmp_path):
    """EnvPool presses FIRE only when an episode starts: without episodic life the game would
    wait for FIRE after every lost life."""
    from rlplat.environments.envpool_atari import NotTranslatable, envpool_options

    spec = load(tmp_path, BREAKOUT, "env.backend=envpool").env
    no_episodic_life = [e for e in spec.wrappers if not entry_parts(e)[0].endswith("EpisodicLife")]
    with pytest.raises(NotTranslatable, match="FireReset without EpisodicLife"):
        envpool_options(spec.model_copy(update={"wrappers": no_episodic_life}))


def test_a_finished_episode_of_the_envpool_vector_clears_the_crash_count(tmp_path):
    """As for a single env: only failures in a row, with no episode finished between them, end
    the trial."""
    from rlplat.environments.guard import GuardedCreator, _Crashes

    sticky_off = "env.kwargs.repeat_action_probability=0.0"
    spec = load(tmp_path, BREAKOUT, "env.backend=envpool", sticky_off).env
    envs = GuardedCreator(EnvCreator(spec))({"num_envs": 2})
    envs.reset(seed=[0, 1])
    _Crashes.consecutive = 3
    for _ in range(500):  # NOOP: FIRE at the start launches the ball, a life is soon lost
        _, _, terminated, truncated, _ = envs.step(np.full(2, NOOP))
        if terminated.any() or truncated.any():
            break
    assert _Crashes.consecutive == 0
