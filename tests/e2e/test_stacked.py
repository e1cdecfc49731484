"""Stacked seeds (issue 104) through RLlib's own Algorithm: ``StackedPPO`` trains three CartPole
seeds in one process, each seed learning on its own (its own returns, its own curve)."""

from __future__ import annotations

import torch

from rlplat.algorithms.stacked_ppo import SEED_RESULTS, StackedPPOConfig


def test_three_stacked_seeds_each_learn_cartpole(ray_session):
    # The settings of experiments/cartpole_ppo.yaml (16 envs per seed); each seed's return over
    # its last 20 episodes, where the untrained policy scores ~20.
    config = (
        StackedPPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=16)
        .training(
            lr=0.001,
            gamma=0.98,
            lambda_=0.8,
            train_batch_size_per_learner=1000,
            minibatch_size=256,
            num_epochs=12,
            clip_param=0.2,
            vf_clip_param=1000.0,
            vf_loss_coeff=0.5,
            entropy_coeff=0.0,
            grad_clip=0.5,
        )
        .rl_module(model_config={"fcnet_hiddens": [64, 64], "vf_share_layers": False})
        .reporting(metrics_num_episodes_for_smoothing=20)
        .debugging(seed=0)
        .stacked(seeds=[0, 1, 2])
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    algo = config.build()
    try:
        curves = []
        for _ in range(22):
            result = algo.train()
            per_seed = result["env_runners"][SEED_RESULTS]
            curves.append([per_seed[str(i)].get("episode_return_mean", 0.0) for i in range(3)])
        assert result["env_runners"]["num_env_steps_sampled_lifetime"] == 22 * 1008
        best = [max(curve[i] for curve in curves if curve[i] == curve[i]) for i in range(3)]
        assert all(score >= 150 for score in best), best
        assert len(set(curves[0])) == 3, curves[0]  # each seed its own envs and networks
    finally:
        algo.stop()
        torch.set_num_threads(threads)
