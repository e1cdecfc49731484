"""Stacked seeds: N independent parameter sets along a leading axis, trained as one network.

A stacked layer keeps seed i's weights at index i of its tensors, and a batch shaped
(seeds, rows, features) multiplies each seed's rows by that seed's weights in one ``baddbmm``,
so N small networks cost about one kernel launch where N separate trials pay N. Nothing flows
between seeds:

- a seed's loss reaches only its own slice of each tensor (the others' rows of the product do
  not depend on it);
- Adam is elementwise, so one Adam over stacked tensors is N independent Adams;
- gradients are clipped by each seed's own global norm (``clip_grad_norm_per_seed_``), never by
  a norm over all seeds, which would let one seed's large gradient shrink every other seed's;
- a seed whose loss or gradient is not finite is stopped alone (``SeedStops``): its gradient
  and its optimizer moments are zeroed, so Adam moves it by exactly nothing from then on,
  while the others train on.

``seed_state`` cuts one seed's parameters out of a stacked state dict: a stacked layer's slice
is the weight of an ``nn.Linear`` (transposed), which is how one seed is evaluated, exported or
served as a network of its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

from rlplat.engine.learner import state_requested

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "silu": nn.SiLU}


class StackedLinear(nn.Module):
    """``seeds`` linear layers of one shape: (seeds, rows, in) -> (seeds, rows, out). Each seed's
    layer starts as ``nn.Linear``'s default initialisation drawn from that seed's generator."""

    def __init__(
        self,
        seeds: int,
        in_features: int,
        out_features: int,
        generators: Sequence[torch.Generator] | None = None,
    ):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(seeds, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(seeds, 1, out_features))
        bound = 1.0 / math.sqrt(in_features)  # nn.Linear's: kaiming_uniform(a=sqrt(5)) and bias
        with torch.no_grad():
            for seed in range(seeds):
                generator = generators[seed] if generators is not None else None
                self.weight[seed].uniform_(-bound, bound, generator=generator)
                self.bias[seed].uniform_(-bound, bound, generator=generator)

    @property
    def seeds(self) -> int:
        return self.weight.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class StackedLayerNorm(nn.Module):
    """``seeds`` layer norms over the last dimension of (seeds, rows, features), each seed its own
    elementwise scale and shift (``nn.LayerNorm``'s, starting at 1 and 0; (seeds, features))."""

    def __init__(self, seeds: int, features: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(seeds, features))
        self.bias = nn.Parameter(torch.zeros(seeds, features))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = nn.functional.layer_norm(x, x.shape[-1:], eps=self.eps)
        return torch.addcmul(self.bias.unsqueeze(1), normed, self.weight.unsqueeze(1))


def stacked_mlp(
    seeds: int,
    in_dim: int,
    hiddens: Sequence[int],
    out_dim: int | None,
    activation: str = "tanh",
    generators: Sequence[torch.Generator] | None = None,
) -> nn.Sequential:
    """``seeds`` MLPs in_dim -> hiddens -> out_dim side by side, ``activation`` after each hidden
    layer; with ``out_dim`` None they end at the last hidden layer's activation (an encoder)."""
    layers: list[nn.Module] = []
    sizes = [in_dim, *hiddens]
    for size_in, size_out in zip(sizes, sizes[1:], strict=False):
        layers += [StackedLinear(seeds, size_in, size_out, generators), ACTIVATIONS[activation]()]
    if out_dim is not None:
        layers.append(StackedLinear(seeds, sizes[-1], out_dim, generators))
    return nn.Sequential(*layers)


def seed_generators(seeds: Iterable[int]) -> list[torch.Generator]:
    """One torch generator per seed, seeded with it: seed s draws the same initial weights
    whether it is stacked with others or alone."""
    return [torch.Generator().manual_seed(int(seed)) for seed in seeds]


def per_seed_norms(parameters: Iterable[nn.Parameter]) -> torch.Tensor:
    """Each seed's global gradient norm over ``parameters`` (all stacked on dim 0), (seeds,)."""
    squares = [
        p.grad.reshape(p.shape[0], -1).square().sum(1) for p in parameters if p.grad is not None
    ]
    return torch.stack(squares).sum(0).sqrt()


def clip_grad_norm_per_seed_(parameters: Sequence[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Scale each seed's gradients so that its global norm is at most ``max_norm``, as
    ``torch.nn.utils.clip_grad_norm_`` does for one network; each seed's norm before, (seeds,)."""
    norms = per_seed_norms(parameters)
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for p in parameters:
        if p.grad is not None:
            p.grad.mul_(scale.reshape(-1, *([1] * (p.grad.dim() - 1))))
    return norms


class SeedStops:
    """Which seeds still train. ``check`` stops every seed whose loss or gradient norm is not
    finite: its gradients and its slices of the optimizer's moments become zero, so Adam moves
    it by nothing on this and every later step (its parameters stay at their last finite
    values), and the others are untouched."""

    def __init__(self, seeds: int):
        self.alive = torch.ones(seeds, dtype=torch.bool)

    @property
    def stopped(self) -> list[int]:
        return [int(i) for i in torch.nonzero(~self.alive).flatten()]

    def check(
        self,
        losses: torch.Tensor,
        parameters: Sequence[nn.Parameter],
        optimizer: torch.optim.Optimizer,
    ) -> list[int]:
        """Stop the seeds whose ``losses`` (seeds,) or gradients are not finite; the seeds
        stopped by this call."""
        finite = torch.isfinite(losses.detach()) & torch.isfinite(per_seed_norms(parameters))
        newly = self.alive & ~finite
        self.alive &= finite
        if not bool(self.alive.all()):
            frozen = ~self.alive
            for p in parameters:
                if p.grad is not None:
                    p.grad[frozen] = 0.0
                for moment in optimizer.state.get(p, {}).values():
                    if torch.is_tensor(moment) and moment.shape[:1] == p.shape[:1]:
                        moment[frozen] = 0.0
        return [int(i) for i in torch.nonzero(newly).flatten()]


STOPPED_STATE = "rlplat_stacked_alive"  # a stacked learner's state: which seeds still train


class SeedStopsState:
    """Learner mixin (before RLlib's learner) for a learner with ``stops`` (``SeedStops``): its
    state includes which seeds still train, so a seed stopped by a non-finite loss stays
    stopped after ``--resume``."""

    stops: SeedStops

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        state = super().get_state(  # type: ignore[misc]
            components, not_components=not_components, **kwargs
        )
        if state_requested(STOPPED_STATE, components, not_components):
            state[STOPPED_STATE] = self.stops.alive.tolist()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)  # type: ignore[misc]
        if STOPPED_STATE in state:
            self.stops.alive = torch.tensor(state[STOPPED_STATE], dtype=torch.bool)


def seed_state(stacked: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Seed ``seed``'s parameters out of a state dict of stacked layers, as the state dict of
    the same network built from ``nn.Linear`` layers (weight (out, in), bias (out,)) and
    per-feature layers (a norm's weight, bias and statistics (features,))."""
    single = {}
    for name, tensor in stacked.items():
        part = tensor[seed]
        if name.endswith("weight") and part.dim() == 2:
            part = part.T
        elif name.endswith("bias"):
            part = part.reshape(-1)
        single[name] = part.clone()
    return single
