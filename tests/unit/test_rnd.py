"""Random Network Distillation (rlplat/algorithms/rnd.py) as PPO's learner computes it, on real
episodes through RLlib's learner connector pipeline, without Ray: the intrinsic return goes on
past an episode's end where the env's does not, the bonus is the novelty of the observation a
step reaches, and an update trains the predictor and leaves the random target as it was."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.evaluation.postprocessing import Postprocessing

from rlplat.algorithms.rnd import (
    INTRINSIC_REWARDS,
    INTRINSIC_VALUE_TARGETS,
    RND,
    RndPPOLearner,
    RndPPOModule,
    RndSettings,
    RunningMeanStd,
)
from rlplat.seams.rllib_learner import learner_connector

OBSERVATIONS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTIONS = gym.spaces.Discrete(2)
SETTINGS = RndSettings(gamma=0.9, hiddens=(8,), embedding_size=4)


def _learner():
    torch.manual_seed(0)
    config = (
        PPOConfig()
        .environment(observation_space=OBSERVATIONS, action_space=ACTIONS)
        .training(
            learner_class=RndPPOLearner,
            gamma=0.5,
            lambda_=1.0,
            train_batch_size_per_learner=16,
            minibatch_size=16,
            num_epochs=1,
        )
        .rl_module(
            rl_module_spec=RLModuleSpec(module_class=RndPPOModule),
            model_config={"fcnet_hiddens": [8], RND: SETTINGS.as_model_config()},
        )
        .debugging(seed=0)
    )
    return config.build_learner(spaces={DEFAULT_MODULE_ID: (OBSERVATIONS, ACTIONS)})


def _episode(steps: int, terminated: bool, seed: int) -> SingleAgentEpisode:
    rng = np.random.default_rng(seed)
    episode = SingleAgentEpisode(observation_space=OBSERVATIONS, action_space=ACTIONS)
    episode.add_env_reset(rng.uniform(-1, 1, 3).astype(np.float32))
    for step in range(steps):
        episode.add_env_step(
            rng.uniform(-1, 1, 3).astype(np.float32),
            int(rng.integers(2)),
            reward=1.0,
            terminated=terminated and step == steps - 1,
            extra_model_outputs={Columns.ACTION_LOGP: np.float32(-0.69),
                                 Columns.ACTION_DIST_INPUTS: np.zeros(2, np.float32)},
        )
    return episode.to_numpy()


def test_running_statistics_are_those_of_everything_seen():
    stats, seen = RunningMeanStd((2,)), []
    for seed in range(3):
        batch = torch.as_tensor(np.random.default_rng(seed).normal(seed, 2.0, (50, 2)))
        stats.update(batch.float())
        seen.append(batch)
    every = torch.cat(seen).float()
    torch.testing.assert_close(stats.mean, every.mean(0), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(stats.var, every.var(0, unbiased=False), rtol=1e-3, atol=1e-3)


def test_the_intrinsic_return_goes_on_past_an_episode_end_the_extrinsic_does_not():
    learner = _learner()
    module = learner.module[DEFAULT_MODULE_ID]
    episodes = [_episode(3, terminated=True, seed=1), _episode(4, terminated=False, seed=2)]
    batch = learner_connector(learner)(
        rl_module=learner.module, batch={}, episodes=episodes, shared_data={}
    )[DEFAULT_MODULE_ID]
    # Rows: episode 1's 3 steps and its added bootstrap row, then episode 2's 4 and its row.
    assert batch[Columns.OBS].shape[0] == 9
    with torch.no_grad():
        values = module.vf(module.critic_embeddings(batch)).squeeze(-1)
        intrinsic = module.intrinsic_values(module.critic_embeddings(batch))
        novelty = module.rnd.errors(batch[Columns.OBS])
    last = 2  # episode 1's terminating step
    targets, intrinsic_targets = batch[Postprocessing.VALUE_TARGETS], batch[INTRINSIC_VALUE_TARGETS]
    assert targets[last].item() == pytest.approx(1.0)  # the env's return ends: no bootstrap
    bonus = batch[INTRINSIC_REWARDS]
    assert intrinsic_targets[last].item() == pytest.approx(
        bonus[last].item() + SETTINGS.gamma * intrinsic[last + 1].item(), rel=1e-5
    )
    # Episode 2 was cut, not ended: both returns bootstrap from its bootstrap row.
    assert targets[7].item() == pytest.approx(1.0 + 0.5 * values[8].item(), rel=1e-5)
    # A step's bonus is the novelty of the observation it reaches, on one scale for the batch;
    # the bootstrap rows earn none.
    scale = novelty[1:4] / bonus[0:3]
    torch.testing.assert_close(scale, scale[0].expand(3))
    torch.testing.assert_close(novelty[5:9] / bonus[4:8], scale[0].expand(4))
    assert bonus[3].item() == bonus[8].item() == 0.0


def test_an_update_trains_the_predictor_and_leaves_the_target():
    learner = _learner()
    module = learner.module[DEFAULT_MODULE_ID]
    target = [p.detach().clone() for p in module.rnd.target.parameters()]
    predictor = [p.detach().clone() for p in module.rnd.predictor.parameters()]
    learner.update(episodes=[_episode(8, terminated=True, seed=3), _episode(8, False, seed=4)])
    for before, after in zip(target, module.rnd.target.parameters(), strict=True):
        torch.testing.assert_close(before, after)
    assert any(
        not torch.equal(before, after)
        for before, after in zip(predictor, module.rnd.predictor.parameters(), strict=True)
    )
    assert module.rnd.observations.count.item() > 16  # the statistics saw the batch
    # Both running statistics are module state: checkpoints carry them.
    state = module.get_state()
    assert {"rnd.observations.mean", "rnd.returns.var"} <= set(state)
    # None of RND is on the acting path that env runners and exports receive.
    acting = module.get_state(inference_only=True)
    assert acting and not [key for key in acting if key.startswith(("rnd.", "intrinsic_vf."))]


def test_settings_round_trip_through_the_model_config():
    assert RndSettings.of({RND: SETTINGS.as_model_config()}) == SETTINGS
    assert RndSettings.of({}) is None
    assert dataclasses.asdict(RndSettings()) == {
        **dataclasses.asdict(RndSettings.of({RND: {}})),
    }
