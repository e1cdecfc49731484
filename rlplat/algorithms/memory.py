"""Memory beyond RLlib's LSTM: a GRU and an attention memory for PPO, APPO and IMPALA
(``rl_module.model_config.memory``).

RLlib's default PPO module carries whatever recurrent state its encoder declares: its connectors
store each step's state in the episode, start every training sequence (``max_seq_len`` steps)
from the state stored before it, and zero-pad the last one. Both memories are encoders for that
path, built by RLlib's PPO catalog in place of its LSTM, so sampling, training, checkpoints,
evaluation, ONNX export (the state travels flat) and serving sessions work as for ``use_lstm``.

- ``gru``: RLlib's own recurrent encoder with a GRU layer (``RecurrentEncoderConfig``'s
  ``recurrent_layer_type``) instead of the LSTM: the same observation MLP (``fcnet_hiddens``)
  before it, ``size`` units, one state tensor ``h``.
- ``attention``: a transformer over the last ``steps`` steps. Each of ``layers`` blocks keeps
  the inputs it saw at the last ``steps`` steps as its memory (TrXL's segment memory, Dai et al.
  2019, as GTrXL uses it, Parisotto et al. 2020); a step attends to itself and that memory,
  with a learned bias per head and distance for order. Blocks are pre-norm residual
  (GTrXL's "identity map reordering", its largest single gain over TrXL in their ablations),
  without GTrXL's GRU gates: a plain residual block keeps the graph a standard transformer
  layer, and these tasks are short. The memory starts empty (a per-slot "filled" flag masks
  slots no step has filled yet), so the state is zeros at an episode's start, as rlplat's
  runtime and export require.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT, Encoder
from ray.rllib.core.models.configs import ModelConfig, RecurrentEncoderConfig
from ray.rllib.core.models.torch.base import TorchModel
from torch import nn

from rlplat.seams.rllib_parts import CatalogHooks

MEMORY = "memory"  # the rl_module.model_config key
GRU, ATTENTION = "gru", "attention"
MEMORY_TYPES = (GRU, ATTENTION)
ATTENTION_ONLY = ("steps", "heads", "layers")


@dataclass(frozen=True)
class MemorySettings:
    """``rl_module.model_config.memory``: which memory, its width (GRU units, the attention's
    model width), and the attention's window (steps), heads and blocks."""

    type: str
    size: int = 64
    steps: int = 16
    heads: int = 2
    layers: int = 1

    @classmethod
    def of(cls, model_config: Any) -> MemorySettings | None:
        """The settings in a module's ``model_config`` (None: no memory of rlplat's)."""
        value = (model_config or {}).get(MEMORY) if hasattr(model_config, "get") else None
        return None if value is None else cls(**value)


class MemoryCatalog(CatalogHooks):
    """Catalog mixin (before RLlib's PPO catalog): with ``model_config.memory`` the observation
    encoder is the GRU or the attention memory (see the module's docstring)."""

    @classmethod
    def encoder_config_for(
        cls, observation_space: Any, model_config_dict: dict, action_space: Any = None, **kwargs
    ) -> ModelConfig:
        settings = MemorySettings.of(model_config_dict)
        if settings is None:
            return super().encoder_config_for(
                observation_space, model_config_dict, action_space, **kwargs
            )
        # RLlib builds the tokenizer (the per-step MLP or CNN) through this same hook.
        plain = {key: value for key, value in model_config_dict.items() if key != MEMORY}
        if settings.type == GRU:
            lstm = {**plain, "use_lstm": True, "lstm_cell_size": settings.size}
            config = super().encoder_config_for(observation_space, lstm, action_space, **kwargs)
            return dataclasses.replace(config, recurrent_layer_type=GRU)
        return AttentionEncoderConfig(
            input_dims=observation_space.shape,
            recurrent_layer_type=ATTENTION,
            hidden_dim=settings.size,
            tokenizer_config=cls.get_tokenizer_config(observation_space, plain),
            settings=settings,
        )


@dataclass
class AttentionEncoderConfig(RecurrentEncoderConfig):
    """RLlib's encoder config for the attention memory: RLlib's tokenizer (the observation MLP
    or CNN) per step, then the attention blocks. A recurrent encoder config to RLlib, whose
    actor-critic encoder then carries each encoder's state."""

    settings: MemorySettings = field(default_factory=lambda: MemorySettings(ATTENTION))

    def build(self, framework: str = "torch") -> Encoder:
        return AttentionEncoder(self)


class AttentionBlock(nn.Module):
    """Pre-norm attention of each step over itself and the ``steps`` before it, then a pre-norm
    feed-forward layer, each residual."""

    def __init__(self, size: int, heads: int, steps: int):
        super().__init__()
        self.heads, self.steps = heads, steps
        self.norm = nn.LayerNorm(size)
        self.query = nn.Linear(size, size)
        self.key_value = nn.Linear(size, 2 * size)
        self.out = nn.Linear(size, size)
        self.distance_bias = nn.Parameter(torch.zeros(heads, steps + 1))
        self.feed_forward = nn.Sequential(
            nn.LayerNorm(size), nn.Linear(size, 4 * size), nn.ReLU(), nn.Linear(4 * size, size)
        )

    def forward(self, x: torch.Tensor, context: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``x``: (B, T, size), the sequence's steps; ``context``: (B, steps + T, size), the
        memory then ``x``; ``valid``: (B, steps + T), which context positions hold a step."""
        batch, length, size = x.shape
        head = size // self.heads
        normed = self.norm(context)
        query = self.query(normed[:, -length:]).view(batch, length, self.heads, head)
        key, value = self.key_value(normed).view(batch, -1, 2, self.heads, head).unbind(2)
        logits = torch.einsum("bthd,bshd->bhts", query, key) / head**0.5
        # Step t sits at context position steps + t; it sees positions t .. steps + t.
        positions = torch.arange(context.shape[1], device=x.device)
        distance = (self.steps + torch.arange(length, device=x.device))[:, None] - positions
        seen = (distance >= 0) & (distance <= self.steps)
        bias = self.distance_bias[:, distance.clamp(0, self.steps)]  # (heads, T, steps + T)
        allowed = seen[None, None] & (valid[:, None, None, :] > 0)
        logits = (logits + bias[None]).masked_fill(~allowed, torch.finfo(logits.dtype).min)
        attended = torch.einsum("bhts,bshd->bthd", logits.softmax(-1), value)
        x = x + self.out(attended.reshape(batch, length, size))
        return x + self.feed_forward(x)


class AttentionEncoder(TorchModel, Encoder):
    """RLlib recurrent encoder: (B, T) observations and the state at the sequence's start ->
    (B, T, size) features and the state after its last step."""

    def __init__(self, config: AttentionEncoderConfig):
        TorchModel.__init__(self, config)
        Encoder.__init__(self, config)
        settings = config.settings
        self.settings = settings
        assert config.tokenizer_config is not None
        self.tokenizer = config.tokenizer_config.build(framework="torch")
        self.embed = nn.Linear(int(config.tokenizer_config.output_dims[0]), settings.size)
        self.blocks = nn.ModuleList(
            AttentionBlock(settings.size, settings.heads, settings.steps)
            for _ in range(settings.layers)
        )
        self.norm = nn.LayerNorm(settings.size)

    def get_initial_state(self) -> dict[str, torch.Tensor]:
        s = self.settings
        return {
            "memory": torch.zeros(s.layers, s.steps, s.size),
            "filled": torch.zeros(s.steps),
        }

    def _forward(self, inputs: dict, **kwargs: Any) -> dict:
        observations = inputs[Columns.OBS]
        batch, length = observations.shape[:2]
        flat = observations.reshape(batch * length, *observations.shape[2:])
        tokens = self.tokenizer({Columns.OBS: flat})[ENCODER_OUT]
        x = self.embed(tokens).reshape(batch, length, -1)
        state = inputs[Columns.STATE_IN]
        memory, filled = state["memory"], state["filled"]
        valid = torch.cat([filled, filled.new_ones(batch, length)], dim=1)
        steps = self.settings.steps
        memories = []
        for layer, block in enumerate(self.blocks):
            context = torch.cat([memory[:, layer], x], dim=1)
            memories.append(context[:, -steps:])
            x = block(x, context, valid)
        return {
            ENCODER_OUT: self.norm(x),
            Columns.STATE_OUT: {
                "memory": torch.stack(memories, dim=1),
                "filled": valid[:, -steps:],
            },
        }
