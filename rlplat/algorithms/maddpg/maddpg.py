"""MADDPG: ``MADDPGConfig`` (every setting) and ``MADDPG`` (the training loop), in one module as
RLlib keeps an algorithm and its config.

MADDPG (Lowe et al. 2017, "Multi-Agent Actor-Critic for Mixed Cooperative-Competitive
Environments") trains each policy's deterministic actor on its own agents' observations with a
critic that sees every agent's observation and action, so cooperative and competitive agents
learn against each other's current behaviour. Policies come from ``multi_agent.policies``
(shared, independent or patterns); each reward is the agent's own.

Defaults are those of the authors' code (github.com/openai/maddpg, ``experiments/train.py``)
unless a comment says otherwise. The YAML sets them under ``training:``; docs/maddpg.md explains
each one.

One ``training_step``: the env runners sample, the joint transitions go to the replay, and once
``num_steps_sampled_before_learning_starts`` are stored, one learner update of every trained
policy is made per ``env_steps_per_update`` new env steps, after which the env runners get the
new actors.
"""

# No ``from __future__ import annotations``: rlplat checks YAML values against these signatures.
from typing import Any, Literal

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import (
    REPLAY_BUFFER_RESULTS,
)

from rlplat.algorithms.actor_critic import actor_critic_problems, warmup_steps
from rlplat.algorithms.loop import OwedUpdates, sample_round, update_and_sync
from rlplat.algorithms.maddpg.joint_replay import JointReplay
from rlplat.algorithms.maddpg.learner import MADDPGTorchLearner
from rlplat.algorithms.maddpg.rl_module import MADDPGModule

Activation = Literal["relu", "tanh", "elu", "silu"]

# Settings the RL module needs (passed to it in its model_config).
MODULE_KEYS = (
    "actor_hiddens",
    "critic_hiddens",
    "hidden_activation",
    "exploration_noise",
    "joint_layout",
)


class MADDPGConfig(AlgorithmConfig):
    """Decentralised actors, centralised critics, for parallel multi-agent envs."""

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or MADDPG)
        self.actor_hiddens = [64, 64]  # num_units 64, two hidden layers
        self.critic_hiddens = [64, 64]
        self.hidden_activation: Activation = "relu"
        self.actor_lr = 1e-2
        self.critic_lr = 1e-2
        self.tau = 0.01  # target <- tau * online + (1 - tau) * target (their polyak 0.99)
        self.actor_reg = 1e-3  # weight of the mean square of the actor's raw output
        self.exploration_noise = 0.1  # rlplat's: std of Box actions' noise, in [-1, 1] units
        # Uniformly random actions for this many env steps; None: as many as
        # num_steps_sampled_before_learning_starts (rlplat's choice, as TD3).
        self.random_steps: int | None = None
        self.env_steps_per_update = 100  # one update of every trained policy per 100 env steps
        self.replay_capacity = 1_000_000  # env steps of joint transitions
        # batch_size x max_episode_len (1024 x 25) steps stored before the first update
        self.num_steps_sampled_before_learning_starts = 25_600
        # Every agent, in the env's order: {agent, policy, obs_dim, action_dim, discrete}.
        # rlplat sets it from the env and multi_agent.policies; not a YAML setting.
        self.joint_layout: list[dict[str, Any]] | None = None

        self.lr = None  # the actors and the critics have their own (actor_lr, critic_lr)
        self.gamma = 0.95
        self.grad_clip = 0.5
        self.grad_clip_by = "norm"  # per optimizer, as their clip_by_norm on each gradient
        self.train_batch_size_per_learner = 1024
        self.rollout_fragment_length = 100
        self.min_sample_timesteps_per_iteration = 1000  # rlplat's choice: 1,000 steps a report
        self.evaluation(evaluation_config=AlgorithmConfig.overrides(explore=False))

    def training(
        self,
        *,
        actor_hiddens: list[int] = NotProvided,
        critic_hiddens: list[int] = NotProvided,
        hidden_activation: Activation = NotProvided,
        actor_lr: float = NotProvided,
        critic_lr: float = NotProvided,
        tau: float = NotProvided,
        actor_reg: float = NotProvided,
        exploration_noise: float = NotProvided,
        random_steps: int | None = NotProvided,
        env_steps_per_update: float = NotProvided,
        replay_capacity: int = NotProvided,
        num_steps_sampled_before_learning_starts: int | None = NotProvided,
        **kwargs: Any,
    ) -> "MADDPGConfig":
        """MADDPG's own settings (see the attribute comments in ``__init__``) and the base ones."""
        super().training(**kwargs)
        for name, value in locals().items():
            if name not in ("self", "kwargs", "__class__") and value is not NotProvided:
                setattr(self, name, value)
        return self

    def validate(self) -> None:
        super().validate()
        problems = actor_critic_problems(self)
        if not self.joint_layout:
            problems.append("joint_layout is missing (rlplat sets it from a multi-agent env)")
        if self.env_steps_per_update <= 0:
            problems.append(
                f"training.env_steps_per_update must be positive, got {self.env_steps_per_update}"
            )
        needed = max(
            self.train_batch_size_per_learner, self.num_steps_sampled_before_learning_starts
        )
        if self.replay_capacity < needed:
            problems.append(
                f"training.replay_capacity ({self.replay_capacity}) must hold at least "
                f"training.train_batch_size_per_learner ({self.train_batch_size_per_learner}) "
                "and training.num_steps_sampled_before_learning_starts "
                f"({self.num_steps_sampled_before_learning_starts}) env steps"
            )
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def _model_config_auto_includes(self) -> dict[str, Any]:
        keys = {k: getattr(self, k) for k in MODULE_KEYS}
        return super()._model_config_auto_includes | keys | {"random_steps": warmup_steps(self)}

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=MADDPGModule)

    def get_default_learner_class(self) -> type:
        return MADDPGTorchLearner


class MADDPG(Algorithm):
    """MADDPG on RLlib's new API stack (see ``MADDPGConfig`` for the settings)."""

    config: MADDPGConfig

    @classmethod
    def get_default_config(cls) -> MADDPGConfig:
        return MADDPGConfig(cls)

    def setup(self, config: MADDPGConfig) -> None:
        super().setup(config)
        agents = [entry["agent"] for entry in config.joint_layout or []]
        self.joint_replay = JointReplay(config.replay_capacity, agents, seed=config.seed)
        self._owed_updates = OwedUpdates()

    def training_step(self) -> None:
        config = self.config
        episodes = sample_round(self)
        self.joint_replay.add(episodes)
        self.metrics.log_dict(
            {
                "steps_stored": len(self.joint_replay),
                "steps_not_aligned": self.joint_replay.skipped_steps,
            },
            key=REPLAY_BUFFER_RESULTS,
            window=1,
        )
        if len(self.joint_replay) < config.num_steps_sampled_before_learning_starts:
            return
        new_steps = sum(episode.env_steps() for episode in episodes)
        updates = self._owed_updates.add(new_steps / config.env_steps_per_update)
        update_and_sync(self, (self._replayed_batch() for _ in range(updates)))

    def _replayed_batch(self) -> MultiAgentBatch:
        """Joint rows for every trained policy's learner (the same rows: see learner.py)."""
        size = self.config.train_batch_size_per_learner
        rows = self.joint_replay.sample(size)
        trained = sorted(self.config.policies_to_train or self.config.policies)
        return MultiAgentBatch({policy: SampleBatch(rows) for policy in trained}, env_steps=size)
