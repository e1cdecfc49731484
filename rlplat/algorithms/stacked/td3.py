"""TD3 over stacked seeds (issue 104): one RL module holds N seeds' deterministic actors, twin
critics and their target copies along a leading seed axis (``rlplat.engine.stacked``), trained
on ``StackedOffPolicyLoop`` with each seed's own replay.

Each seed is rlplat's TD3 (``rlplat.algorithms.td3``): an actor MLP (``actor_hiddens``) ending in
tanh, critics over the observation and the action side by side (``critic_hiddens``), both with
``hidden_activation``; critics fitted to r + gamma (1 - terminated) min_i Q'_i(s', a'), a' the
target actor's action plus clipped noise (``target_noise``, ``target_noise_clip``); every
``policy_delay``-th update the actor climbs the first critic and the targets move ``tau``
towards their online networks. It acts uniformly at random for its first ``random_steps`` env
steps, then its action plus Gaussian noise (``exploration_noise``). Its parameters carry the
names of rlplat's ``TD3Module``, so ``seed_module_state`` is a state that module loads.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from ray.rllib.algorithms.dqn.dqn import DQN as RLlibDQN
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchDiagGaussian
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from rlplat.algorithms.actor_critic import ACTOR, CRITIC, BoxExploration, gaussian_inputs
from rlplat.algorithms.base import WithoutModeSwitch, move_towards
from rlplat.algorithms.stacked.offpolicy import (
    StackedOffPolicyLearner,
    StackedOffPolicyLoop,
    StackedOffPolicySettings,
    frozen_copy,
)
from rlplat.algorithms.stacked.runner import STACKED_SEEDS
from rlplat.algorithms.td3 import TD3Config
from rlplat.algorithms.td3.learner import QF_LOSS_KEY
from rlplat.algorithms.td3.rl_module import TD3Module
from rlplat.engine.stacked import seed_generators, seed_state, stacked_mlp

NETWORKS = ("actor", "critic", "critic_twin")
TARGET = "target_"


class StackedTD3Module(WithoutModeSwitch, TorchRLModule):
    """N seeds' TD3 networks (see the module's docstring), Box actions in [-1, 1]."""

    def setup(self) -> None:
        config = self.model_config
        self.seeds = [int(seed) for seed in config[STACKED_SEEDS]]
        count = len(self.seeds)
        obs_dim = gym.spaces.flatdim(self.observation_space)
        self.action_dim = gym.spaces.flatdim(self.action_space)
        activation = config["hidden_activation"]
        generators = seed_generators(self.seeds)

        def network(in_dim: int, hiddens: list[int], out_dim: int) -> nn.Module:
            return stacked_mlp(count, in_dim, list(hiddens), out_dim, activation, generators)

        self.actor = network(obs_dim, config["actor_hiddens"], self.action_dim)
        critic_in = obs_dim + self.action_dim
        self.critic = network(critic_in, config["critic_hiddens"], 1)
        self.twin_q = bool(config["twin_q"])
        if self.twin_q:
            self.critic_twin = network(critic_in, config["critic_hiddens"], 1)
        for name in self.network_names:
            setattr(self, TARGET + name, frozen_copy(getattr(self, name)))
        self.exploration = BoxExploration(
            float(config["exploration_noise"]), int(config["random_steps"])
        )
        self.target_noise = float(config["target_noise"])
        self.target_noise_clip = float(config["target_noise_clip"])

    @property
    def network_names(self) -> tuple[str, ...]:
        return NETWORKS if self.twin_q else NETWORKS[:2]

    def by_seed(self, rows: torch.Tensor) -> torch.Tensor:
        """(B, ...) seed-major rows as (seeds, B / seeds, features)."""
        return rows.reshape(len(self.seeds), -1, rows[0].numel()).float()

    def act(self, obs: torch.Tensor, prefix: str = "") -> torch.Tensor:
        """The (target, with ``prefix`` "target_") actors' actions in [-1, 1] for (seeds,
        rows, obs) observations."""
        return torch.tanh(getattr(self, prefix + "actor")(obs))

    def q(self, name: str, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Critic ``name``'s values (seeds, rows)."""
        return getattr(self, name)(torch.cat([obs, actions], dim=-1)).squeeze(-1)

    @torch.no_grad()
    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        mean = self.act(self.by_seed(obs)).reshape(obs.shape[0], -1)
        return {Columns.ACTION_DIST_INPUTS: gaussian_inputs(mean, BoxExploration.GREEDY_LOG_STD)}

    @torch.no_grad()
    def _forward_exploration(
        self, batch: dict[str, Any], t: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        mean = self.act(self.by_seed(obs)).reshape(obs.shape[0], -1)
        return {Columns.ACTIONS: self.exploration.actions(mean, t)}

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward_inference(batch)

    def get_inference_action_dist_cls(self) -> type:
        return TorchDiagGaussian

    def get_exploration_action_dist_cls(self) -> type:
        return TorchDiagGaussian

    def get_train_action_dist_cls(self) -> type:
        return TorchDiagGaussian

    def critic_parameters(self) -> list[nn.Parameter]:
        names = self.network_names[1:]
        return [p for name in names for p in getattr(self, name).parameters()]

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(getattr(self, name), getattr(self, TARGET + name)) for name in self.network_names]

    def seed_module_state(self, index: int) -> dict[str, torch.Tensor]:
        """The stack's ``index``-th seed as the parameters of rlplat's ``TD3Module`` (its
        actor and critics; its targets are the learner's)."""
        own = {
            key: tensor
            for key, tensor in self.state_dict().items()
            if key.split(".")[0] in self.network_names
        }
        return seed_state(own, index)


class StackedTD3Learner(StackedOffPolicyLearner):
    """``StackedOffPolicyLearner`` whose update is TD3's, for every seed at once."""

    def build(self) -> None:
        super().build()
        self.actor_losses: torch.Tensor | None = None  # of the last actor update, per seed

    def configure_optimizers_for_module(self, module_id: str, config: Any = None) -> None:
        """Adam for the critics and for the actors, each over the stacked tensors."""
        module = self.module[module_id].unwrapped()
        groups = (
            (CRITIC, module.critic_parameters(), config.critic_lr),
            (ACTOR, list(module.actor.parameters()), config.actor_lr),
        )
        self.register_adams(module_id, groups)

    def update_once(
        self, module: StackedTD3Module, optimizers: dict[str, Any], batch: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """One TD3 update of every seed on its batch (seeds, rows, ...): the critics; every
        ``policy_delay``-th update the actor (its loss under the critics as they were before
        this update's step) and then the targets."""
        config = self.config
        obs, next_obs, actions = batch[Columns.OBS], batch[Columns.NEXT_OBS], batch[Columns.ACTIONS]
        with torch.no_grad():
            next_actions = module.act(next_obs, TARGET)
            if module.target_noise > 0:
                clip = module.target_noise_clip
                noise = (torch.randn_like(next_actions) * module.target_noise).clamp(-clip, clip)
                next_actions = (next_actions + noise).clamp(-1.0, 1.0)
            next_value = module.q(TARGET + "critic", next_obs, next_actions)
            if module.twin_q:
                twin = module.q(TARGET + "critic_twin", next_obs, next_actions)
                next_value = torch.minimum(next_value, twin)
            target = batch["rewards"] + config.gamma * (1.0 - batch["terminateds"]) * next_value
        q = module.q("critic", obs, actions)
        critic_losses = (q - target).square().mean(1)
        td_error = (q.detach() - target).abs()
        if module.twin_q:
            q_twin = module.q("critic_twin", obs, actions)
            critic_losses = critic_losses + (q_twin - target).square().mean(1)
            td_error = 0.5 * (td_error + (q_twin.detach() - target).abs())
        actor_step = (self.updates + 1) % config.policy_delay == 0
        if actor_step:  # under the critics before their step, as rlplat's TD3 learner takes it
            actor_params = list(module.actor.parameters())
            actor_losses = -module.q("critic", obs, module.act(obs)).mean(1)
            actor_grads = torch.autograd.grad(actor_losses.sum(), actor_params)
        self.step(optimizers[CRITIC], critic_losses, module.critic_parameters())
        if actor_step:
            self.step(optimizers[ACTOR], actor_losses, actor_params, grads=actor_grads)
            self.actor_losses = actor_losses.detach()
            for online, target_network in module.target_pairs():
                move_towards(online, target_network, config.tau)
        stats = {
            QF_LOSS_KEY: critic_losses.detach(),
            "q_mean": q.detach().mean(1),
            "target_mean": target.mean(1),
            "td_error_mean": td_error.mean(1),
        }
        if self.actor_losses is not None:
            stats[POLICY_LOSS_KEY] = self.actor_losses
        return stats


class StackedTD3Config(StackedOffPolicySettings, TD3Config):
    """rlplat's ``TD3Config`` for a stack of seeds (``stacked(seeds=...)``): the stacked
    module, learner and env runner, in the one process of the trial."""

    stacked_module = StackedTD3Module
    stacked_learner = StackedTD3Learner
    seed_module = TD3Module

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or StackedTD3)


class StackedTD3(StackedOffPolicyLoop, RLlibDQN):
    """TD3 over a stack of seeds, on ``StackedOffPolicyLoop``."""

    @classmethod
    def get_default_config(cls) -> StackedTD3Config:
        return StackedTD3Config()
