"""QMIX, VDN and IQL: ``QMIXConfig`` (every setting) and ``QMIX`` (the training loop), in one
module as RLlib keeps an algorithm and its config.

``QMIXConfig`` holds every QMIX/VDN/IQL setting, with pymarl's published QMIX defaults.

Each default below is pymarl's (``default.yaml`` + ``qmix.yaml``) unless its comment says
otherwise; the YAML sets them under ``training:``. docs/qmix.md explains each one.

``QMIX`` collects whole episodes, replays batches of them and syncs the env runners. One
``training_step``: every env runner plays complete episodes (greedy w.p. 1 - epsilon), they
are stored whole, then ``updates_per_episode`` learner updates per new episode are made on
batches of ``batch_episodes`` stored episodes, and the new weights go to the env runners.
``min_sample_timesteps_per_iteration`` groups many such steps into one reported iteration.
"""

# No ``from __future__ import annotations``: rlplat checks YAML values against these signatures.
from typing import Any, Literal

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.connectors.env_to_module import (
    AddObservationsFromEpisodesToBatch,
    AddStatesFromEpisodesToBatch,
    AddTimeDimToBatchAndZeroPad,
    BatchIndividualItems,
    NumpyToTensor,
)
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

from rlplat.algorithms.base import OwnAlgorithmConfig, ReplayLoopAlgorithm, pieces_within
from rlplat.algorithms.qmix.connectors import TeamActionsToEnv, TeamObservationsToModule
from rlplat.algorithms.qmix.env_runner import EpisodeEnvRunner
from rlplat.algorithms.qmix.episode_store import EpisodeStore
from rlplat.algorithms.qmix.learner import QMIXTorchLearner
from rlplat.algorithms.qmix.rl_module import QMIXModule
from rlplat.environments.team import (
    DEFAULT_GLOBAL_STATE,
    DEFAULT_TEAM_REWARD,
    GlobalState,
    TeamReward,
)

Mixer = Literal["qmix", "vdn", "none"]
# RLlib's default module-to-env pieces: a pipeline of these only has no custom piece to keep.
RLLIB_MODULE_TO_ENV = frozenset(
    {
        "GetActions",
        "ListifyDataForVectorEnv",
        "ModuleToAgentUnmapping",
        "NormalizeAndClipActions",
        "RemoveSingleTsTimeRankFromBatch",
        "TensorToNumpy",
        "UnBatchToIndividualItems",
    }
)


class QMIXConfig(OwnAlgorithmConfig):
    """Value factorisation for cooperative teams: QMIX (monotonic mixer), VDN (sum) or IQL (none).

    One agent network is shared by all agents (agent-id one-hot and last action as extra inputs)
    and learns from batches of whole episodes with double-Q targets from target networks.
    """

    MODULE_CLASS = QMIXModule
    LEARNER_CLASS = QMIXTorchLearner
    LEARNING_STARTS = "learning_starts_episodes"  # episodes stored
    MODULE_KEYS = (
        "mixer",
        "mixing_embed_dim",
        "hypernet_embed_dim",
        "hypernet_layers",
        "agent_hidden_dim",
        "recurrent",
        "obs_agent_id",
        "obs_last_action",
        "epsilon_start",
        "epsilon_finish",
        "epsilon_anneal_steps",
    )

    # Mixer: "qmix" = monotonic hypernetwork mixer conditioned on the global state
    # (Rashid et al. 2018); "vdn" = sum of agent Qs (Sunehag et al. 2018); "none" = each agent
    # learns its own Q from the team reward (independent Q-learning).
    mixer: Mixer = "qmix"
    mixing_embed_dim: int = 32  # width of the mixer's hidden layer
    hypernet_embed_dim: int = 64  # hidden width of the 2-layer hypernetworks
    hypernet_layers: Literal[1, 2] = 2
    agent_hidden_dim: int = 64  # GRU (or feed-forward) width of the agent network
    recurrent: bool = True  # GRU agents; False: a feed-forward agent network
    obs_agent_id: bool = True  # append the agent's one-hot id to its input
    obs_last_action: bool = True  # append the agent's previous action (one-hot)
    double_q: bool = True  # online net picks the next action, target net values it
    target_update_interval: int = 200  # learner updates between target-network updates
    tau: float = 1.0  # 1.0: hard copy; < 1: Polyak averaging (e.g. interval 1, tau 0.005)
    epsilon_start: float = 1.0
    epsilon_finish: float = 0.05
    epsilon_anneal_steps: int = 50_000  # env steps of the linear epsilon schedule
    td_lambda: float = 0.0  # 0: one-step targets; > 0: TD(lambda) over each episode
    standardise_rewards: bool = False  # scale rewards by a running mean and std
    optimizer: Literal["adam", "rmsprop"] = "adam"  # as pymarl2; pymarl's: rmsprop
    batch_episodes: int = 32  # whole episodes per learner update
    buffer_episodes: int = 5000  # replay capacity, in episodes
    learning_starts_episodes: int = 32  # stored episodes before the first update
    updates_per_episode: float = 1.0  # learner updates per collected episode (pymarl: 1)
    team_reward: TeamReward = DEFAULT_TEAM_REWARD  # sum
    global_state: GlobalState = DEFAULT_GLOBAL_STATE  # auto: env.state(), else obs

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or QMIX)
        self.lr = 5e-4
        self.gamma = 0.99
        self.grad_clip = 10.0
        self.grad_clip_by = "global_norm"
        self.batch_mode = "complete_episodes"
        self.env_runner_cls = EpisodeEnvRunner
        self.min_sample_timesteps_per_iteration = 1000
        self.evaluation(evaluation_config=AlgorithmConfig.overrides(explore=False))

    def problems(self) -> list[str]:
        problems = super().problems()
        if not 0.0 <= self.epsilon_finish <= self.epsilon_start <= 1.0:
            problems.append("need 0 <= epsilon_finish <= epsilon_start <= 1")
        if not 0.0 < self.tau <= 1.0:
            problems.append(f"tau must be in (0, 1], got {self.tau}")
        if not 0.0 <= self.td_lambda <= 1.0:
            problems.append(f"td_lambda must be in [0, 1], got {self.td_lambda}")
        for name in ("batch_episodes", "buffer_episodes", "target_update_interval"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.buffer_episodes < self.batch_episodes:
            problems.append(
                f"buffer_episodes ({self.buffer_episodes}) must hold at least one batch "
                f"(batch_episodes {self.batch_episodes})"
            )
        if self.learning_starts_episodes < self.batch_episodes:
            problems.append("learning_starts_episodes must be at least batch_episodes")
        if self.updates_per_episode <= 0:
            problems.append("updates_per_episode must be positive")
        if self.batch_mode != "complete_episodes":
            problems.append(
                "batch_mode must be complete_episodes (QMIX learns from whole episodes)"
            )
        return problems

    def build_env_to_module_connector(
        self, env: Any = None, spaces: Any = None, device: Any = None
    ) -> ConnectorV2:
        """RLlib's pipeline with its default pieces replaced by one team piece (see
        ``connectors.py``); pieces from the experiment's ``connectors:`` stay in front."""
        pipeline = super().build_env_to_module_connector(env, spaces, device)
        if self.add_default_connectors_to_env_to_module_pipeline:
            for piece in (
                AddObservationsFromEpisodesToBatch,
                AddTimeDimToBatchAndZeroPad,
                AddStatesFromEpisodesToBatch,
                BatchIndividualItems,
                NumpyToTensor,
            ):
                pipeline.remove(piece)
            pipeline.append(TeamObservationsToModule(device=device))
        return pipeline

    def build_module_to_env_connector(self, env: Any = None, spaces: Any = None) -> ConnectorV2:
        """One team piece instead of RLlib's defaults, unless custom pieces were configured."""
        pipeline = super().build_module_to_env_connector(env, spaces)
        if self.add_default_connectors_to_module_to_env_pipeline and pieces_within(
            pipeline, RLLIB_MODULE_TO_ENV
        ):
            for piece in list(pipeline.connectors):
                pipeline.remove(type(piece))
            pipeline.append(TeamActionsToEnv())
        return pipeline


class QMIX(ReplayLoopAlgorithm):
    """QMIX / VDN / IQL on RLlib's new API stack (see ``QMIXConfig`` for the settings)."""

    config_class = QMIXConfig

    def make_replay_memory(self) -> EpisodeStore:
        return EpisodeStore(self.config.buffer_episodes, seed=self.config.seed)

    def updates_earned(self, episodes: list[Any]) -> float:
        return len(episodes) * self.config.updates_per_episode

    def replayed_batch(self) -> MultiAgentBatch:
        arrays = self.replay_memory.sample(self.config.batch_episodes)
        return MultiAgentBatch(
            {DEFAULT_MODULE_ID: SampleBatch(arrays)}, env_steps=int(arrays["filled"].sum())
        )
