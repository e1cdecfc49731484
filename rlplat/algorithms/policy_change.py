"""How far each PPO update moves the policy, logged whatever the loss uses: ``approx_kl`` (the
KL of the new policy from the one that sampled the batch, Schulman's low-variance estimator
``(r - 1) - log r`` of the probability ratio r) and ``clip_fraction`` (the share of rows whose
ratio left ``1 +/- clip_param``). RLlib logs its ``mean_kl_loss`` only with ``use_kl_loss`` (a
constant 0 otherwise) and no clip fraction; the training-health diagnoses read both
(rlplat.health). Costs one log-probability of the minibatch's actions per update, no gradient.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns

APPROX_KL = "approx_kl"
CLIP_FRACTION = "clip_fraction"


def applies(learner_class: type) -> bool:
    """The learner computes PPO's clipped loss (PPO's, MAPPO's)."""
    return issubclass(learner_class, PPOTorchLearner)


class PolicyChangeStats:
    """Learner mixin (before a ``PPOTorchLearner``): see the module's docstring."""

    def compute_loss_for_module(
        self, *, module_id: str, config: Any, batch: dict[str, Any], fwd_out: dict[str, Any]
    ) -> Any:
        loss = super().compute_loss_for_module(  # type: ignore[misc]
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )
        if not self.in_final_minibatch:  # type: ignore[attr-defined]
            return loss  # logged with window=1: only the update's last minibatch is reported
        with torch.no_grad():
            module = self.module[module_id].unwrapped()  # type: ignore[attr-defined]
            dist = module.get_train_action_dist_cls().from_logits(
                fwd_out[Columns.ACTION_DIST_INPUTS]
            )
            log_ratio = dist.logp(batch[Columns.ACTIONS]) - batch[Columns.ACTION_LOGP]
            ratio = torch.exp(log_ratio)
            kl = (ratio - 1.0) - log_ratio
            clipped = ((ratio - 1.0).abs() > config.clip_param).float()
            if Columns.LOSS_MASK in batch:
                mask = batch[Columns.LOSS_MASK]
                kl, clipped = kl[mask], clipped[mask]
            self.metrics.log_dict(  # type: ignore[attr-defined]
                {APPROX_KL: kl.mean(), CLIP_FRACTION: clipped.mean()}, key=module_id, window=1
            )
        return loss
