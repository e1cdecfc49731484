"""The CrossQ losses (Bhatt et al. 2024) on batches of replayed transitions.

Every update runs the critics once, in training mode, over the current and the next
transitions side by side: batch renormalisation then normalises both with the same statistics,
which is what lets CrossQ drop target networks. Each critic fits r + gamma^n (1 - terminated)
(min_i Q_i(s', a') - alpha log pi(a'|s')), a' ~ pi(s') drawn by the actor in eval mode, with the
next half of that pass (no gradient through it), by half the squared error summed over the two
critics. Every ``policy_delay``-th update, after the critics have stepped, the actor (in
training mode) draws a ~ pi(s) and minimises alpha log pi(a|s) - min_i Q_i(s, a) under the
stepped critics in eval mode, and the temperature moves the policy's entropy towards
``target_entropy``; alpha in the actor's loss is its value before the update.

The modes and the order are those of sb3-contrib 2.9.2's CrossQ (``sb3_contrib/crossq/crossq.py``,
``train``), which the authors reviewed.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.utils.metrics import ALL_MODULES
from ray.rllib.utils.typing import ModuleID, ParamDict

from rlplat.algorithms.actor_critic import squashed_sample
from rlplat.algorithms.crossq.rl_module import CrossQModule
from rlplat.engine.learner import (
    RlplatLearner,
    optimizer_parameters,
    registered_optimizers,
    step_if_finite,
)
from rlplat.engine.optimizers import adam

CRITIC, ACTOR, ALPHA = "critic", "actor", "alpha"  # optimizer names


class CrossQLearner(RlplatLearner):
    """Three Adam optimizers per module: ``critic`` (both critics) and ``actor`` with
    ``adam_beta1``, ``alpha`` (the log temperature) with Adam's default betas."""

    def build(self) -> None:
        super().build()
        self._updates: dict[ModuleID, int] = {}
        self._actor_batches: dict[ModuleID, torch.Tensor] = {}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self._updates.clear()

    def configure_optimizers_for_module(self, module_id: ModuleID, config: AlgorithmConfig) -> None:
        module = self.module[module_id].unwrapped()
        betas = (config.adam_beta1, 0.999)
        for name, params, lr, optimizer_betas in (
            (CRITIC, self.get_parameters(module.critics), config.critic_lr, betas),
            (ACTOR, self.get_parameters(module.actor), config.actor_lr, betas),
            (ALPHA, [module.log_alpha], config.alpha_lr, (0.9, 0.999)),
        ):
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=name,
                optimizer=adam(params, betas=optimizer_betas),
                params=params,
                lr_or_lr_schedule=lr,
            )

    def compute_loss_for_module(
        self, *, module_id: ModuleID, config: AlgorithmConfig, batch: dict, fwd_out: dict
    ) -> torch.Tensor:
        """The critics' loss; the actor's and the temperature's wait for the stepped critics."""
        module: CrossQModule = self.module[module_id].unwrapped()
        obs, actions = batch[Columns.OBS], batch[Columns.ACTIONS]
        alpha = module.log_alpha.exp().detach()
        with torch.no_grad():
            module.actor.eval()
            next_actions, next_logp = squashed_sample(module.dist_inputs(batch[Columns.NEXT_OBS]))
        module.critics.train()
        q_both = module.q_values(
            torch.cat([obs.reshape(len(obs), -1), batch[Columns.NEXT_OBS].reshape(len(obs), -1)]),
            torch.cat([actions, next_actions]),
        )
        module.critics.eval()
        q, q_next = q_both[:, : len(obs)], q_both[:, len(obs) :].detach()
        with torch.no_grad():
            n_step = batch.get("n_step")
            discount = config.gamma ** (n_step.float() if n_step is not None else 1.0)
            alive = 1.0 - batch[Columns.TERMINATEDS].float()
            soft_next_value = q_next.min(dim=0).values - alpha * next_logp
            target = batch[Columns.REWARDS].float() + discount * alive * soft_next_value
        critic_loss = 0.5 * ((q - target) ** 2).mean(dim=1).sum()

        if module_id not in self._updates:  # built or restored: the count the module keeps
            self._updates[module_id] = int(module.critic_updates)
        updates = self._updates[module_id] = self._updates[module_id] + 1
        module.critic_updates.fill_(updates)
        if updates % config.policy_delay == 0:
            self._actor_batches[module_id] = obs
        self.metrics.log_dict(
            {
                "qf_loss": critic_loss.detach(),
                "qf_mean": q.detach().mean(),
                "target_mean": target.mean(),
                "alpha_value": alpha,
            },
            key=module_id,
            window=1,
        )
        return critic_loss

    def compute_gradients(
        self, loss_per_module: dict[ModuleID, torch.Tensor], **kwargs: Any
    ) -> ParamDict:
        """The critics' gradients; where the actor is due, the critics step here and the
        gradients are the actor's and the temperature's under the stepped critics."""
        for optimizer in registered_optimizers(self):
            optimizer.zero_grad(set_to_none=True)
        grads: ParamDict = {}
        for module_id in set(loss_per_module) - {ALL_MODULES}:
            critic_grads = self._gradients(module_id, CRITIC, loss_per_module[module_id])
            obs = self._actor_batches.pop(module_id, None)
            if obs is None:
                grads.update(critic_grads)
                continue
            critic_grads = self.postprocess_gradients(critic_grads)
            step_if_finite(self, critic_grads, [self._optimizer(module_id, CRITIC)])
            for param in critic_grads:  # a torch param is its own ref
                param.grad = None
            actor_loss, alpha_loss = self._actor_losses(module_id, obs)
            grads.update(self._gradients(module_id, ACTOR, actor_loss))
            grads.update(self._gradients(module_id, ALPHA, alpha_loss))
        return grads

    def _actor_losses(
        self, module_id: ModuleID, obs: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """alpha log pi(a|s) - min_i Q_i(s, a), a ~ pi(s) reparameterised, and the temperature's
        loss -log alpha (log pi(a|s) + target entropy)."""
        module: CrossQModule = self.module[module_id].unwrapped()
        module.actor.train()
        actions, logp = squashed_sample(module.dist_inputs(obs))
        module.actor.eval()
        alpha = module.log_alpha.exp().detach()
        q = module.q_values(obs, actions).min(dim=0).values
        actor_loss = (alpha * logp - q).mean()
        target_entropy = self.config.get_config_for_module(module_id).target_entropy
        if target_entropy is None:
            target_entropy = -float(module.action_dim)
        alpha_loss = -(module.log_alpha * (logp.detach() + target_entropy)).mean()
        self.metrics.log_dict(
            {POLICY_LOSS_KEY: actor_loss.detach(), "logp": logp.detach().mean()},
            key=module_id,
            window=1,
        )
        return actor_loss, alpha_loss

    def _optimizer(self, module_id: ModuleID, name: str) -> torch.optim.Optimizer:
        return dict(self.get_optimizers_for_module(module_id))[name]

    def _gradients(self, module_id: ModuleID, name: str, loss: torch.Tensor) -> ParamDict:
        """The gradient of ``loss`` with respect to the parameters of optimizer ``name`` only."""
        params = optimizer_parameters(self._optimizer(module_id, name))
        values = torch.autograd.grad(loss, params, retain_graph=True)
        return dict(zip(params, values, strict=True))
