"""SAC over stacked seeds (issue 104): one RL module holds N seeds' actors, twin critics, target
critics and temperatures along a leading seed axis (``rlplat.engine.stacked``), one replay memory
holds each seed's transitions apart, and one update steps every seed.

Each seed is rlplat's SAC (``rlplat.algorithms.sac``) for a Box action space: an actor MLP
(``fcnet_hiddens``, ``fcnet_activation``) with a linear head of means and log standard deviations
(``head_fcnet_hiddens`` before it), a tanh-squashed Gaussian; two critics, each one MLP over the
observation and the action side by side, fitted by half the squared soft TD error against the
smaller of two Polyak-averaged target critics; the critics step first and the actor's loss is
taken under the stepped critics (the SAC paper's order); a learned temperature per seed moves
its policy's entropy towards the target entropy. The first ``random_steps`` env steps act
uniformly at random. A seed replays only its own transitions, each seed's batch its own draw.
Its parameters carry the names of rlplat's ``SACModule``, so ``seed_module_state`` is a state
that module loads: one seed is evaluated, exported and served as the single-seed policy it is.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
from ray.rllib.algorithms.sac.sac import SAC as RLlibSAC
from ray.rllib.algorithms.sac.sac_learner import (
    QF_LOSS_KEY,
    QF_MEAN_KEY,
    QF_TWIN_LOSS_KEY,
    TD_ERROR_MEAN_KEY,
)
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from rlplat.algorithms.base import WithoutModeSwitch, move_towards
from rlplat.algorithms.sac import PaperCriticSACCatalog, SACConfig, SACModule, SquashedGaussian
from rlplat.algorithms.stacked.offpolicy import (
    StackedOffPolicyLearner,
    StackedOffPolicyLoop,
    StackedOffPolicySettings,
    frozen_copy,
)
from rlplat.algorithms.stacked.runner import (
    STACKED_SEEDS,
    as_rllib_mlp,
)
from rlplat.engine.stacked import (
    seed_generators,
    seed_state,
    stacked_mlp,
)

DEFAULT_HIDDENS, DEFAULT_ACTIVATION = (256, 256), "tanh"  # RLlib's DefaultModelConfig
ACTOR = ("pi_encoder", "pi")
CRITICS = ("qf_encoder", "qf", "qf_twin_encoder", "qf_twin")
TARGET = "target_"  # a target critic's name: target_<its critic's>
ALPHA_LOSS, ALPHA_VALUE = "alpha_loss", "alpha_value"


class StackedSACModule(WithoutModeSwitch, TorchRLModule):
    """N seeds' SAC networks and temperatures (see the module's docstring), Box actions."""

    def setup(self) -> None:
        config = self.model_config
        self.seeds = [int(seed) for seed in config[STACKED_SEEDS]]
        hiddens = list(config.get("fcnet_hiddens", DEFAULT_HIDDENS))
        activation = config.get("fcnet_activation", DEFAULT_ACTIVATION)
        head_hiddens = list(config.get("head_fcnet_hiddens", []))
        head_activation = config.get("head_fcnet_activation", "relu")
        count = len(self.seeds)
        obs_dim = gym.spaces.flatdim(self.observation_space)
        self.action_dim = gym.spaces.flatdim(self.action_space)
        generators = seed_generators(self.seeds)

        def encoder(inputs: int) -> nn.Module:
            return as_rllib_mlp(stacked_mlp(count, inputs, hiddens, None, activation, generators))

        def head(size: int) -> nn.Module:
            return as_rllib_mlp(
                stacked_mlp(count, hiddens[-1], head_hiddens, size, head_activation, generators)
            )

        self.pi_encoder, self.pi = encoder(obs_dim), head(2 * self.action_dim)
        self.twin_q = bool(config.get("twin_q", True))
        critics = ("qf_encoder", "qf") + (("qf_twin_encoder", "qf_twin") if self.twin_q else ())
        for name in critics:
            network = encoder(obs_dim + self.action_dim) if name.endswith("encoder") else head(1)
            setattr(self, name, network)
        for name in critics:
            setattr(self, TARGET + name, frozen_copy(getattr(self, name)))
        self.log_alpha = nn.Parameter(torch.zeros(count))  # the learner sets initial_alpha
        self.random_steps = int(config.get("random_steps", 0) or 0)

    @property
    def critic_names(self) -> tuple[str, ...]:
        return CRITICS if self.twin_q else CRITICS[:2]

    def by_seed(self, rows: torch.Tensor) -> torch.Tensor:
        """(B, ...) seed-major rows as (seeds, B / seeds, features)."""
        return rows.reshape(len(self.seeds), -1, rows[0].numel()).float()

    def policy_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """The actors' distribution inputs for (seeds, rows, obs) observations."""
        return self.pi["net"]["mlp"](self.pi_encoder["net"]["mlp"](obs))

    def critic(self, name: str, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Critic ``name``'s values (seeds, rows) of (seeds, rows, ...) observations and
        actions."""
        encoder, head = getattr(self, f"{name}_encoder"), getattr(self, name)
        features = encoder["net"]["mlp"](torch.cat([obs, actions], dim=-1))
        return head["net"]["mlp"](features).squeeze(-1)

    def q_values(self, obs: torch.Tensor, actions: torch.Tensor, prefix: str = "") -> torch.Tensor:
        """min over the (target, with ``prefix`` "target_") critics, (seeds, rows)."""
        values = self.critic(prefix + "qf", obs, actions)
        if self.twin_q:
            values = torch.minimum(values, self.critic(prefix + "qf_twin", obs, actions))
        return values

    def policy(self, inputs: torch.Tensor) -> SquashedGaussian:
        """The squashed Gaussians of (seeds, rows, 2 x action) inputs, rows flattened."""
        return SquashedGaussian.from_logits(inputs.reshape(-1, inputs.shape[-1]))

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        inputs = self.policy_inputs(self.by_seed(obs))
        return {Columns.ACTION_DIST_INPUTS: inputs.reshape(obs.shape[0], -1)}

    @torch.no_grad()
    def _forward_exploration(
        self, batch: dict[str, Any], t: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Actions in the squashed range [-1, 1]: drawn uniformly for the first
        ``random_steps`` env steps, then from each seed's policy."""
        rows = batch[Columns.OBS].shape[0]
        if (t or 0) < self.random_steps:
            return {Columns.ACTIONS: torch.rand(rows, self.action_dim) * 2.0 - 1.0}
        inputs = self._forward(batch)[Columns.ACTION_DIST_INPUTS]
        return {Columns.ACTIONS: self.policy(inputs).sample()}

    def get_inference_action_dist_cls(self) -> type:
        return SquashedGaussian

    def get_exploration_action_dist_cls(self) -> type:
        return SquashedGaussian

    def get_train_action_dist_cls(self) -> type:
        return SquashedGaussian

    def actor_parameters(self) -> list[nn.Parameter]:
        return [p for name in ACTOR for p in getattr(self, name).parameters()]

    @property
    def critic_heads(self) -> tuple[str, ...]:
        return ("qf", "qf_twin") if self.twin_q else ("qf",)

    def critic_parameters(self, head: str | None = None) -> list[nn.Parameter]:
        """The critics' parameters (of critic ``head`` alone: "qf" or "qf_twin")."""
        names = self.critic_names if head is None else (f"{head}_encoder", head)
        return [p for name in names for p in getattr(self, name).parameters()]

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(getattr(self, name), getattr(self, TARGET + name)) for name in self.critic_names]

    def seed_module_state(self, index: int) -> dict[str, torch.Tensor]:
        """The stack's ``index``-th seed as the parameters of rlplat's ``SACModule`` (actor and
        critics; its targets are the learner's, its temperature the stack's)."""
        names = (*ACTOR, *self.critic_names)
        own = {k: v for k, v in self.state_dict().items() if k.split(".")[0] in names}
        return seed_state(own, index)


# -- learning ------------------------------------------------------------------------------------


class StackedSACLearner(StackedOffPolicyLearner):
    """``StackedOffPolicyLearner`` whose update is SAC's, for every seed at once."""

    def build(self) -> None:
        super().build()
        config = self.config
        module = self.module[DEFAULT_MODULE_ID].unwrapped()
        with torch.no_grad():  # in place: the temperature's optimizer holds this tensor
            module.log_alpha.fill_(math.log(config.initial_alpha))
        entropy = config.target_entropy
        self.target_entropy = -float(module.action_dim) if entropy in (None, "auto") else entropy

    def configure_optimizers_for_module(self, module_id: str, config: Any = None) -> None:
        """Adam (eps 1e-7, RLlib's SAC's) for the critics, the actors and the temperatures,
        each over the stacked tensors: one optimizer per role, N independent ones per seed."""
        module = self.module[module_id].unwrapped()
        groups = (
            ("critic", module.critic_parameters(), config.critic_lr),
            ("policy", module.actor_parameters(), config.actor_lr),
            ("alpha", [module.log_alpha], config.alpha_lr),
        )
        self.register_adams(module_id, groups, eps=1e-7)

    def update_once(
        self, module: StackedSACModule, optimizers: dict[str, Any], batch: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """One SAC update of every seed on its batch (seeds, rows, ...): critics, then actor and
        temperature under the stepped critics, then the target critics where due
        (``target_network_update_freq`` env steps, RLlib's; 0: every update)."""
        config = self.config
        obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
        alpha = module.log_alpha.detach().exp().unsqueeze(1)
        seeds, rows = batch["rewards"].shape
        with torch.no_grad():
            next_dist = module.policy(module.policy_inputs(next_obs))
            next_actions, next_logp = next_dist.sample_and_logp()
            next_actions = next_actions.reshape(seeds, rows, -1)
            next_value = module.q_values(next_obs, next_actions, TARGET)
            soft = next_value - alpha * next_logp.reshape(seeds, rows)
            alive = 1.0 - batch["terminateds"]
            target = batch["rewards"] + config.gamma * alive * soft
        q = module.critic("qf", obs, batch[Columns.ACTIONS])
        stats = {QF_LOSS_KEY: 0.5 * (q - target).square().mean(1)}
        critic_losses = stats[QF_LOSS_KEY]
        td_error = (q.detach() - target).abs()
        if module.twin_q:
            q_twin = module.critic("qf_twin", obs, batch[Columns.ACTIONS])
            stats[QF_TWIN_LOSS_KEY] = 0.5 * (q_twin - target).square().mean(1)
            critic_losses = critic_losses + stats[QF_TWIN_LOSS_KEY]
            td_error = 0.5 * (td_error + (q_twin.detach() - target).abs())
        critics = [list(module.critic_parameters(name)) for name in module.critic_heads]
        self.step(
            optimizers["critic"], critic_losses, module.critic_parameters(), clip_groups=critics
        )

        dist = module.policy(module.policy_inputs(obs))
        actions, logp = dist.rsample_and_logp()
        logp = logp.reshape(seeds, rows)
        value = module.q_values(obs, actions.reshape(seeds, rows, -1))
        actor_losses = (alpha * logp - value).mean(1)
        self.step(optimizers["policy"], actor_losses, module.actor_parameters())

        gap = logp.detach() + self.target_entropy
        alpha_losses = -(module.log_alpha.unsqueeze(1) * gap).mean(1)
        self.step(optimizers["alpha"], alpha_losses, [module.log_alpha])
        if config.target_network_update_freq <= self.sampled - self.last_target_update:
            for main, target_network in module.target_pairs():
                move_towards(main, target_network, config.tau)
            self.last_target_update = self.sampled
        return {
            **{name: loss.detach() for name, loss in stats.items()},
            POLICY_LOSS_KEY: actor_losses.detach(),
            ALPHA_LOSS: alpha_losses.detach(),
            ALPHA_VALUE: alpha.squeeze(1),
            QF_MEAN_KEY: value.detach().mean(1),
            TD_ERROR_MEAN_KEY: td_error.mean(1),
        }


# -- the algorithm -------------------------------------------------------------------------------


class StackedSACConfig(StackedOffPolicySettings, SACConfig):
    """rlplat's ``SACConfig`` for a stack of seeds (``stacked(seeds=...)``): the stacked
    module, learner and env runner, in the one process of the trial."""

    stacked_module = StackedSACModule
    stacked_learner = StackedSACLearner
    seed_module = SACModule
    seed_catalog = PaperCriticSACCatalog

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or StackedSAC)


class StackedSAC(StackedOffPolicyLoop, RLlibSAC):
    """SAC over a stack of seeds, on ``StackedOffPolicyLoop``."""

    @classmethod
    def get_default_config(cls) -> StackedSACConfig:
        return StackedSACConfig()
