"""PPO over stacked seeds (issue 104): one RL module holds N seeds' actor-critics along a
leading axis (``rlplat.engine.stacked``), so N seeds act and learn in one process for about the
price of a few.

``StackedPPOModule`` is RLlib's default PPO networks (``DefaultPPOTorchRLModule`` without shared
layers: an actor MLP encoder and a critic MLP encoder of ``fcnet_hiddens`` with
``fcnet_activation``, then a linear policy head and a linear value head) for every seed of
``model_config["stacked_seeds"]``. Its batches are seed-major: of B rows, rows [i B/N, (i+1) B/N)
are seed i's (its env copies when acting, its minibatch when learning). Its parameters carry
RLlib's names with a leading seed axis, so ``seed_module_state`` is a state that RLlib's own
module loads: one seed is evaluated, exported and served as the single-seed policy it is.
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
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from rlplat.engine.stacked import seed_generators, seed_state, stacked_mlp

STACKED_SEEDS = "stacked_seeds"  # model_config key: the stack's seeds, in order
# RLlib's DefaultModelConfig
DEFAULT_HIDDENS, DEFAULT_ACTIVATION, LOG_STD_CLIP = (256, 256), "tanh", 20.0


def _as_rllib_mlp(layers: nn.Sequential) -> nn.Module:
    """``layers`` where RLlib's MLP encoders and heads keep theirs (``<name>.net.mlp.<i>``)."""
    return nn.ModuleDict({"net": nn.ModuleDict({"mlp": layers})})


class StackedPPOModule(TorchRLModule, ValueFunctionAPI):
    """N seeds' PPO actor-critics (see the module's docstring), Discrete or Box actions."""

    def setup(self) -> None:
        config = self.model_config
        self.seeds = [int(seed) for seed in config[STACKED_SEEDS]]
        hiddens = list(config.get("fcnet_hiddens", DEFAULT_HIDDENS))
        activation = config.get("fcnet_activation", DEFAULT_ACTIVATION)
        count, obs_dim = len(self.seeds), gym.spaces.flatdim(self.observation_space)
        generators = seed_generators(self.seeds)  # each seed draws its layers in this order

        def encoder() -> nn.Module:
            return _as_rllib_mlp(stacked_mlp(count, obs_dim, hiddens, None, activation, generators))

        def head(size: int) -> nn.Module:
            return _as_rllib_mlp(stacked_mlp(count, hiddens[-1], [], size, activation, generators))

        self.encoder = nn.ModuleDict({"actor_encoder": encoder(), "critic_encoder": encoder()})
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            self.pi = head(int(space.n))
        else:  # a Gaussian's means and log standard deviations, as RLlib's head outputs them
            self.pi = head(2 * gym.spaces.flatdim(space))
        self.vf = head(1)

    def _by_seed(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, ...) seed-major observations as (seeds, B / seeds, features)."""
        return obs.reshape(len(self.seeds), -1, obs[0].numel()).float()

    def _features(self, side: str, obs: torch.Tensor) -> torch.Tensor:
        return self.encoder[side]["net"]["mlp"](self._by_seed(obs))

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        inputs = self.pi["net"]["mlp"](self._features("actor_encoder", obs))
        if not isinstance(self.action_space, gym.spaces.Discrete):  # RLlib's head clips log stds
            means, log_stds = inputs.chunk(2, dim=-1)
            clip = float(self.model_config.get("log_std_clip_param", LOG_STD_CLIP))
            inputs = torch.cat([means, log_stds.clamp(-clip, clip)], dim=-1)
        return {Columns.ACTION_DIST_INPUTS: inputs.reshape(obs.shape[0], -1)}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        obs = batch[Columns.OBS]
        values = self.vf["net"]["mlp"](self._features("critic_encoder", obs))
        return values.reshape(obs.shape[0])

    def _action_dist_cls(self) -> type:
        if isinstance(self.action_space, gym.spaces.Discrete):
            return TorchCategorical
        return TorchDiagGaussian

    def get_inference_action_dist_cls(self) -> type:
        return self._action_dist_cls()

    def get_exploration_action_dist_cls(self) -> type:
        return self._action_dist_cls()

    def get_train_action_dist_cls(self) -> type:
        return self._action_dist_cls()

    def seed_module_state(self, index: int) -> dict[str, torch.Tensor]:
        """The stack's ``index``-th seed as the parameters of RLlib's ``DefaultPPOTorchRLModule``
        with the same ``model_config`` (``vf_share_layers: false``); RLlib's module keeps its
        constant buffers (its heads' log-std clip)."""
        return seed_state(self.state_dict(), index)
