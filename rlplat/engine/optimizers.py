"""The torch optimizers ``training.optimizer: {type: ...}`` names, and the arguments each takes."""

from __future__ import annotations

import inspect

import torch

OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "radam": torch.optim.RAdam,
    "sgd": torch.optim.SGD,
    "rmsprop": torch.optim.RMSprop,
}


def optimizer_arguments(kind: str) -> list[str]:
    """The settings ``optimizer: {type: kind, ...}`` accepts besides ``type`` and ``lr``."""
    params = inspect.signature(OPTIMIZERS[kind].__init__).parameters
    return [p for p in params if p not in ("self", "params", "lr", "foreach", "fused")]
