"""RLModules rlplat adds: PPO with action masks, random players, PPO with an initial log std,
image modules for uint8 frames.

PettingZoo's board games observe ``{"observation": board, "action_mask": legal moves}``. The
masked module feeds the (flattened) board to RLlib's default PPO networks and pushes the logits of
illegal moves to the lowest float, so they get probability 0 when acting and when learning.

RLlib starts a free (state-independent) log std at 0, a standard deviation of 1 on actions in
[-1, 1]; RL Zoo's tuned MuJoCo PPO settings start it at -2 (``log_std_init``).
``rl_module.model_config.log_std_init`` gives PPO that start.

Atari frames are uint8 (84x84 grayscale, stacked). Episodes and replay keep them so (a quarter of
float32's memory); the modules for such observations divide them by 255 as float32 where they
enter the CNN, as Stable-Baselines3 and CleanRL do. RLlib's own CNN takes floats only.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.appo.torch.default_appo_torch_rl_module import (
    DefaultAPPOTorchRLModule,
)
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.torch.primitives import TorchCNN
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.utils.torch_utils import FLOAT_MIN

from rlplat.algorithms.memory import MemoryCatalog
from rlplat.algorithms.networks import SimbaCatalog
from rlplat.algorithms.sac import PaperCriticSACCatalog, SimbaSACCatalog
from rlplat.algorithms.transition_loop import DQNModule
from rlplat.environments.pettingzoo import ACTION_MASK


def _observation_key(space: gym.spaces.Dict) -> str:
    others = [key for key in space.spaces if key != ACTION_MASK]
    if len(others) != 1:
        raise ValueError(
            f"an action-masked observation must hold '{ACTION_MASK}' and one observation "
            f"entry, got {list(space.spaces)}"
        )
    return others[0]


def _mask_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return logits + torch.clamp(torch.log(mask.to(logits.dtype)), min=FLOAT_MIN)


LOG_STD_INIT = "log_std_init"


class InitialLogStdPPOModule(DefaultPPOTorchRLModule):
    """RLlib's default PPO module whose free log std starts at ``model_config.log_std_init``."""

    def setup(self) -> None:
        super().setup()
        with torch.no_grad():
            self.pi.log_std.fill_(float(self.model_config[LOG_STD_INIT]))


def _scaled_frames(_layer: torch.nn.Module, inputs: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
    (frames,) = inputs
    return (frames.to(torch.float32) / 255.0,) if frames.dtype == torch.uint8 else inputs


class ScaledFrames:
    """Mixin before an RLlib default module: uint8 frames enter each CNN as float32 / 255."""

    def setup(self) -> None:
        super().setup()
        for layer in self.modules():
            if isinstance(layer, TorchCNN):
                layer.register_forward_pre_hook(_scaled_frames)


class ScaledFramesPPOModule(ScaledFrames, DefaultPPOTorchRLModule):
    """PPO's (and IMPALA's) default module on uint8 frames."""


class ScaledFramesAPPOModule(ScaledFrames, DefaultAPPOTorchRLModule):
    """APPO's default module on uint8 frames."""


class ScaledFramesDQNModule(ScaledFrames, DQNModule):
    """DQN's default module on uint8 frames."""


# RLlib's default module -> the same module on uint8 frames.
SCALED_FRAMES_MODULES: dict[type, type] = {
    DefaultPPOTorchRLModule: ScaledFramesPPOModule,
    DefaultAPPOTorchRLModule: ScaledFramesAPPOModule,
    DQNModule: ScaledFramesDQNModule,
}


# RLlib's default modules that build from a catalog they pick themselves when their spec names
# none -> that catalog.
DEFAULT_CATALOGS: dict[type, type] = {DefaultPPOTorchRLModule: PPOCatalog}


class SimbaPPOCatalog(SimbaCatalog, PPOCatalog):
    """RLlib's PPO catalog whose encoders are SimBa's with ``model_config.simba``."""


# The catalogs of the RLlib modules that take SimBa's encoders -> the same with them.
SIMBA_CATALOGS: dict[type, type] = {
    PPOCatalog: SimbaPPOCatalog,
    PaperCriticSACCatalog: SimbaSACCatalog,
}


class MemoryPPOCatalog(MemoryCatalog, PPOCatalog):
    """RLlib's PPO catalog whose encoder is a GRU or attention memory with
    ``model_config.memory``."""


# The catalogs of the RLlib modules that take rlplat's memories -> the same with them.
MEMORY_CATALOGS: dict[type, type] = {PPOCatalog: MemoryPPOCatalog}


def default_catalog(module_class: type) -> type | None:
    """The catalog an RLlib default module (or a subclass) builds from when its spec names none."""
    return next((DEFAULT_CATALOGS[k] for k in module_class.__mro__ if k in DEFAULT_CATALOGS), None)


class MaskedPPOModule(DefaultPPOTorchRLModule):
    """RLlib's default PPO module on Dict observations ``{observation, action_mask}``."""

    def __init__(self, *, observation_space: gym.spaces.Dict, **kwargs: Any):
        self.masked_observation_space = observation_space
        self.observation_key = _observation_key(observation_space)
        inner = observation_space[self.observation_key]
        self.inner_shape = inner.shape
        flat = gym.spaces.Box(
            low=np.asarray(inner.low, dtype=np.float32).reshape(-1),
            high=np.asarray(inner.high, dtype=np.float32).reshape(-1),
            dtype=np.float32,
        )
        super().__init__(observation_space=flat, **kwargs)

    def setup(self) -> None:
        super().setup()
        # Connectors and spec checks must see the env's real (Dict) space.
        self.observation_space = self.masked_observation_space

    def _split(self, batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        observations = batch[Columns.OBS]
        inner = observations[self.observation_key]
        keep = inner.dim() - len(self.inner_shape)
        flat = inner.reshape(*inner.shape[:keep], -1).float()
        return observations[ACTION_MASK], {**batch, Columns.OBS: flat}

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        mask, batch = self._split(batch)
        output = super()._forward(batch, **kwargs)
        output[Columns.ACTION_DIST_INPUTS] = _mask_logits(output[Columns.ACTION_DIST_INPUTS], mask)
        return output

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        mask, batch = self._split(batch)
        output = super()._forward_train(batch, **kwargs)
        output[Columns.ACTION_DIST_INPUTS] = _mask_logits(output[Columns.ACTION_DIST_INPUTS], mask)
        return output

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        if isinstance(batch[Columns.OBS], dict):
            batch = self._split(batch)[1]
        return super().compute_values(batch, embeddings)


class UniformRandomModule(RLModule):
    """Acts uniformly at random, among the legal actions when observations carry a mask.

    It has no weights and is never trained (``multi_agent.random``). A plain ``RLModule``, not a
    ``TorchRLModule``: torch learners then leave it alone instead of giving it an optimizer.
    Bounded Box actions are drawn in [-1, 1], the scale RLlib's ``normalize_actions`` (on by
    default) maps onto the Box's bounds, so they are uniform over the env's range.
    """

    def setup(self) -> None:
        self._masked = isinstance(self.observation_space, gym.spaces.Dict) and (
            ACTION_MASK in self.observation_space.spaces
        )

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        observations = batch[Columns.OBS]
        if self._masked:
            mask = observations[ACTION_MASK].float()
            return {Columns.ACTIONS: torch.multinomial(mask, 1).squeeze(-1)}
        size = len(next(iter(_leaves(observations))))
        space = self.action_space
        if isinstance(space, gym.spaces.Box) and space.is_bounded():
            return {Columns.ACTIONS: torch.rand(size, *space.shape) * 2.0 - 1.0}
        actions = np.stack([space.sample() for _ in range(size)])
        return {Columns.ACTIONS: torch.as_tensor(actions)}

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        raise NotImplementedError("a random policy is never trained")


def _leaves(observations: Any):
    if isinstance(observations, dict):
        for value in observations.values():
            yield from _leaves(value)
    else:
        yield observations
