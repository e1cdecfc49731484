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
from ray.rllib.core.learner.utils import make_target_network
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI, TargetNetworkAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn
from torch.nn import functional as F

from rlplat.algorithms.actor_critic import mlp
from rlplat.algorithms.maddpg.layout import action_width

_GREEDY_LOG_STD = -20.0  # a Box policy's greedy action is reported as a very narrow Gaussian


class MADDPGModule(TorchRLModule, InferenceOnlyAPI, TargetNetworkAPI):
    """Actor mu(o) for one policy's agents; critic Q(all observations, all actions, agent)."""

    def setup(self) -> None:
        config = self.model_config
        self.discrete = isinstance(self.action_space, gym.spaces.Discrete)
        self.obs_dim = int(gym.spaces.flatdim(self.observation_space))
        self.action_dim = action_width(self.action_space)
        self.exploration_noise = float(config["exploration_noise"])
        self.random_steps = int(config["random_steps"])
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
        if self.discrete:
            return raw
        mean = torch.tanh(raw)
        return torch.cat([mean, torch.full_like(mean, log_std)], dim=-1)

    @torch.no_grad()
    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        raw = self.raw_action(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: self._dist_inputs(raw, _GREEDY_LOG_STD)}

    @torch.no_grad()
    def _forward_exploration(
        self, batch: dict[str, Any], t: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        raw = self.raw_action(batch[Columns.OBS])
        log_std = float(torch.log(torch.tensor(max(self.exploration_noise, 1e-8))))
        out = {Columns.ACTION_DIST_INPUTS: self._dist_inputs(raw, log_std)}
        random = (t or 0) < self.random_steps
        if self.discrete:
            if random:
                out[Columns.ACTIONS] = torch.randint(0, self.action_dim, raw.shape[:1])
            return out  # else RLlib's connector samples the categorical
        mean = torch.tanh(raw)
        if random:
            out[Columns.ACTIONS] = torch.rand_like(mean) * 2.0 - 1.0
        else:
            noise = torch.randn_like(mean) * self.exploration_noise
            out[Columns.ACTIONS] = (mean + noise).clamp(-1.0, 1.0)
        return out

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

    def make_target_networks(self) -> None:
        self.target_actor = make_target_network(self.actor)
        self.target_critic = make_target_network(self.critic)

    def get_target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(self.actor, self.target_actor), (self.critic, self.target_critic)]

    def forward_target(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {}

    def get_non_inference_attributes(self) -> list[str]:
        return ["critic", "target_actor", "target_critic"]
