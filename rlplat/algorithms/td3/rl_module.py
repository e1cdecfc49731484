"""The TD3 RL module: a deterministic actor and one or two Q critics, plus their target copies.

Actions live in [-1, 1] (the actor ends in tanh); RLlib's module-to-env pipeline scales them to
the Box bounds (``env_runners.normalize_actions``, which TD3 requires). Acting greedily returns
the actor's action; exploring adds Gaussian noise of ``exploration_noise`` (in that [-1, 1]
scale, so 0.1 is 10 % of half the Box's range) and clips, or draws uniformly while the run is
within its first ``random_steps`` env steps. Env runners build only the actor
(``inference_only``); the learner also builds the critics and the target networks.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchDiagGaussian
from ray.rllib.core.rl_module.apis import InferenceOnlyAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from rlplat.algorithms.actor_critic import BoxExploration, gaussian_inputs, mlp
from rlplat.algorithms.base import TargetNetworks, WithoutModeSwitch
from rlplat.algorithms.networks import SimbaSettings, simba_network

Q_VALUES = "q_values"  # Q(s, a) of the replayed action, (B,)
Q_TWIN_VALUES = "q_twin_values"


class TD3Module(WithoutModeSwitch, TorchRLModule, InferenceOnlyAPI, TargetNetworks):
    """Deterministic actor mu(s) in [-1, 1]^d and critics Q(s, a) (twin when ``twin_q``)."""

    TARGET_NETWORKS = ("actor", "critic", "critic_twin")

    def setup(self) -> None:
        config = self.model_config
        if not isinstance(self.action_space, gym.spaces.Box):
            raise ValueError(f"TD3 needs a Box action space, got {self.action_space}")
        self.obs_dim = int(gym.spaces.flatdim(self.observation_space))
        self.action_dim = int(gym.spaces.flatdim(self.action_space))
        self.box_exploration = BoxExploration(
            float(config["exploration_noise"]), int(config["random_steps"])
        )
        self.target_noise = float(config["target_noise"])
        self.target_noise_clip = float(config["target_noise_clip"])
        self.twin_q = bool(config["twin_q"])
        activation, simba = config["hidden_activation"], SimbaSettings.of(config)

        def network(in_dim: int, hiddens: list[int], out_dim: int) -> nn.Module:
            if simba is not None:
                return simba_network(in_dim, simba, out_dim)
            return mlp(in_dim, hiddens, out_dim, activation)

        self.actor = network(self.obs_dim, config["actor_hiddens"], self.action_dim)
        if self.inference_only:
            return
        critic_in = self.obs_dim + self.action_dim
        self.critic = network(critic_in, config["critic_hiddens"], 1)
        self.critic_twin = network(critic_in, config["critic_hiddens"], 1) if self.twin_q else None

    # -- acting ------------------------------------------------------------------------------

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's action in [-1, 1]."""
        return torch.tanh(self.actor(obs.reshape(obs.shape[0], -1).float()))

    @torch.no_grad()
    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        mean = self.act(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: gaussian_inputs(mean, BoxExploration.GREEDY_LOG_STD)}

    @torch.no_grad()
    def _forward_exploration(
        self, batch: dict[str, Any], t: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        mean = self.act(batch[Columns.OBS])
        return {
            Columns.ACTIONS: self.box_exploration.actions(mean, t),
            Columns.ACTION_DIST_INPUTS: gaussian_inputs(mean, self.box_exploration.log_std),
        }

    def get_inference_action_dist_cls(self) -> type[TorchDiagGaussian]:
        return TorchDiagGaussian

    def get_exploration_action_dist_cls(self) -> type[TorchDiagGaussian]:
        return TorchDiagGaussian

    def get_train_action_dist_cls(self) -> type[TorchDiagGaussian]:
        return TorchDiagGaussian

    # -- training ----------------------------------------------------------------------------

    def q(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Q(s, a) of the critic (and of its twin, else None), each (B,)."""
        inputs = torch.cat([obs.reshape(obs.shape[0], -1).float(), actions.float()], dim=-1)
        twin = self.critic_twin(inputs).squeeze(-1) if self.critic_twin is not None else None
        return self.critic(inputs).squeeze(-1), twin

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        q, q_twin = self.q(batch[Columns.OBS], batch[Columns.ACTIONS])
        out = {Q_VALUES: q}
        if q_twin is not None:
            out[Q_TWIN_VALUES] = q_twin
        return out

    @torch.no_grad()
    def target_value(self, next_obs: torch.Tensor) -> torch.Tensor:
        """min of the target critics at the target actor's smoothed action in ``next_obs``."""
        next_obs = next_obs.reshape(next_obs.shape[0], -1).float()
        actions = torch.tanh(self.target_actor(next_obs))
        if self.target_noise > 0:
            noise = (torch.randn_like(actions) * self.target_noise).clamp(
                -self.target_noise_clip, self.target_noise_clip
            )
            actions = (actions + noise).clamp(-1.0, 1.0)
        inputs = torch.cat([next_obs, actions], dim=-1)
        value = self.target_critic(inputs).squeeze(-1)
        if self.target_critic_twin is not None:
            value = torch.min(value, self.target_critic_twin(inputs).squeeze(-1))
        return value

    def critics(self) -> list[nn.Module]:
        return [self.critic] + ([self.critic_twin] if self.critic_twin is not None else [])

    def forward_target(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Q_VALUES: self.target_value(batch[Columns.NEXT_OBS])}

    def get_non_inference_attributes(self) -> list[str]:
        return [
            "critic",
            "critic_twin",
            "target_actor",
            "target_critic",
            "target_critic_twin",
        ]
