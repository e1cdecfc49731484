"""The CrossQ RL module: a tanh-squashed Gaussian actor and twin critics, all with batch
renormalisation, no target networks, and the entropy temperature.

Actions live in [-1, 1]; RLlib's module-to-env pipeline scales them to the Box bounds
(``env_runners.normalize_actions``). Acting runs the actor in eval mode (RLlib's torch modules
switch to it around every acting pass), so batch renormalisation uses its running statistics:
greedy it takes tanh of the mean, exploring it samples the squashed Gaussian, or draws uniformly
while the run is within its first ``random_steps`` env steps. The learner sets each network's
mode for each of its passes itself (``CrossQLearner``). Env runners build only the actor
(``inference_only``); the learner also builds the critics and the temperature.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from rlplat.algorithms.actor_critic import SquashedGaussianActor
from rlplat.algorithms.networks import (
    BatchRenormSettings,
    SimbaSettings,
    renormed_mlp,
    simba_network,
)


class CrossQModule(SquashedGaussianActor, TorchRLModule, InferenceOnlyAPI):
    """Actor pi(a|s) = tanh(N(mu(s), sigma(s))) and critics Q_1, Q_2 (s, a)."""

    def setup(self) -> None:
        config = self.model_config
        if not isinstance(self.action_space, gym.spaces.Box):
            raise ValueError(f"CrossQ needs a Box action space, got {self.action_space}")
        self.obs_dim = int(gym.spaces.flatdim(self.observation_space))
        self.action_dim = int(gym.spaces.flatdim(self.action_space))
        self.random_steps = int(config["random_steps"])
        renorm = BatchRenormSettings(
            momentum=float(config["batch_norm_momentum"]),
            warmup_steps=int(config["batch_renorm_warmup"]),
        )
        activation, simba = config["hidden_activation"], SimbaSettings.of(config)

        def network(in_dim: int, hiddens: list[int], out_dim: int) -> nn.Module:
            if simba is not None:
                return simba_network(in_dim, simba, out_dim, renorm)
            return renormed_mlp(in_dim, hiddens, out_dim, activation, renorm)

        self.actor = network(self.obs_dim, config["actor_hiddens"], 2 * self.action_dim)
        if self.inference_only:
            return
        critic_in = self.obs_dim + self.action_dim
        self.critics = nn.ModuleList(
            network(critic_in, config["critic_hiddens"], 1) for _ in range(2)
        )
        self.log_alpha = nn.Parameter(torch.tensor(math.log(float(config["initial_alpha"]))))
        # Critic updates so far: where the actor's delay stands, kept in checkpoints.
        self.register_buffer("critic_updates", torch.zeros((), dtype=torch.long))

    # -- acting ------------------------------------------------------------------------------

    # -- training ----------------------------------------------------------------------------

    def q_values(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Q_i(s, a) of both critics, (2, B), in the critics' current mode."""
        inputs = torch.cat([obs.reshape(obs.shape[0], -1).float(), actions.float()], dim=-1)
        return torch.stack([critic(inputs).squeeze(-1) for critic in self.critics])

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {}  # the learner runs each pass in the mode CrossQ sets for it

    def get_non_inference_attributes(self) -> list[str]:
        return ["critics", "log_alpha", "critic_updates"]
