"""Network layers rlplat's own modules build from: batch renormalisation (CrossQ's critics and
actor).

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

from dataclasses import dataclass

import torch
from torch import nn

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
        s = self.settings
        if not self.training:
            normed = (x - self.running_mean) / torch.sqrt(self.running_var + s.eps)
            return normed * self.weight + self.bias
        mean = x.mean(dim=0)
        var = x.var(dim=0)
        std = torch.sqrt(var + s.eps)
        normed = (x - mean) / std
        if self.steps > s.warmup_steps:
            with torch.no_grad():
                running_std = torch.sqrt(self.running_var + s.eps)
                r = (std / running_std).clamp(1.0 / s.r_max, s.r_max)
                d = ((mean - self.running_mean) / running_std).clamp(-s.d_max, s.d_max)
            normed = normed * r + d
        with torch.no_grad():
            self.running_mean.lerp_(mean, s.momentum)
            self.running_var.lerp_(var, s.momentum)
            self.steps += 1
        return normed * self.weight + self.bias


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
