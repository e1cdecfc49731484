"""CrossQ over stacked seeds (issue 104): one RL module holds N seeds' actors, twin critics and
temperatures along a leading seed axis (``rlplat.engine.stacked``), each batch renormalisation
layer keeping each seed's statistics apart, trained on ``StackedOffPolicyLoop`` with each seed's
own replay.

Each seed is rlplat's CrossQ (``rlplat.algorithms.crossq``) for a Box action space: MLPs of
``actor_hiddens`` and ``critic_hiddens`` (``hidden_activation``) with batch renormalisation of
the input and after each hidden activation, no target networks. An update runs the critics
once, in training mode, over the seed's current and next transitions side by side (so both are
normalised with the same batch statistics, the seed's own), the next actions drawn by the actor
in eval mode; each critic fits r + gamma (1 - terminated) (min_i Q_i(s', a') - alpha
log pi(a'|s')) by half the squared error; every ``policy_delay``-th update the actor (in
training mode) and the temperature then step under the stepped critics in eval mode. Acting
runs the actor in eval mode (its running statistics). Its parameters and statistics carry the
names of rlplat's ``CrossQModule``, so ``seed_module_state`` is a state that module loads: one
seed is evaluated, exported and served as the single-seed policy it is.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
from ray.rllib.algorithms.dqn.dqn import DQN as RLlibDQN
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from rlplat.algorithms.actor_critic import LOG_STD_MAX, LOG_STD_MIN, squashed_sample
from rlplat.algorithms.base import WithoutModeSwitch
from rlplat.algorithms.crossq import CrossQConfig
from rlplat.algorithms.crossq.rl_module import CrossQModule
from rlplat.algorithms.networks import BatchRenormSettings, renormalised
from rlplat.algorithms.sac import SquashedGaussian
from rlplat.algorithms.stacked.offpolicy import (
    StackedOffPolicyLearner,
    StackedOffPolicyLoop,
    StackedOffPolicySettings,
)
from rlplat.algorithms.stacked.runner import STACKED_SEEDS
from rlplat.engine.stacked import ACTIVATIONS, StackedLinear, seed_generators, seed_state

CRITIC, ACTOR, ALPHA = "critic", "actor", "alpha"  # optimizer names, CrossQLearner's


class StackedBatchRenorm(nn.Module):
    """``seeds`` batch renormalisations (``rlplat.algorithms.networks.BatchRenorm``) over the
    features of (seeds, rows, features): each seed's batch statistics over its own rows, its own
    running statistics, scale and shift ((seeds, features) each)."""

    def __init__(self, seeds: int, features: int, settings: BatchRenormSettings):
        super().__init__()
        self.settings = settings
        self.weight = nn.Parameter(torch.ones(seeds, features))
        self.bias = nn.Parameter(torch.zeros(seeds, features))
        self.register_buffer("running_mean", torch.zeros(seeds, features))
        self.register_buffer("running_var", torch.ones(seeds, features))
        self.register_buffer("steps", torch.zeros(seeds, dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            mean, var = self.running_mean, self.running_var
        else:  # every seed has stepped as often
            warmed_up = bool(self.steps[0] > self.settings.warmup_steps)
            mean, var = renormalised(self, x.mean(dim=1), x.var(dim=1), warmed_up)
        mean, std = mean.unsqueeze(1), torch.sqrt(var + self.settings.eps).unsqueeze(1)
        return (x - mean) / std * self.weight.unsqueeze(1) + self.bias.unsqueeze(1)


def stacked_renormed_mlp(
    seeds: int,
    in_dim: int,
    hiddens: list[int],
    out_dim: int,
    activation: str,
    settings: BatchRenormSettings,
    generators: list[torch.Generator],
) -> nn.Sequential:
    """``seeds`` of CrossQ's MLPs (``rlplat.algorithms.networks.renormed_mlp``), layer for layer
    where it has its own: batch renormalisation of the input and after each activation."""
    layers: list[nn.Module] = [StackedBatchRenorm(seeds, in_dim, settings)]
    for width in hiddens:
        layers += [StackedLinear(seeds, in_dim, width, generators), ACTIVATIONS[activation]()]
        layers.append(StackedBatchRenorm(seeds, width, settings))
        in_dim = width
    layers.append(StackedLinear(seeds, in_dim, out_dim, generators))
    return nn.Sequential(*layers)


class StackedCrossQModule(WithoutModeSwitch, TorchRLModule):
    """N seeds' CrossQ networks and temperatures (see the module's docstring), Box actions."""

    def setup(self) -> None:
        config = self.model_config
        self.seeds = [int(seed) for seed in config[STACKED_SEEDS]]
        count, generators = len(self.seeds), seed_generators(self.seeds)
        obs_dim = gym.spaces.flatdim(self.observation_space)
        self.action_dim = gym.spaces.flatdim(self.action_space)
        self.random_steps = int(config["random_steps"] or 0)
        renorm = BatchRenormSettings(
            momentum=float(config["batch_norm_momentum"]),
            warmup_steps=int(config["batch_renorm_warmup"]),
        )
        activation = config["hidden_activation"]

        def network(in_dim: int, hiddens: list[int], out_dim: int) -> nn.Sequential:
            return stacked_renormed_mlp(
                count, in_dim, hiddens, out_dim, activation, renorm, generators
            )

        self.actor = network(obs_dim, config["actor_hiddens"], 2 * self.action_dim)
        critic_in = obs_dim + self.action_dim
        self.critics = nn.ModuleList(
            network(critic_in, config["critic_hiddens"], 1) for _ in range(2)
        )
        alpha = math.log(float(config["initial_alpha"]))
        self.log_alpha = nn.Parameter(torch.full((count,), alpha))

    def by_seed(self, rows: torch.Tensor) -> torch.Tensor:
        """(B, ...) seed-major rows as (seeds, B / seeds, features)."""
        return rows.reshape(len(self.seeds), -1, rows[0].numel()).float()

    def dist_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """The actors' means and clipped log stds of (seeds, rows, obs) observations, side by
        side, in the actors' current mode."""
        mean, log_std = self.actor(obs).chunk(2, dim=-1)
        return torch.cat([mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)], dim=-1)

    def q_values(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Q_i(s, a) of both critics, (2, seeds, rows), in the critics' current mode."""
        inputs = torch.cat([obs, actions], dim=-1)
        return torch.stack([critic(inputs).squeeze(-1) for critic in self.critics])

    def _acting_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        self.actor.eval()  # acting reads each seed's running statistics
        return self.dist_inputs(self.by_seed(obs)).reshape(obs.shape[0], -1)

    @torch.no_grad()
    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self._acting_inputs(batch[Columns.OBS])}

    @torch.no_grad()
    def _forward_exploration(
        self, batch: dict[str, Any], t: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Actions in the squashed range [-1, 1]: drawn uniformly for the first
        ``random_steps`` env steps, then from each seed's policy."""
        rows = batch[Columns.OBS].shape[0]
        if (t or 0) < self.random_steps:
            return {Columns.ACTIONS: torch.rand(rows, self.action_dim) * 2.0 - 1.0}
        actions, _ = squashed_sample(self._acting_inputs(batch[Columns.OBS]))
        return {Columns.ACTIONS: actions}

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward_inference(batch)

    def get_inference_action_dist_cls(self) -> type:
        return SquashedGaussian

    def get_exploration_action_dist_cls(self) -> type:
        return SquashedGaussian

    def get_train_action_dist_cls(self) -> type:
        return SquashedGaussian

    def seed_module_state(self, index: int) -> dict[str, torch.Tensor]:
        """The stack's ``index``-th seed as the state of rlplat's ``CrossQModule`` (its count
        of critic updates is the learner's)."""
        return seed_state(self.state_dict(), index)


class StackedCrossQLearner(StackedOffPolicyLearner):
    """``StackedOffPolicyLearner`` whose update is CrossQ's, for every seed at once."""

    def build(self) -> None:
        super().build()
        self.actor_stats: dict[str, torch.Tensor] = {}  # of the last actor update, per seed

    def configure_optimizers_for_module(self, module_id: str, config: Any = None) -> None:
        """CrossQLearner's three Adams, each over the stacked tensors (N independent ones):
        ``critic`` and ``actor`` with ``adam_beta1``, ``alpha`` with Adam's default betas."""
        module = self.module[module_id].unwrapped()
        roles = (
            (CRITIC, list(module.critics.parameters()), config.critic_lr),
            (ACTOR, list(module.actor.parameters()), config.actor_lr),
        )
        self.register_adams(module_id, roles, betas=(config.adam_beta1, 0.999))
        self.register_adams(module_id, ((ALPHA, [module.log_alpha], config.alpha_lr),))

    def update_once(
        self,
        module: StackedCrossQModule,
        optimizers: dict[str, Any],
        batch: dict[str, torch.Tensor],
    ) -> dict[str, torch.Tensor]:
        """One CrossQ update of every seed on its batch (seeds, rows, ...) in CrossQLearner's
        modes and order: the critics; every ``policy_delay``-th update the actor and the
        temperature under the stepped critics."""
        config = self.config
        obs, next_obs, actions = batch[Columns.OBS], batch[Columns.NEXT_OBS], batch[Columns.ACTIONS]
        seeds, rows = batch["rewards"].shape
        alpha = module.log_alpha.detach().exp().unsqueeze(1)
        with torch.no_grad():
            module.actor.eval()
            inputs = module.dist_inputs(next_obs).reshape(seeds * rows, -1)
            next_actions, next_logp = squashed_sample(inputs)
        module.critics.train()
        both = module.q_values(
            torch.cat([obs, next_obs], dim=1),
            torch.cat([actions, next_actions.reshape(seeds, rows, -1)], dim=1),
        )
        module.critics.eval()
        q, q_next = both[:, :, :rows], both[:, :, rows:].detach()
        with torch.no_grad():
            soft = q_next.min(dim=0).values - alpha * next_logp.reshape(seeds, rows)
            discount = config.gamma ** batch["n_step"]
            target = batch["rewards"] + discount * (1.0 - batch["terminateds"]) * soft
        critic_losses = 0.5 * (q - target).square().mean(2).sum(0)
        self.step(optimizers[CRITIC], critic_losses, list(module.critics.parameters()))
        if (self.updates + 1) % config.policy_delay == 0:
            module.actor.train()
            new_actions, logp = squashed_sample(module.dist_inputs(obs).reshape(seeds * rows, -1))
            module.actor.eval()
            logp = logp.reshape(seeds, rows)
            value = module.q_values(obs, new_actions.reshape(seeds, rows, -1)).min(dim=0).values
            actor_losses = (alpha * logp - value).mean(1)
            entropy = config.target_entropy
            target_entropy = -float(module.action_dim) if entropy is None else float(entropy)
            alpha_losses = -(module.log_alpha.unsqueeze(1) * (logp.detach() + target_entropy))
            self.step(optimizers[ACTOR], actor_losses, list(module.actor.parameters()))
            self.step(optimizers[ALPHA], alpha_losses.mean(1), [module.log_alpha])
            self.actor_stats = {POLICY_LOSS_KEY: actor_losses.detach(), "logp": logp.mean(1)}
        return {
            "qf_loss": critic_losses.detach(),
            "qf_mean": q.detach().mean(dim=(0, 2)),
            "target_mean": target.mean(1),
            "alpha_value": alpha.squeeze(1),
            **self.actor_stats,
        }


class StackedCrossQConfig(StackedOffPolicySettings, CrossQConfig):
    """rlplat's ``CrossQConfig`` for a stack of seeds (``stacked(seeds=...)``): the stacked
    module, learner and env runner, in the one process of the trial."""

    stacked_module = StackedCrossQModule
    stacked_learner = StackedCrossQLearner
    seed_module = CrossQModule

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or StackedCrossQ)


class StackedCrossQ(StackedOffPolicyLoop, RLlibDQN):
    """CrossQ over a stack of seeds, on ``StackedOffPolicyLoop``."""

    @classmethod
    def get_default_config(cls) -> StackedCrossQConfig:
        return StackedCrossQConfig()
