"""``reward_scaling``: PPO learns from rewards scaled by the discounted return's running std,
while the episodes (and so every return rlplat reports) keep the env's rewards."""

from __future__ import annotations

import numpy as np
import pytest
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rlplat.engine.learner import LEARNER_CONNECTOR
from rlplat.environments.reward_scaling import RewardScaling
from rlplat.errors import ConfigError
from rlplat.experiment.load import load_experiment
from rlplat.prepare import prepare
from tests.helpers import TINY_PPO, replace


def chunk(
    rewards: list[float], *, id_: str | None = None, t_started: int = 0
) -> SingleAgentEpisode:
    """An episode chunk with these rewards (observations and actions are placeholders)."""
    n = len(rewards)
    return SingleAgentEpisode(
        id_=id_,
        observations=list(range(n + 1)),
        actions=[0] * n,
        rewards=rewards,
        t_started=t_started,
        len_lookback_buffer=0,
    )


def scaled(piece: RewardScaling, *episodes: SingleAgentEpisode) -> list[np.ndarray]:
    batch = piece(rl_module=None, batch={}, episodes=list(episodes), shared_data={})
    return [np.asarray(batch[Columns.REWARDS][(e.id_,)]) for e in episodes]


def discounted(rewards: list[float], gamma: float, start: float = 0.0) -> list[float]:
    out, running = [], start
    for reward in rewards:
        running = gamma * running + reward
        out.append(running)
    return out


def test_rewards_are_divided_by_the_std_of_the_discounted_return():
    piece = RewardScaling(gamma=0.5)
    episode = chunk([1.0, 2.0, 3.0])
    [rewards] = scaled(piece, episode)
    std = np.std(discounted([1.0, 2.0, 3.0], 0.5))  # returns 1, 2.5, 4.25
    np.testing.assert_allclose(rewards, np.array([1.0, 2.0, 3.0]) / std, rtol=1e-5)
    assert list(episode.get_rewards()) == [1.0, 2.0, 3.0], "the episode's own rewards changed"


def test_an_episode_cut_between_batches_keeps_its_running_return():
    piece = RewardScaling(gamma=0.9)
    first = chunk([1.0, 1.0], id_="a")
    scaled(piece, first, chunk([5.0], id_="b"))
    scaled(piece, chunk([1.0, 1.0], id_="a", t_started=2), chunk([2.0], id_="c"))
    whole = discounted([1.0] * 4, 0.9) + discounted([5.0], 0.9) + discounted([2.0], 0.9)
    state = piece.get_state()
    assert state["count"] == 6
    assert state["mean"] == pytest.approx(np.mean(whole))
    assert state["var"] == pytest.approx(np.var(whole))
    restored = RewardScaling(gamma=0.9)
    restored.set_state(state)
    assert restored.get_state() == state


def test_two_chunks_of_one_episode_in_one_batch_continue_the_return():
    piece = RewardScaling(gamma=0.5)
    scaled(piece, chunk([1.0, 1.0], id_="a"), chunk([1.0, 1.0], id_="a", t_started=2))
    whole = discounted([1.0] * 4, 0.5)
    assert piece.get_state()["mean"] == pytest.approx(np.mean(whole))


def test_scaled_rewards_are_clipped():
    piece = RewardScaling(gamma=0.0, clip=1.5)
    [rewards] = scaled(piece, chunk([0.0] * 99 + [1000.0]))
    assert rewards.max() == pytest.approx(1.5)


def _prepared(tmp_path, algorithm: str = "PPO"):
    text = replace(TINY_PPO, "env:\n", "connectors: [reward_scaling]\nenv:\n")
    path = tmp_path / "ppo.yaml"
    path.write_text(replace(text, "algorithm: PPO", f"algorithm: {algorithm}"))
    return prepare(load_experiment(path, ["training.gamma=0.97"]), step_env=False)


def _learner(run):
    spaces = {"default_policy": (run.env.observation_space, run.env.action_space)}
    return run.algo_config.build_learner(spaces=spaces)


def test_the_learner_keeps_the_statistics_in_its_checkpoint_state(tmp_path):
    run = _prepared(tmp_path)
    learner = _learner(run)
    [piece] = [p for p in learner._learner_connector.connectors if isinstance(p, RewardScaling)]
    assert piece.gamma == 0.97, "gamma is training.gamma unless the connector sets its own"
    piece.returns.update(np.array([3.0, 5.0]))
    state = learner.get_state()
    assert state[LEARNER_CONNECTOR]["RewardScaling"]["count"] == 2
    assert LEARNER_CONNECTOR not in learner.get_state(components="rl_module")
    only = learner.get_state(components=f"{LEARNER_CONNECTOR}/RewardScaling")
    assert LEARNER_CONNECTOR in only and "rl_module" not in only
    assert LEARNER_CONNECTOR not in learner.get_state(not_components=LEARNER_CONNECTOR)
    fresh = _learner(run)
    fresh.set_state(state)
    [restored] = [p for p in fresh._learner_connector.connectors if isinstance(p, RewardScaling)]
    assert restored.returns.mean == 4.0


def test_reward_scaling_is_refused_for_an_off_policy_algorithm(tmp_path):
    with pytest.raises(ConfigError, match="reward_scaling.*PPO, APPO, IMPALA.*not DQN"):
        _prepared(tmp_path, "DQN")
