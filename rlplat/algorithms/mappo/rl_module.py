"""MAPPO's RL module: PPO's actor on the agent's own observation, a critic on the team's.

The actor is RLlib's default PPO encoder and policy head (so export, serving and action
distributions are PPO's); the critic is an MLP encoder and value head of the same sizes built
over the critic's input (``rlplat.environments.global_state``: the global state and the agent's
one-hot place), which the learner connector puts in the batch under ``CRITIC_STATE``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT

from rlplat.environments.global_state import CRITIC_STATE

CRITIC_STATE_SIZE = "critic_state_size"


class MAPPOModule(DefaultPPOTorchRLModule):
    """PPO's module whose value function reads ``batch[CRITIC_STATE]``, not the observation."""

    def setup(self) -> None:
        # The actor's encoder alone: the observation never reaches a critic tower.
        self.catalog.actor_critic_encoder_config.shared = True
        super().setup()
        size = int(self.model_config[CRITIC_STATE_SIZE])
        critic_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        critic = type(self.catalog)(critic_space, self.action_space, self.model_config)
        # The critic state's encoder alone (the base of PPO's actor-critic encoder config).
        encoder_config = critic.actor_critic_encoder_config.base_encoder_config
        self.critic_encoder = encoder_config.build(framework="torch")
        self.vf = critic.build_vf_head(framework="torch")

    def get_non_inference_attributes(self) -> list[str]:
        return ["vf", "critic_encoder"]

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        """V of each row's critic state (``embeddings``, the actor's, are not the critic's)."""
        latent = self.critic_encoder({Columns.OBS: batch[CRITIC_STATE]})[ENCODER_OUT]
        return self.vf(latent).squeeze(-1)
