"""Networks and layers beyond RLlib's: batch renormalisation (CrossQ's critics and actor) and
SimBa's residual encoder (a ``model_config`` setting of PPO, SAC, TD3 and CrossQ).

``BatchRenorm`` is batch renormalisation (Ioffe 2017, "Batch Renormalization: Towards Reducing
Minibatch Dependence in Batch-Normalized Models", Algorithm 1), as CrossQ (Bhatt et al. 2024)
uses it: in training mode it normalises with the batch's statistics, corrected towards the
running ones by ``r`` and ``d`` (clipped to ``r_max`` and ``d_max``) once ``warmup_steps``
training passes have gone by (plain batch norm before that); every training pass moves the
running statistics ``momentum`` of the way to the batch's. In eval mode it normalises with the
running statistics only, which is how acting, greedy evaluation and exports use it. The running
statistics and the pass count are buffers: checkpoints and exports carry them.

Values are those of CrossQ's reference implementations (sb3-contrib 2.9.2,
``sb3_contrib/common/torch_layers.py``; the authors' JAX code, ``sbx/sac/policies.py``): momentum
0.01, eps 0.001, r_max 3, d_max 5 (fixed, without the paper's relaxation schedule), 100,000
warm-up passes, the batch variance unbiased.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT, Encoder
from ray.rllib.core.models.configs import ModelConfig
from ray.rllib.core.models.torch.base import TorchModel
from torch import nn

from rlplat.seams.rllib_parts import CatalogHooks

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "silu": nn.SiLU}


@dataclass(frozen=True)
class BatchRenormSettings:
    """How every ``BatchRenorm`` layer of a network normalises."""

    momentum: float = 0.01
    warmup_steps: int = 100_000
    eps: float = 0.001
    r_max: float = 3.0
    d_max: float = 5.0


class BatchRenorm(nn.Module):
    """Batch renormalisation over the features (last dimension) of a (batch, features) input."""

    def __init__(self, features: int, settings: BatchRenormSettings = BatchRenormSettings()):
        super().__init__()
        self.settings = settings
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.register_buffer("running_mean", torch.zeros(features))
        self.register_buffer("running_var", torch.ones(features))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            mean, var = self.running_mean, self.running_var
        else:
            warmed_up = bool(self.steps > self.settings.warmup_steps)
            mean, var = renormalised(self, x.mean(dim=0), x.var(dim=0), warmed_up)
        return (x - mean) / torch.sqrt(var + self.settings.eps) * self.weight + self.bias


def renormalised(
    layer: nn.Module, batch_mean: torch.Tensor, batch_var: torch.Tensor, warmed_up: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and variance a batch renormalisation ``layer`` (its ``settings``, running
    statistics and ``steps``) normalises a training batch by: the batch's own, once
    ``warmed_up`` corrected towards the running ones (r and d clipped); the running statistics
    then move towards the batch's. Elementwise: any shape of statistics."""
    s = layer.settings
    mean, var = batch_mean, batch_var
    if warmed_up:
        with torch.no_grad():
            running_std = torch.sqrt(layer.running_var + s.eps)
            r = (torch.sqrt(batch_var + s.eps) / running_std).clamp(1 / s.r_max, s.r_max)
            d = ((batch_mean - layer.running_mean) / running_std).clamp(-s.d_max, s.d_max)
        # The batch statistics, corrected: normalising by them is x_hat * r + d.
        mean = batch_mean - d * torch.sqrt(batch_var) / r
        var = batch_var / r**2
    with torch.no_grad():
        layer.running_mean.lerp_(batch_mean, s.momentum)
        layer.running_var.lerp_(batch_var, s.momentum)
        layer.steps += 1
    return mean, var


def renormed_mlp(
    in_dim: int,
    hiddens: list[int],
    out_dim: int | None,
    activation: str,
    settings: BatchRenormSettings,
) -> nn.Sequential:
    """CrossQ's MLP: batch renormalisation of the input and after each hidden activation, then
    the linear layers of ``hiddens`` and, unless ``out_dim`` is None, a linear output layer."""
    layers: list[nn.Module] = [BatchRenorm(in_dim, settings)]
    for width in hiddens:
        layers += [
            nn.Linear(in_dim, width),
            ACTIVATIONS[activation](),
            BatchRenorm(width, settings),
        ]
        in_dim = width
    if out_dim is not None:
        layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


# -- running observation statistics ----------------------------------------------------------

OBSERVATION_NORM = "observation_norm"  # the rl_module.model_config key (its clip)


class RunningObservationNorm(nn.Module):
    """Observations minus their running mean, over their running standard deviation, clipped to
    [-clip, clip], as Stable-Baselines3's ``VecNormalize`` (RL Zoo's ``normalize: True``) does
    outside the policy. Inside the module the statistics are buffers: checkpoints, the env
    runners' weights and exports carry them. They move only by ``update``, which the learner's
    forward pass calls on each training batch (Chan et al.'s parallel mean and variance)."""

    def __init__(self, features: int, clip: float = 10.0, epsilon: float = 1e-8):
        super().__init__()
        self.clip, self.epsilon = clip, epsilon
        self.register_buffer("mean", torch.zeros(features))
        self.register_buffer("var", torch.ones(features))
        self.register_buffer("count", torch.tensor(1e-4))  # VecNormalize's starting count

    @torch.no_grad()
    def update(self, obs: torch.Tensor) -> None:
        x = obs.reshape(obs.shape[0], -1).float()
        n = x.shape[0]
        total = self.count + n
        delta = x.mean(0) - self.mean
        spread = self.var * self.count + x.var(0, unbiased=False) * n
        self.var.copy_((spread + delta.square() * self.count * n / total) / total)
        self.mean.add_(delta * n / total)
        self.count.copy_(total)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.reshape(obs.shape[0], -1).float()
        scaled = (x - self.mean) / torch.sqrt(self.var + self.epsilon)
        return scaled.clamp(-self.clip, self.clip)


# -- SimBa ---------------------------------------------------------------------------------------
#
# SimBa (Lee et al., ICLR 2025, "SimBa: Simplicity Bias for Scaling Up Parameters in Deep
# Reinforcement Learning"): a linear embedding of the (running-normalised) input, pre-norm
# residual feed-forward blocks x + W2 relu(W1 norm(x)) with an inner width of 4x, and a final
# norm before the heads; orthogonal embedding and He-initialised blocks, as the authors' code
# (github.com/SonyResearch/simba, ``scale_rl/networks``). rlplat's running normalisation of
# observations is the ``mean_std_filter`` connector (statistics over every sampled observation,
# kept in checkpoints and exported with the graph). CrossQ's SimBa normalises with batch
# renormalisation instead of layer norm, as the rest of CrossQ's networks do.

SIMBA = "simba"  # the rl_module.model_config key


@dataclass(frozen=True)
class SimbaSettings:
    """``rl_module.model_config.simba``: the width of every network's residual stream and the
    number of residual blocks."""

    width: int = 256
    blocks: int = 2

    @classmethod
    def of(cls, model_config: Any) -> SimbaSettings | None:
        """The settings in a module's ``model_config`` (None: no SimBa)."""
        value = (model_config or {}).get(SIMBA) if hasattr(model_config, "get") else None
        return None if value is None else cls(**value)


class ResidualBlock(nn.Module):
    """x + W2 relu(W1 norm(x)), W1 widening ``width`` fourfold."""

    def __init__(self, width: int, norm: nn.Module):
        super().__init__()
        self.norm = norm
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        for layer in (self.up, self.down):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(self.norm(x))))


def simba_network(
    in_dim: int,
    settings: SimbaSettings,
    out_dim: int | None = None,
    renorm: BatchRenormSettings | None = None,
) -> nn.Sequential:
    """The SimBa encoder of an ``in_dim`` input (its norms batch renormalisation where
    ``renorm`` is given, with one on the input too), and a linear output unless ``out_dim`` is
    None."""

    def norm() -> nn.Module:
        return BatchRenorm(width, renorm) if renorm else nn.LayerNorm(width)

    width = settings.width
    embed = nn.Linear(in_dim, width)
    nn.init.orthogonal_(embed.weight)
    nn.init.zeros_(embed.bias)
    layers: list[nn.Module] = [BatchRenorm(in_dim, renorm)] if renorm else []
    layers.append(embed)
    layers += [ResidualBlock(width, norm()) for _ in range(settings.blocks)]
    layers.append(norm())
    if out_dim is not None:
        layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


@dataclass
class SimbaEncoderConfig(ModelConfig):
    """RLlib's encoder config for a SimBa encoder of the flat observation (and, for a
    critic of continuous actions, the action beside it)."""

    settings: SimbaSettings = field(default_factory=SimbaSettings)
    with_actions: bool = False

    @property
    def output_dims(self) -> tuple[int, ...]:
        return (self.settings.width,)

    def build(self, framework: str = "torch") -> Encoder:
        return SimbaEncoder(self)


class SimbaEncoder(TorchModel, Encoder):
    """RLlib encoder: the SimBa network over the observation (and the action)."""

    def __init__(self, config: SimbaEncoderConfig):
        TorchModel.__init__(self, config)
        Encoder.__init__(self, config)
        self.net = simba_network(int(config.input_dims[0]), config.settings)
        self.with_actions = config.with_actions

    def _forward(self, inputs: dict, **kwargs: Any) -> dict:
        obs = inputs[Columns.OBS]
        features = obs.reshape(obs.shape[0], -1).float()
        if self.with_actions:
            features = torch.cat([features, inputs[Columns.ACTIONS]], dim=-1)
        return {ENCODER_OUT: self.net(features)}


class SimbaCatalog(CatalogHooks):
    """Catalog mixin (before an RLlib catalog, e.g. PPO's or SAC's): with
    ``model_config.simba``, the encoders are SimBa's: the observation's, and for SAC's critics of
    Box actions one over the observation and the action."""

    action_space: Any

    @classmethod
    def encoder_config_for(
        cls, observation_space: Any, model_config_dict: dict, action_space: Any = None, **kwargs
    ) -> ModelConfig:
        settings = SimbaSettings.of(model_config_dict)
        if settings is None:
            return super().encoder_config_for(
                observation_space, model_config_dict, action_space, **kwargs
            )
        return SimbaEncoderConfig(
            input_dims=(int(np.prod(observation_space.shape)),), settings=settings
        )

    def build_qf_encoder(self, framework: str) -> Encoder:
        settings = SimbaSettings.of(self.model_config_dict)
        if settings is None or not isinstance(self.action_space, gym.spaces.Box):
            return super().build_qf_encoder(framework)  # type: ignore[misc]
        obs_dim = int(self.encoder_config.input_dims[0])
        action_dim = int(np.prod(self.action_space.shape))
        self.qf_encoder_config = SimbaEncoderConfig(
            input_dims=(obs_dim + action_dim,), settings=settings, with_actions=True
        )
        return self.qf_encoder_config.build(framework=framework)
