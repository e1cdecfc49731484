"""PQN: ``PQNConfig`` (every setting) and ``PQN`` (the training loop), in one module as RLlib
keeps an algorithm and its config.

PQN (Gallici et al., ICLR 2025, "Simplifying Deep Temporal Difference Learning") is Q-learning
without a replay buffer and without a target network: many envs step in parallel, a rollout of
``rollout_fragment_length`` steps from each is sampled epsilon-greedily, every step's Q-value is
fitted to its lambda-return over ``num_epochs`` epochs of minibatches, and the rollout is
discarded. Layer norm in the Q-network keeps this stable without a target network.

Defaults are those of CleanRL's ``cleanrl/pqn.py`` (CartPole: 4 envs x 128 steps, 4 epochs of
4 minibatches of 128, learning rate 2.5e-4, lambda 0.65, gradient norm clipped at 10, epsilon
1 -> 0.05 over the first half of 500,000 env steps, 120x84 hidden layers) unless a comment says
otherwise; CleanRL steps RAdam, which ``training.optimizer: {type: radam}`` selects. Unlike
CleanRL's, the returns bootstrap from max_a Q at a time-limit truncation (only termination ends
them), as RLlib's lambda-returns do.
The envs are ``resources.env_runners.envs`` (Gymnasium's vector env, or EnvPool's with
``env.backend: envpool``); the YAML sets the rest under ``training:``.
"""

# No ``from __future__ import annotations``: rlplat checks YAML values against these signatures.
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.utils.metrics import LEARNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

from rlplat.algorithms.base import OwnAlgorithmConfig, not_negative
from rlplat.algorithms.loop import env_steps_sampled, sample_round
from rlplat.algorithms.pqn.learner import PQNLearner
from rlplat.algorithms.pqn.rl_module import PQNModule
from rlplat.algorithms.shared_weights import sync_env_runners


class PQNConfig(OwnAlgorithmConfig):
    """PQN for Discrete actions."""

    MODULE_CLASS = PQNModule
    LEARNER_CLASS = PQNLearner
    MODULE_KEYS = ("hiddens", "epsilon_start", "epsilon_end", "epsilon_timesteps")

    hiddens: list[int] = [120, 84]  # flat observations; image frames take the Nature CNN
    q_lambda: float = 0.65
    epsilon_start: float = 1.0
    epsilon_end: float = 0.05
    epsilon_timesteps: int = 250_000  # env steps over which epsilon falls

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or PQN)
        self.lr = 2.5e-4
        self.gamma = 0.99
        self.grad_clip = 10.0
        self.grad_clip_by = "global_norm"
        self.num_envs_per_env_runner = 4
        self.rollout_fragment_length = 128
        self.train_batch_size_per_learner = 4 * 128
        self.minibatch_size = 128
        self.num_epochs = 4
        self.shuffle_batch_per_epoch = True

    def problems(self) -> list[str]:
        problems = super().problems()
        if not 0.0 <= self.q_lambda <= 1.0:
            problems.append(f"training.q_lambda must be in [0, 1], got {self.q_lambda}")
        for name in ("epsilon_start", "epsilon_end"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                problems.append(f"training.{name} must be in [0, 1], got {getattr(self, name)}")
        problems += not_negative(self, ["epsilon_timesteps"])
        return problems


class PQN(Algorithm):
    """One ``training_step``: every env runner samples one rollout from its envs, the learners
    make ``num_epochs`` passes over it in minibatches, and the env runners get the new weights."""

    config: PQNConfig

    @classmethod
    def get_default_config(cls) -> PQNConfig:
        return PQNConfig(cls)

    def training_step(self) -> None:
        episodes = sample_round(self)
        if not episodes:
            return
        results = self.learner_group.update(
            episodes=episodes,
            timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: env_steps_sampled(self)},
            num_epochs=self.config.num_epochs,
            minibatch_size=self.config.minibatch_size,
            shuffle_batch_per_epoch=self.config.shuffle_batch_per_epoch,
        )
        self.metrics.aggregate(results, key=LEARNER_RESULTS)
        sync_env_runners(self)
