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
from collections.abc import Callable
from typing import Any

from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from rlplat.algorithms.actor_critic import DeterministicActorCriticConfig
from rlplat.algorithms.base import OwnAlgorithmConfig, ReplayLoopAlgorithm
from rlplat.algorithms.maddpg.joint_replay import JointReplay
from rlplat.algorithms.maddpg.layout import joint_layout
from rlplat.algorithms.maddpg.learner import MADDPGTorchLearner
from rlplat.algorithms.maddpg.rl_module import MADDPGModule


class JointReplayConfig(OwnAlgorithmConfig):
    """The settings of an algorithm that learns from joint transitions (MADDPG, MASAC): how
    many env steps the replay holds and earn an update, and the joint layout of the agents."""

    LEARNING_STARTS = "num_steps_sampled_before_learning_starts"  # env steps stored

    env_steps_per_update: float = 100  # one update of every trained policy per 100 env steps
    replay_capacity: int = 1_000_000  # env steps of joint transitions

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class)
        # Every agent, in the env's order: {agent, policy, obs_dim, action_dim, discrete}.
        # rlplat sets it from the env and multi_agent.policies; not a YAML setting.
        self.joint_layout: list[dict[str, Any]] | None = None

    def fit_to_env(self, env: Any, policy_of: Callable[[str], Any]) -> None:
        self.joint_layout = joint_layout(
            env.agents or [], env.observation_spaces, env.action_spaces, policy_of
        )

    def problems(self) -> list[str]:
        problems = super().problems()
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
        return problems


class MADDPGConfig(JointReplayConfig, DeterministicActorCriticConfig):
    """Decentralised actors, centralised critics, for parallel multi-agent envs."""

    MODULE_CLASS = MADDPGModule
    LEARNER_CLASS = MADDPGTorchLearner
    MODULE_KEYS = (*DeterministicActorCriticConfig.MODULE_KEYS, "joint_layout")

    actor_hiddens = [64, 64]  # num_units 64, two hidden layers
    critic_hiddens = [64, 64]
    actor_lr = 1e-2
    critic_lr = 1e-2
    tau = 0.01  # target <- tau * online + (1 - tau) * target (their polyak 0.99)
    exploration_noise = 0.1  # rlplat's: std of Box actions' noise, in [-1, 1] units
    # batch_size x max_episode_len (1024 x 25) steps stored before the first update; as TD3
    # (rlplat's choice), random_steps None acts uniformly at random until then
    num_steps_sampled_before_learning_starts = 25_600
    actor_reg: float = 1e-3  # weight of the mean square of the actor's raw output

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or MADDPG)
        self.gamma = 0.95
        self.grad_clip = 0.5
        self.grad_clip_by = "norm"  # per optimizer, as their clip_by_norm on each gradient
        self.train_batch_size_per_learner = 1024
        self.rollout_fragment_length = 100


class MADDPG(ReplayLoopAlgorithm):
    """MADDPG on RLlib's new API stack (see ``MADDPGConfig`` for the settings)."""

    config_class = MADDPGConfig

    def make_replay_memory(self) -> JointReplay:
        agents = [entry["agent"] for entry in self.config.joint_layout or []]
        return JointReplay(self.config.replay_capacity, agents, seed=self.config.seed)

    def updates_earned(self, episodes: list[Any]) -> float:
        new_steps = sum(episode.env_steps() for episode in episodes)
        return new_steps / self.config.env_steps_per_update

    def replayed_batch(self) -> MultiAgentBatch:
        """Joint rows for every trained policy's learner (the same rows: see learner.py)."""
        size = self.config.train_batch_size_per_learner
        rows = self.replay_memory.sample(size)
        trained = sorted(self.config.policies_to_train or self.config.policies)
        return MultiAgentBatch({policy: SampleBatch(rows) for policy in trained}, env_steps=size)
