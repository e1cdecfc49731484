"""CrossQ: ``CrossQConfig`` (every setting) and ``CrossQ`` (the training loop), in one module as
RLlib keeps an algorithm and its config.

CrossQ (Bhatt et al., ICLR 2024, "CrossQ: Batch Normalization in Deep Reinforcement Learning for
Greater Sample Efficiency and Simplicity") is SAC without target networks: batch
renormalisation in the actor and the critics, the critics run once over current and next
transitions together, wider critics (2048 units), Adam's beta1 at 0.5 and an actor update every
``policy_delay`` critic updates. At one update per env step it matched the sample efficiency
that REDQ and DroQ reached with 20.

Defaults are those of the paper and its reference code (github.com/adityab/CrossQ, ``train.py``)
as RL Zoo sets them for MuJoCo (rl-baselines3-zoo ``hyperparams/crossq.yml``, HalfCheetah-v4):
learning rates 1e-3, batch 256, 5,000 random steps before learning, critics of 2048x2048, actor
256x256, policy delay 3; the batch renormalisation's in ``rlplat/algorithms/networks.py``. The
YAML sets them under ``training:``. The loop is DQN's, as TD3's.
"""

# No ``from __future__ import annotations``: rlplat checks YAML values against these signatures.
from ray.rllib.algorithms.dqn.dqn import DQN

from rlplat.algorithms.actor_critic import ActorCriticConfig
from rlplat.algorithms.base import at_least_one, not_negative
from rlplat.algorithms.crossq.learner import CrossQLearner
from rlplat.algorithms.crossq.rl_module import CrossQModule
from rlplat.algorithms.transition_loop import TransitionBatchLoop, TransitionReplayConfig


class CrossQConfig(TransitionReplayConfig, ActorCriticConfig):
    """CrossQ for continuous (Box) actions."""

    MODULE_CLASS = CrossQModule
    LEARNER_CLASS = CrossQLearner
    MODULE_KEYS = (
        *ActorCriticConfig.MODULE_KEYS,
        "initial_alpha",
        "batch_norm_momentum",
        "batch_renorm_warmup",
    )

    critic_hiddens = [2048, 2048]
    actor_lr = 1e-3
    critic_lr = 1e-3
    num_steps_sampled_before_learning_starts = 5000
    alpha_lr: float = 1e-3
    initial_alpha: float = 1.0  # the entropy temperature's start
    target_entropy: float | None = None  # None: -dim(actions)
    policy_delay: int = 3  # critic updates per actor and temperature update
    adam_beta1: float = 0.5  # the actor's and the critics' Adam beta1
    batch_norm_momentum: float = 0.01  # running statistics move this share to each batch's
    batch_renorm_warmup: int = 100_000  # training passes of plain batch norm before the renorm

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or CrossQ)

    def problems(self) -> list[str]:
        problems = super().problems()
        problems += at_least_one(self, ["policy_delay"])
        if self.initial_alpha <= 0:
            problems.append(f"training.initial_alpha must be positive, got {self.initial_alpha}")
        if not 0.0 < self.batch_norm_momentum <= 1.0:
            problems.append(
                f"training.batch_norm_momentum must be in (0, 1], got {self.batch_norm_momentum}"
            )
        if not 0.0 <= self.adam_beta1 < 1.0:
            problems.append(f"training.adam_beta1 must be in [0, 1), got {self.adam_beta1}")
        problems += not_negative(self, ["batch_renorm_warmup"])
        if self.train_batch_size_per_learner < 2:
            problems.append(
                "training.train_batch_size_per_learner must be at least 2: batch "
                f"renormalisation needs a batch variance, got {self.train_batch_size_per_learner}"
            )
        return problems


class CrossQ(TransitionBatchLoop, DQN):
    """CrossQ on RLlib's new API stack (see ``CrossQConfig`` for the settings); DQN's loop."""

    config: CrossQConfig

    @classmethod
    def get_default_config(cls) -> CrossQConfig:
        return CrossQConfig(cls)
