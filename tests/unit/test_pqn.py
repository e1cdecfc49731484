"""PQN without training: its lambda-return targets on a hand-made episode, the loss over the
sampled steps only, and epsilon-greedy acting."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.evaluation.postprocessing import Postprocessing

from rlplat.algorithms.pqn import PQNConfig

OBS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
ACTIONS = gym.spaces.Discrete(3)
MODULE = "default_policy"
GAMMA, LAMBDA = 0.9, 0.5


def pqn_learner(**training: object):
    config = PQNConfig().environment(observation_space=OBS, action_space=ACTIONS)
    config.training(hiddens=[8], gamma=GAMMA, q_lambda=LAMBDA, **training)
    return config, config.build_learner(spaces={MODULE: (OBS, ACTIONS)})


def learner_batch(learner, terminated: bool) -> tuple[dict, np.ndarray]:
    """A 3-step episode chunk (rewards 1, 2, 3) through the learner's connector pipeline."""
    observations = np.random.default_rng(0).uniform(-1, 1, (4, 2)).astype(np.float32)
    episode = SingleAgentEpisode(
        observations=list(observations),
        actions=[0, 1, 2],
        rewards=[1.0, 2.0, 3.0],
        terminated=terminated,
        len_lookback_buffer=0,
        observation_space=OBS,
        action_space=ACTIONS,
    )
    episode.to_numpy()
    batch = learner._learner_connector(
        rl_module=learner.module, episodes=[episode], batch={}, metrics=learner.metrics
    )
    return batch[MODULE], observations


@pytest.mark.parametrize("terminated", [False, True], ids=["chunk ends", "episode ends"])
def test_targets_are_lambda_returns_bootstrapped_from_the_max_q_value(terminated):
    _, learner = pqn_learner()
    batch, observations = learner_batch(learner, terminated)
    with torch.no_grad():
        values = learner.module[MODULE].q(torch.as_tensor(observations)).max(-1).values.numpy()
    # G_2 = r_2 + gamma max_a Q(s_3, a) (none if s_3 is terminal);
    # G_t = r_t + gamma ((1 - lambda) max_a Q(s_{t+1}, a) + lambda G_{t+1}).
    g2 = 3.0 + (0.0 if terminated else GAMMA * values[3])
    g1 = 2.0 + GAMMA * ((1 - LAMBDA) * values[2] + LAMBDA * g2)
    g0 = 1.0 + GAMMA * ((1 - LAMBDA) * values[1] + LAMBDA * g1)
    targets = batch[Postprocessing.VALUE_TARGETS].numpy()
    assert targets[:3] == pytest.approx([g0, g1, g2], rel=1e-5)
    assert batch[Columns.LOSS_MASK].tolist() == [True, True, True, False], (
        "the bootstrap step is no sample"
    )


def test_the_loss_is_the_mean_squared_error_of_the_sampled_steps_only():
    config, learner = pqn_learner()
    batch, _ = learner_batch(learner, terminated=False)
    module = learner.module[MODULE]
    fwd_out = module.forward_train(batch)
    loss = learner.compute_loss_for_module(
        module_id=MODULE, config=config, batch=batch, fwd_out=fwd_out
    )
    q = fwd_out["q_values"][torch.arange(3), torch.tensor([0, 1, 2])]
    expected = ((q - batch[Postprocessing.VALUE_TARGETS][:3]) ** 2).mean()
    assert float(loss) == pytest.approx(float(expected), rel=1e-6)


def test_epsilon_falls_linearly_to_its_end_and_each_action_is_random_that_often():
    config = PQNConfig().environment(observation_space=OBS, action_space=ACTIONS)
    config.training(epsilon_start=1.0, epsilon_end=0.1, epsilon_timesteps=1000)
    module = config.get_rl_module_spec(spaces={MODULE: (OBS, ACTIONS)}).build()
    assert [module.epsilon(t) for t in (0, 500, 1000, 5000)] == pytest.approx([1, 0.55, 0.1, 0.1])
    obs = {Columns.OBS: torch.zeros((20_000, 2))}
    greedy = int(module.forward_inference(obs)[Columns.ACTION_DIST_INPUTS][0].argmax())
    torch.manual_seed(0)
    actions = module.forward_exploration(obs, t=500)[Columns.ACTIONS]
    # Greedy with probability 1 - 0.55, and a third of the random draws land on it too.
    share = float((actions == greedy).float().mean())
    assert share == pytest.approx(0.45 + 0.55 / 3, abs=0.015)
