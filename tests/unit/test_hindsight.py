"""Hindsight relabelling (rlplat/algorithms/hindsight.py) over real bit-flipping episodes
(envs/bit_flip.py) stored in the transition memory: a relabelled transition's goal is one its
own episode reached at that step or later, its reward and end are the env's for that goal, and
about k of every k + 1 transitions are relabelled. With ``normalize``, SAC's networks see
observations scaled by statistics of the replayed ones."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from envs.bit_flip import BitFlip
from rlplat.algorithms.hindsight import HindsightMemory, HindsightSettings
from rlplat.algorithms.networks import OBSERVATION_NORM
from rlplat.algorithms.sac import PaperCriticSACCatalog, SACModule
from rlplat.environments.goals import GoalFunctions, GoalLayout, goal_parts
from rlplat.environments.observations import FlatObservation

BITS = 6


def _episodes(count: int, seed: int = 0) -> list[SingleAgentEpisode]:
    env = FlatObservation(BitFlip(BITS))
    rng = np.random.default_rng(seed)
    episodes = []
    for number in range(count):
        obs, _ = env.reset(seed=seed * 1000 + number)
        episode = SingleAgentEpisode(
            observation_space=env.observation_space, action_space=env.action_space
        )
        episode.add_env_reset(obs)
        done = False
        while not done:
            action = int(rng.integers(BITS))
            obs, reward, terminated, truncated, _ = env.step(action)
            episode.add_env_step(obs, action, reward, terminated=terminated, truncated=truncated)
            done = terminated or truncated
        episodes.append(episode.to_numpy())
    return episodes


def _memory(strategy: str = "future", goals: int = 4) -> tuple[HindsightMemory, BitFlip]:
    env = BitFlip(BITS)
    layout = GoalLayout.of(env.observation_space)
    settings = HindsightSettings(strategy=strategy, goals_per_transition=goals)
    memory = HindsightMemory(10_000, 0, settings, layout, GoalFunctions.of(env))
    memory.add(_episodes(60))
    return memory, env


def test_the_layout_finds_the_goals_where_flattening_puts_them():
    env = BitFlip(BITS)
    layout = GoalLayout.of(env.observation_space)
    flat = FlatObservation(env)
    obs, _ = flat.reset(seed=1)
    raw = env._obs()
    np.testing.assert_array_equal(obs[layout.achieved], raw["achieved_goal"])
    np.testing.assert_array_equal(obs[layout.desired], raw["desired_goal"])


def test_an_env_as_training_builds_it_shows_its_goals_or_why_not():
    layout, problem = goal_parts(FlatObservation(BitFlip(BITS)))
    assert layout == GoalLayout.of(BitFlip(BITS).observation_space) and problem == ""
    layout, problem = goal_parts(gym.make("CartPole-v1"))
    assert layout is None and "not a Dict of observation, achieved_goal, desired_goal" in problem


def test_a_space_without_goals_is_refused_naming_what_is_missing():
    space = gym.spaces.Dict({"observation": gym.spaces.Box(0, 1, (2,))})
    with pytest.raises(ValueError, match="no achieved_goal, desired_goal"):
        GoalLayout.of(space)
    with pytest.raises(ValueError, match="observes a Dict"):
        GoalLayout.of(gym.spaces.Box(0, 1, (2,)))


@pytest.mark.parametrize("strategy", ["future", "final"])
def test_a_goal_comes_from_the_same_episode_at_that_step_or_later(strategy):
    memory, _ = _memory(strategy)
    columns = memory.rows
    rows = memory.draw_rows(2000)
    goal_rows = memory._goal_rows(rows)
    assert (columns["episode"][goal_rows] == columns["episode"][rows]).all()
    assert (columns["t"][goal_rows] >= columns["t"][rows]).all()
    if strategy == "final":
        assert columns["ends"][goal_rows].all()  # each of these episodes has ended
    else:  # every later step is chosen: the episode's own step and its last included
        assert (goal_rows == rows).any() and (columns["t"][goal_rows] > columns["t"][rows]).any()


def test_relabelled_rewards_and_ends_are_the_envs_for_the_new_goal():
    memory, env = _memory(goals=4)
    layout = memory.layout
    batch = memory.sample_batch(4000, 1, 0.99)
    achieved = batch["new_obs"][:, layout.achieved]
    goals = batch["obs"][:, layout.desired]
    np.testing.assert_array_equal(goals, batch["new_obs"][:, layout.desired])
    np.testing.assert_array_equal(batch["rewards"], env.compute_reward(achieved, goals, None))
    np.testing.assert_array_equal(
        batch["terminateds"], env.compute_terminated(achieved, goals, None)
    )
    # 4 goals per transition: 4 of 5 relabelled; the env's own goals are reached far less often.
    relabelled = memory.stats()["num_relabelled_lifetime"] / 4000
    assert 0.77 < relabelled < 0.83
    assert (batch["rewards"] == 0).mean() > 0.2


def test_without_hindsight_goals_the_batch_keeps_the_envs_rewards():
    memory, _ = _memory(goals=0)
    batch = memory.sample_batch(2000, 1, 0.99)
    assert memory.stats()["num_relabelled_lifetime"] == 0
    assert (batch["rewards"] == 0).mean() < 0.05


def _sac_module(observation_norm: bool) -> SACModule:
    model_config: dict = {"twin_q": True}
    if observation_norm:
        model_config[OBSERVATION_NORM] = {"clip": 10.0}
    module = RLModuleSpec(
        module_class=SACModule,
        catalog_class=PaperCriticSACCatalog,
        observation_space=gym.spaces.Box(-100.0, 100.0, (3,)),
        action_space=gym.spaces.Box(-1.0, 1.0, (2,)),
        model_config=model_config,
    ).build()
    module.make_target_networks()
    return module


def test_sac_with_normalize_sees_observations_scaled_by_the_replayed_ones_statistics():
    """replay.her.normalize: SAC's training batches move running statistics inside the module
    (the memory keeps raw goals), acting reads them, and the module's state carries them to env
    runners, checkpoints and exports."""
    rng = np.random.default_rng(0)
    module = _sac_module(observation_norm=True)
    batches = [rng.normal([5.0, -3.0, 50.0], [1.0, 2.0, 10.0], (256, 3)) for _ in range(3)]
    for rows in batches:
        obs = torch.tensor(rows, dtype=torch.float32)
        module.forward_train(
            {Columns.OBS: obs, Columns.NEXT_OBS: obs, Columns.ACTIONS: torch.zeros(256, 2)}
        )
    seen = np.concatenate(batches)
    norm = module.observation_norm
    np.testing.assert_allclose(norm.mean.numpy(), seen.mean(0), rtol=1e-4)
    np.testing.assert_allclose(norm.var.numpy(), seen.var(0), rtol=1e-3)

    # Acting on raw observations is acting on normalised ones (clipped at 10) without it.
    plain = _sac_module(observation_norm=False)
    plain.set_state({k: v for k, v in module.get_state().items() if "observation_norm" not in k})
    raw = torch.tensor([[5.0, -3.0, 50.0], [6.0, 1.0, 500.0]])
    scaled = ((raw - norm.mean) / norm.var.sqrt()).clamp(-10.0, 10.0)
    torch.testing.assert_close(
        module.forward_inference({Columns.OBS: raw})[Columns.ACTION_DIST_INPUTS],
        plain.forward_inference({Columns.OBS: scaled})[Columns.ACTION_DIST_INPUTS],
    )

    # An env runner's copy, given the learner's state, acts the same.
    runner_copy = _sac_module(observation_norm=True)
    runner_copy.set_state(module.get_state())
    torch.testing.assert_close(
        runner_copy.forward_inference({Columns.OBS: raw})[Columns.ACTION_DIST_INPUTS],
        module.forward_inference({Columns.OBS: raw})[Columns.ACTION_DIST_INPUTS],
    )
