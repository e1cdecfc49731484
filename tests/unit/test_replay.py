"""rlplat's transition-level replay sampler against RLlib's episode replay buffer."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer

from rlplat.algorithms.replay import TransitionEpisodeReplayBuffer

GAMMA = 0.9


def cartpole_episodes(count: int, seed: int = 0) -> list[SingleAgentEpisode]:
    """Random-action CartPole episodes: the first cut off (truncated) after 8 steps, the last
    still running, the others terminated."""
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    episodes = []
    for i in range(count):
        obs, info = env.reset(seed=seed + i)
        episode = SingleAgentEpisode(
            observation_space=env.observation_space, action_space=env.action_space
        )
        episode.add_env_reset(obs, info)
        done = False
        while not done:
            action = int(rng.integers(2))
            obs, reward, terminated, truncated, info = env.step(action)
            # Rewards that differ per step, so a wrong window or discount shows.
            reward = float(reward) + 0.01 * len(episode)
            running = i == count - 1 and len(episode) >= 6
            cut = i == 0 and len(episode) >= 7
            episode.add_env_step(
                obs,
                action,
                reward,
                {**info, "step": len(episode)},
                terminated=terminated and not running and not cut,
                truncated=(truncated or cut) and not running,
            )
            done = terminated or truncated or running or cut
        episodes.append(episode)
    return episodes


def filled(cls: type, episodes: list[SingleAgentEpisode]) -> EpisodeReplayBuffer:
    buffer = cls(capacity=100_000)
    buffer.add(episodes)
    buffer.rng = np.random.default_rng(7)
    return buffer


@pytest.mark.parametrize("n_step", [3, 5])
def test_transition_sampler_draws_rllibs_items_and_ends_n_step_returns_at_episode_ends(n_step):
    episodes = cartpole_episodes(12)
    ours = filled(TransitionEpisodeReplayBuffer, episodes).sample(
        num_items=600, n_step=n_step, gamma=GAMMA, sample_episodes=True
    )
    rllib = filled(EpisodeReplayBuffer, episodes).sample(
        num_items=600, n_step=n_step, gamma=GAMMA, sample_episodes=True
    )
    assert len(ours) == len(rllib) >= 600
    by_id = {episode.id_: episode for episode in episodes}
    near_end = 0
    for mine, theirs in zip(ours, rllib, strict=True):
        # The same transition drawn: episode, step, observation, action.
        assert (mine.id_, mine.t_started) == (theirs.id_, theirs.t_started)
        np.testing.assert_array_equal(mine.get_observations(0), theirs.get_observations(0))
        assert mine.get_actions(0) == theirs.get_actions(0)
        source, t = by_id[mine.id_], mine.t_started
        left = len(source) - t
        summed = min(n_step, left)
        expected = sum(GAMMA**k * source.get_rewards(t + k) for k in range(summed))
        assert np.isclose(mine.get_rewards(0), expected, rtol=1e-12)
        np.testing.assert_array_equal(
            mine.get_observations(-1), source.get_observations(t + summed)
        )
        assert mine.extra_model_outputs["n_step"][0] == summed
        assert mine.is_terminated == (source.is_terminated and left <= n_step)
        assert mine.is_truncated == (source.is_truncated and left <= n_step)
        assert mine.get_infos(-1) == source.get_infos(t + summed)
        if left >= n_step:  # a full n-step window: exactly RLlib's transition
            assert mine.get_rewards(0) == theirs.get_rewards(0)
            np.testing.assert_array_equal(mine.get_observations(-1), theirs.get_observations(-1))
            assert mine.is_terminated == theirs.is_terminated
            assert mine.is_truncated == theirs.is_truncated
            assert mine.get_infos(-1) == theirs.get_infos(-1)
            assert mine.extra_model_outputs["n_step"][0] == theirs.extra_model_outputs["n_step"][0]
        else:
            near_end += 1
    assert near_end > 0, "the sample covers transitions within n steps of an episode's end"
    assert any(item.is_truncated for item in ours), "and the end of a truncated episode"
