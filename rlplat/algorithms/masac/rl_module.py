"""The MASAC RL module of one policy: a decentralised squashed-Gaussian actor, two centralised
critics with target copies, and the entropy temperature.

The actor sees only its agent's observation and outputs a Gaussian's mean and log std: actions
are tanh of a sample, in [-1, 1] (RLlib's ``normalize_actions`` scales them to the Box bounds),
and the greedy action is tanh of the mean (SAC's ``SquashedGaussian``, which export reads as
SAC's). The critics see every agent's observation and action (the joint layout, as MADDPG's)
and the one-hot of the agent whose Q it is. Env runners build the actor only
(``inference_only``).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from rlplat.algorithms.actor_critic import SquashedGaussianActor, mlp, squashed_sample
from rlplat.algorithms.base import TargetNetworks, WithoutModeSwitch


class MASACModule(
    SquashedGaussianActor, WithoutModeSwitch, TorchRLModule, InferenceOnlyAPI, TargetNetworks
):
    """Actor pi(a|o) for one policy's agents; critics Q_1, Q_2(all observations, all actions,
    agent); log alpha."""

    TARGET_NETWORKS = ("critic", "critic_2")

    def setup(self) -> None:
        config = self.model_config
        self.obs_dim = int(gym.spaces.flatdim(self.observation_space))
        self.action_dim = int(self.action_space.shape[0])
        self.random_steps = int(config["random_steps"])
        activation = config["hidden_activation"]
        self.actor = mlp(self.obs_dim, config["actor_hiddens"], 2 * self.action_dim, activation)
        if self.inference_only:
            return
        layout = config["joint_layout"]
        critic_in = sum(e["obs_dim"] + e["action_dim"] for e in layout) + len(layout)
        self.critic = mlp(critic_in, config["critic_hiddens"], 1, activation)
        self.critic_2 = mlp(critic_in, config["critic_hiddens"], 1, activation)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(config["initial_alpha"])))

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised squashed action in [-1, 1] and its log probability."""
        return squashed_sample(self.dist_inputs(obs))

    # -- training (the learner calls these; see learner.py) ----------------------------------

    def q_values(self, inputs: torch.Tensor, target: bool = False) -> torch.Tensor:
        """min(Q_1, Q_2) of the critics' ``inputs`` (the target copies' with ``target``)."""
        first, second = (
            (self.target_critic, self.target_critic_2) if target else (self.critic, self.critic_2)
        )
        return torch.minimum(first(inputs), second(inputs)).squeeze(-1)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {}  # the learner computes the losses across all policies' modules

    def critics(self) -> list[nn.Module]:
        return [self.critic, self.critic_2]

    def forward_target(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {}

    def get_non_inference_attributes(self) -> list[str]:
        return ["critic", "critic_2", "target_critic", "target_critic_2", "log_alpha"]
