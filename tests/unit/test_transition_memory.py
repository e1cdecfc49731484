"""rlplat's array replay memory gives the n-step transitions the episode sampler gives."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rlplat.algorithms.base import pieces_within
from rlplat.algorithms.replay import transition
from rlplat.algorithms.transition_loop import TRANSITION_PIECES, DQNConfig
from rlplat.algorithms.transition_memory import TransitionMemory
from rlplat.environments.reward_scaling import RewardScaling
from tests.unit.test_replay import GAMMA, cartpole_episodes


def interleaved_chunks(episodes: list[SingleAgentEpisode], size: int) -> list[SingleAgentEpisode]:
    """The episodes cut into chunks of ``size`` steps, handed over as an env runner with one env
    per episode would: the first chunk of each, then the second of each, and so on."""
    rounds = max(len(episode) for episode in episodes) // size + 1
    return [
        episode.slice(slice(start, min(start + size, len(episode))), len_lookback_buffer=0)
        for start in range(0, size * rounds, size)
        for episode in episodes
        if start < len(episode)
    ]


def assert_matches_the_item_sampler(
    memory: TransitionMemory, episodes: list[SingleAgentEpisode], n_step: int
) -> int:
    """Every stored step's transition equals ``transition``'s from the whole episode; the
    number of steps checked."""
    by_id = {episode.id_: episode for episode in episodes}
    checked = 0
    for episode_id, first, rows in memory.episodes():
        source = by_id[episode_id]
        columns = memory.transitions(np.array(rows), n_step, GAMMA)
        for i, t in enumerate(range(first, first + len(rows))):
            item = transition(source, t, n_step, GAMMA, 0, False)
            np.testing.assert_allclose(columns["obs"][i], item.get_observations(0), rtol=1e-6)
            np.testing.assert_allclose(columns["new_obs"][i], item.get_observations(-1), rtol=1e-6)
            assert columns["actions"][i] == item.get_actions(0)
            assert np.isclose(columns["rewards"][i], item.get_rewards(0), rtol=1e-6)
            assert columns["terminateds"][i] == item.is_terminated
            assert columns["truncateds"][i] == item.is_truncated
            assert columns["n_step"][i] == item.extra_model_outputs["n_step"][0]
            checked += 1
    return checked


@pytest.mark.parametrize("n_step", [1, 3])
def test_each_stored_step_is_the_item_samplers_transition(n_step):
    """Chunks of six episodes arrive interleaved (terminated, truncated and one still running):
    each step's n-step transition follows its own episode across the chunks."""
    episodes = cartpole_episodes(6)
    memory = TransitionMemory(capacity=10_000, seed=0)
    memory.add(interleaved_chunks(episodes, 3))
    assert len(memory) == sum(len(episode) for episode in episodes)
    assert assert_matches_the_item_sampler(memory, episodes, n_step) == len(memory)
    assert memory.stats()["num_episodes_added_lifetime"] == 6


def test_a_full_memory_keeps_the_newest_steps_and_their_transitions():
    episodes = cartpole_episodes(8)
    memory = TransitionMemory(capacity=40, seed=0)
    chunks = interleaved_chunks(episodes, 4)
    memory.add(chunks)
    assert len(memory) == 40
    newest = [  # the last 40 steps added, in order
        (chunk.id_, chunk.t_started + t) for chunk in chunks for t in range(len(chunk))
    ][-40:]
    stored = [
        (episode_id, first + i)
        for episode_id, first, rows in memory.episodes()
        for i in range(len(rows))
    ]
    assert sorted(stored) == sorted(newest)
    assert assert_matches_the_item_sampler(memory, episodes, 3) == 40


def test_a_restored_memory_draws_the_same_batches_and_continues_its_episodes():
    """A checkpoint's state, restored into a new memory (the same or a smaller capacity): the
    same batches drawn, and an unfinished episode's next chunk still joins its steps."""
    episodes = cartpole_episodes(6)
    chunks = interleaved_chunks(episodes, 3)
    split = len(chunks) - 3  # the last chunks come after the restore
    memory = TransitionMemory(capacity=500, seed=3)
    memory.add(chunks[:split])
    state = memory.get_state()
    restored = TransitionMemory(capacity=500, seed=99)
    restored.set_state(state)
    first, again = memory.sample_batch(64, 3, GAMMA), restored.sample_batch(64, 3, GAMMA)
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    restored.add(chunks[split:])
    assert assert_matches_the_item_sampler(restored, episodes, 3) == len(restored)

    smaller = TransitionMemory(capacity=20, seed=0)
    smaller.set_state(state)
    assert len(smaller) == 20
    smaller.add(chunks[split:])
    assert assert_matches_the_item_sampler(smaller, episodes, 3) == len(smaller)


def test_sample_batch_is_a_float32_train_batch_drawn_reproducibly():
    episodes = cartpole_episodes(12)
    batches = []
    for _ in range(2):
        memory = TransitionMemory(capacity=1000, seed=7)
        memory.add(episodes)
        batches.append(memory.sample_batch(64, 3, GAMMA))
    first, again = batches
    assert {len(column) for column in first.values()} == {64}
    assert first["obs"].dtype == first["rewards"].dtype == np.float32
    np.testing.assert_array_equal(first["weights"], np.ones(64))
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    assert memory.stats()["num_env_steps_sampled_lifetime"] == 64


def test_a_learner_pipeline_with_other_pieces_keeps_rllibs_replay():
    """Only RLlib's feed-forward learner pieces (what a memory batch holds) replay from the
    memory: a pipeline with another learner piece (here rlplat's reward scaling) keeps RLlib's
    loop."""
    env = gym.make("CartPole-v1")
    spaces = (env.observation_space, env.action_space)
    config = DQNConfig().environment("CartPole-v1")
    assert pieces_within(config.build_learner_connector(*spaces), TRANSITION_PIECES)
    scaled = config.copy().learners(learner_connector=lambda *_: RewardScaling())
    assert not pieces_within(scaled.build_learner_connector(*spaces), TRANSITION_PIECES)
