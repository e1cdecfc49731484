"""The MADDPG RL module of one policy: a decentralised actor and a centralised critic.

The actor sees only its agent's observation. Box actions come out of tanh in [-1, 1]; RLlib's
``normalize_actions`` scales them to the Box bounds. Exploration adds Gaussian noise of
``exploration_noise`` and clips. Discrete actions come out as logits: exploring samples them,
acting greedily takes the argmax.

The critic sees every agent's observation and action (the joint layout, in the env's agent
order) plus a one-hot of the agent whose Q it is, so a policy shared by several agents has one
critic that tells them apart. For discrete agents it reads one-hot actions. Env runners build the
actor only (``inference_only``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import (
    TorchCategorical,
    TorchDiagGaussian,
)
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn
from torch.nn import functional as F

from rlplat.algorithms.actor_critic import BoxExploration, gaussian_inputs, mlp
from rlplat.algorithms.base import TargetNetworks, WithoutModeSwitch
from rlplat.algorithms.maddpg.layout import action_width


class MADDPGModule(WithoutModeSwitch, TorchRLModule, InferenceOnlyAPI, TargetNetworks):
    """Actor mu(o) for one policy's agents; critic Q(all observations, all actions, agent)."""

    TARGET_NETWORKS = ("actor", "critic")

    def setup(self) -> None:
        config = self.model_config
        self.discrete = isinstance(self.action_space, gym.spaces.Discrete)
        self.obs_dim = int(gym.spaces.flatdim(self.observation_space))
        self.action_dim = action_width(self.action_space)
        self.box_exploration = BoxExploration(
            float(config["exploration_noise"]), int(config["random_steps"])
        )
        activation = config["hidden_activation"]
        self.actor = mlp(self.obs_dim, config["actor_hiddens"], self.action_dim, activation)
        if self.inference_only:
            return
        layout = config["joint_layout"]
        critic_in = sum(e["obs_dim"] + e["action_dim"] for e in layout) + len(layout)
        self.critic = mlp(critic_in, config["critic_hiddens"], 1, activation)

    # -- acting ------------------------------------------------------------------------------

    def raw_action(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's output: logits (Discrete) or the action before tanh (Box)."""
        return self.actor(obs.reshape(obs.shape[0], -1).float())

    def _dist_inputs(self, raw: torch.Tensor, log_std: float) -> torch.Tensor:
        return raw if self.discrete else gaussian_inputs(torch.tanh(raw), log_std)

    @torch.no_grad()
    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        raw = self.raw_action(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: self._dist_inputs(raw, BoxExploration.GREEDY_LOG_STD)}

    @torch.no_grad()
    def _forward_exploration(
        self, batch: dict[str, Any], t: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        raw = self.raw_action(batch[Columns.OBS])
        exploration = self.box_exploration
        out = {Columns.ACTION_DIST_INPUTS: self._dist_inputs(raw, exploration.log_std)}
        if not self.discrete:
            out[Columns.ACTIONS] = exploration.actions(torch.tanh(raw), t)
        elif exploration.warming_up(t):
            out[Columns.ACTIONS] = torch.randint(0, self.action_dim, raw.shape[:1])
        return out  # discrete after the warm-up: RLlib's connector samples the categorical

    def _dist_cls(self) -> type:
        return TorchCategorical if self.discrete else TorchDiagGaussian

    def get_inference_action_dist_cls(self) -> type:
        return self._dist_cls()

    def get_exploration_action_dist_cls(self) -> type:
        return self._dist_cls()

    def get_train_action_dist_cls(self) -> type:
        return self._dist_cls()

    # -- training (the learner calls these; see learner.py) ----------------------------------

    def critic_action(self, raw: torch.Tensor) -> torch.Tensor:
        """An action as the critic reads it, from actor output ``raw``: tanh for Box; for
        Discrete a one-hot Gumbel-softmax sample whose gradient is the soft sample's (straight
        through), so the actor learns through the critic's one-hot input."""
        if self.discrete:
            return F.gumbel_softmax(raw, tau=1.0, hard=True)
        return torch.tanh(raw)

    @torch.no_grad()
    def target_action(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic_action(self.target_actor(obs.reshape(obs.shape[0], -1).float()))

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {}  # the learner computes the losses across all policies' modules

    def critics(self) -> list[nn.Module]:
        return [self.critic]

    def forward_target(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {}

    def get_non_inference_attributes(self) -> list[str]:
        return ["critic", "target_actor", "target_critic"]
