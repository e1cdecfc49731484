"""TD3 and DDPG: ``TD3Config`` (every setting) and ``TD3`` (the training loop), in one module as
RLlib keeps an algorithm and its config.

TD3 (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic Methods")
is DDPG with three changes: twin critics whose minimum is the target (``twin_q``), noise on the
target action (``target_noise``, ``target_noise_clip``) and an actor and target update only
every ``policy_delay`` critic updates. Turning all three off gives DDPG (Lillicrap et al. 2016)
as Fujimoto et al. ran it ("OurDDPG" in their code): ``DDPGConfig`` is exactly that.

Defaults are those of the authors' reference code (github.com/sfujim/TD3, ``main.py`` and
``TD3.py``) unless a comment says otherwise; the YAML sets them under ``training:``.

The loop is DQN's (and SAC's): sample from the env runners into the replay buffer, then make
``training_intensity``-paced learner updates on replayed batches and send the weights back.
"""

# No ``from __future__ import annotations``: rlplat checks YAML values against these signatures.
from typing import Any, Literal

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.algorithms.dqn.dqn import DQN
from ray.rllib.connectors.common.add_observations_from_episodes_to_batch import (
    AddObservationsFromEpisodesToBatch,
)
from ray.rllib.connectors.learner.add_next_observations_from_episodes_to_train_batch import (
    AddNextObservationsFromEpisodesToTrainBatch,
)
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from rlplat.algorithms.actor_critic import actor_critic_problems, warmup_steps
from rlplat.algorithms.td3.learner import TD3TorchLearner
from rlplat.algorithms.td3.rl_module import TD3Module

Activation = Literal["relu", "tanh", "elu", "silu"]

# Settings the RL module needs (passed to it in its model_config).
MODULE_KEYS = (
    "actor_hiddens",
    "critic_hiddens",
    "hidden_activation",
    "twin_q",
    "exploration_noise",
    "target_noise",
    "target_noise_clip",
)


class TD3Config(AlgorithmConfig):
    """Twin Delayed DDPG for continuous (Box) actions; DDPG by its three switches."""

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or TD3)
        self.twin_q = True  # two critics, the smaller target value is used
        self.policy_delay = 2  # critic updates per actor (and target) update
        self.target_noise = 0.2  # std of the target action's noise, in [-1, 1] action units
        self.target_noise_clip = 0.5
        self.exploration_noise = 0.1  # std of the acting noise, in [-1, 1] action units
        # Uniformly random actions for this many env steps; None: as many as
        # num_steps_sampled_before_learning_starts (the reference code's start_timesteps).
        self.random_steps: int | None = None
        self.actor_hiddens = [256, 256]
        self.critic_hiddens = [256, 256]
        self.hidden_activation: Activation = "relu"
        self.actor_lr = 3e-4
        self.critic_lr = 3e-4
        self.tau = 0.005  # target networks: target <- tau * online + (1 - tau) * target
        self.n_step = 1
        self.training_intensity = None  # replayed / sampled; None: one update per sampling call
        self.num_steps_sampled_before_learning_starts = 25_000
        self.replay_buffer_config = {"type": "EpisodeReplayBuffer", "capacity": 1_000_000}
        self.store_buffer_in_checkpoints = False

        self.lr = None  # the actor and the critics have their own (actor_lr, critic_lr)
        self.gamma = 0.99
        self.grad_clip = None
        self.train_batch_size_per_learner = 256
        self.rollout_fragment_length = 1  # one env step per sampling call, one update after it
        self.min_sample_timesteps_per_iteration = 1000  # rlplat's choice: 1,000 steps a report
        self.evaluation(evaluation_config=AlgorithmConfig.overrides(explore=False))

    def training(
        self,
        *,
        twin_q: bool = NotProvided,
        policy_delay: int = NotProvided,
        target_noise: float = NotProvided,
        target_noise_clip: float = NotProvided,
        exploration_noise: float = NotProvided,
        random_steps: int | None = NotProvided,
        actor_hiddens: list[int] = NotProvided,
        critic_hiddens: list[int] = NotProvided,
        hidden_activation: Activation = NotProvided,
        actor_lr: float = NotProvided,
        critic_lr: float = NotProvided,
        tau: float = NotProvided,
        n_step: int | None = NotProvided,
        training_intensity: float | None = NotProvided,
        num_steps_sampled_before_learning_starts: int | None = NotProvided,
        replay_buffer_config: dict[str, Any] | None = NotProvided,
        store_buffer_in_checkpoints: bool | None = NotProvided,
        **kwargs: Any,
    ) -> "TD3Config":
        """TD3's own settings (see the attribute comments in ``__init__``) and the base ones."""
        super().training(**kwargs)
        for name, value in locals().items():
            if name not in ("self", "kwargs", "__class__") and value is not NotProvided:
                if name == "replay_buffer_config":
                    value = {**self.replay_buffer_config, **value}
                setattr(self, name, value)
        return self

    def validate(self) -> None:
        super().validate()
        problems = actor_critic_problems(self)
        if self.policy_delay < 1:
            problems.append(f"training.policy_delay must be at least 1, got {self.policy_delay}")
        for name in ("target_noise", "target_noise_clip"):
            if getattr(self, name) < 0:
                problems.append(f"training.{name} must not be negative, got {getattr(self, name)}")
        if "Prioritized" in str(self.replay_buffer_config.get("type")):
            problems.append(
                "TD3 replays uniformly: use training.replay_buffer_config.type "
                "EpisodeReplayBuffer or TransitionEpisodeReplayBuffer"
            )
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def _model_config_auto_includes(self) -> dict[str, Any]:
        keys = {k: getattr(self, k) for k in MODULE_KEYS}
        return super()._model_config_auto_includes | keys | {"random_steps": warmup_steps(self)}

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=TD3Module)

    def get_default_learner_class(self) -> type:
        return TD3TorchLearner

    def build_learner_connector(
        self, input_observation_space: Any, input_action_space: Any, device: Any = None
    ) -> Any:
        """RLlib's learner pipeline plus the next observations the critic targets need."""
        pipeline = super().build_learner_connector(
            input_observation_space=input_observation_space,
            input_action_space=input_action_space,
            device=device,
        )
        pipeline.insert_after(
            AddObservationsFromEpisodesToBatch, AddNextObservationsFromEpisodesToTrainBatch()
        )
        return pipeline


class DDPGConfig(TD3Config):
    """DDPG: TD3 with one critic, no target smoothing and an actor update every update."""

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or DDPG)
        self.twin_q = False
        self.policy_delay = 1
        self.target_noise = 0.0


class TD3(DQN):
    """TD3 on RLlib's new API stack (see ``TD3Config`` for the settings); DQN's loop."""

    config: TD3Config

    @classmethod
    def get_default_config(cls) -> TD3Config:
        return TD3Config(cls)


class DDPG(TD3):
    """DDPG, as ``DDPGConfig`` sets TD3's switches."""

    @classmethod
    def get_default_config(cls) -> DDPGConfig:
        return DDPGConfig(cls)
