"""The PQN RL module: one Q-network with layer norm, acting epsilon-greedily.

Flat observations go through an MLP whose hidden layers are each linear, layer norm, ReLU;
image observations (uint8 frames, scaled to [0, 1]) through the Nature CNN with layer norm after
each layer; weights orthogonal with gain sqrt(2), as CleanRL's ``pqn.py`` and
``pqn_atari_envpool.py`` initialise them. The Q-values are the action distribution inputs:
greedy acting, exports and ``rlplat eval`` take their argmax. Exploring, each env's action is
uniformly random with probability epsilon, which falls linearly from ``epsilon_start`` to
``epsilon_end`` over the first ``epsilon_timesteps`` env steps. Its value (``ValueFunctionAPI``)
is max_a Q(s, a): RLlib's lambda-return connector computes PQN's targets from it.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import gymnasium as gym
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from rlplat.algorithms.base import WithoutModeSwitch

Q_VALUES = "q_values"  # Q(s, .) of every action, (B, actions)


def layer_normed_mlp(in_dim: int, hiddens: list[int], out_dim: int) -> nn.Sequential:
    """Linear, LayerNorm, ReLU per hidden width; a linear output layer."""
    layers: list[nn.Module] = []
    for width in hiddens:
        layers += [nn.Linear(in_dim, width), nn.LayerNorm(width), nn.ReLU()]
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class NatureCNN(nn.Module):
    """The Nature DQN torso (32x8/4, 64x4/2, 64x3/1, 512) with layer norm over each layer's
    whole output, over channels-last uint8 frames scaled to [0, 1], and a linear Q head."""

    def __init__(self, shape: tuple[int, ...], actions: int):
        super().__init__()
        height, width, channels = shape
        layers: list[nn.Module] = []
        x = torch.zeros(1, channels, height, width)
        for out_channels, kernel, stride in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            conv = nn.Conv2d(x.shape[1], out_channels, kernel, stride=stride)
            with torch.no_grad():
                x = conv(x)
            layers += [conv, nn.LayerNorm(list(x.shape[1:])), nn.ReLU()]
        self.torso = nn.Sequential(*layers, nn.Flatten())
        self.head = nn.Sequential(
            nn.Linear(x.numel(), 512), nn.LayerNorm(512), nn.ReLU(), nn.Linear(512, actions)
        )

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        x = frames.permute(0, 3, 1, 2).float()
        if frames.dtype == torch.uint8:
            x = x / 255.0
        return self.head(self.torso(x))


class PQNModule(WithoutModeSwitch, TorchRLModule, ValueFunctionAPI):
    """Q(s, .) for Discrete actions, epsilon-greedy exploration."""

    SCALES_UINT8_FRAMES: ClassVar[bool] = True  # rlplat need not wrap it for uint8 frames

    def setup(self) -> None:
        config = self.model_config
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise ValueError(f"PQN needs a Discrete action space, got {self.action_space}")
        actions = int(self.action_space.n)
        shape = tuple(self.observation_space.shape or ())
        if len(shape) == 3:
            self.q_network: nn.Module = NatureCNN(shape, actions)
        else:
            in_dim = int(gym.spaces.flatdim(self.observation_space))
            self.q_network = layer_normed_mlp(in_dim, list(config["hiddens"]), actions)
        for layer in self.q_network.modules():  # CleanRL's: orthogonal, gain sqrt(2), bias 0
            if isinstance(layer, nn.Linear | nn.Conv2d):
                nn.init.orthogonal_(layer.weight, math.sqrt(2))
                nn.init.zeros_(layer.bias)
        self.epsilon_start = float(config["epsilon_start"])
        self.epsilon_end = float(config["epsilon_end"])
        self.epsilon_timesteps = int(config["epsilon_timesteps"])

    def q(self, obs: torch.Tensor) -> torch.Tensor:
        if isinstance(self.q_network, NatureCNN):
            return self.q_network(obs)
        return self.q_network(obs.reshape(obs.shape[0], -1).float())

    def epsilon(self, t: int | None) -> float:
        """Epsilon at env step ``t``: linear from start to end over ``epsilon_timesteps``."""
        progress = min(1.0, (t or 0) / max(1, self.epsilon_timesteps))
        return self.epsilon_start + progress * (self.epsilon_end - self.epsilon_start)

    @torch.no_grad()
    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self.q(batch[Columns.OBS])}

    @torch.no_grad()
    def _forward_exploration(
        self, batch: dict[str, Any], t: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        q = self.q(batch[Columns.OBS])
        greedy = q.argmax(dim=-1)
        random = torch.randint(q.shape[-1], greedy.shape, device=q.device)
        explore = torch.rand(greedy.shape, device=q.device) < self.epsilon(t)
        return {
            Columns.ACTIONS: torch.where(explore, random, greedy),
            Columns.ACTION_DIST_INPUTS: q,
        }

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Q_VALUES: self.q(batch[Columns.OBS])}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        """max_a Q(s, a): the value PQN's lambda-returns bootstrap from."""
        with torch.no_grad():
            return self.q(batch[Columns.OBS]).max(dim=-1).values

    def get_inference_action_dist_cls(self) -> type[TorchCategorical]:
        return TorchCategorical

    def get_exploration_action_dist_cls(self) -> type[TorchCategorical]:
        return TorchCategorical

    def get_train_action_dist_cls(self) -> type[TorchCategorical]:
        return TorchCategorical
