"""MASAC: ``MASACConfig`` (every setting) and ``MASAC`` (MADDPG's training loop), in one module
as RLlib keeps an algorithm and its config.

MASAC is SAC for several agents with centralised critics: each policy's squashed-Gaussian actor
acts on its own agents' observations, two critics per policy see every agent's observation and
action (MADDPG's joint replay and layout), and an entropy temperature per policy is tuned to a
target entropy. BenchMARL ships it beside MADDPG (``benchmarl/algorithms/masac.py``); its
defaults there: two Q networks, soft target updates, the temperature learned from 1.0 towards
-dim(actions). Box actions only (MADDPG, MAPPO or QMIX for Discrete ones). The YAML sets
everything under ``training:``.
"""

# No ``from __future__ import annotations``: rlplat checks YAML values against these signatures.
from rlplat.algorithms.actor_critic import ActorCriticConfig
from rlplat.algorithms.maddpg.maddpg import MADDPG, JointReplayConfig
from rlplat.algorithms.masac.learner import MASACTorchLearner
from rlplat.algorithms.masac.rl_module import MASACModule


class MASACConfig(JointReplayConfig, ActorCriticConfig):
    """Squashed-Gaussian actors, twin centralised critics, for parallel multi-agent envs."""

    MODULE_CLASS = MASACModule
    LEARNER_CLASS = MASACTorchLearner
    MODULE_KEYS = (*ActorCriticConfig.MODULE_KEYS, "joint_layout", "initial_alpha")

    num_steps_sampled_before_learning_starts = 10_000
    tau: float = 0.005  # the critics' targets: target <- tau * online + (1 - tau) * target
    alpha_lr: float = 3e-4
    initial_alpha: float = 1.0  # the entropy temperature's start
    target_entropy: float | None = None  # None: -dim(actions)

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or MASAC)
        self.gamma = 0.99
        self.train_batch_size_per_learner = 256
        self.rollout_fragment_length = 100

    def problems(self) -> list[str]:
        problems = super().problems()
        if not 0.0 < self.tau <= 1.0:
            problems.append(f"training.tau must be in (0, 1], got {self.tau}")
        if self.initial_alpha <= 0:
            problems.append(f"training.initial_alpha must be positive, got {self.initial_alpha}")
        return problems


class MASAC(MADDPG):
    """MASAC on RLlib's new API stack (see ``MASACConfig`` for the settings); MADDPG's loop."""

    config_class = MASACConfig
