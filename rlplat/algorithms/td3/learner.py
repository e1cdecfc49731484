"""The TD3 losses (Fujimoto et al. 2018) on batches of replayed transitions.

Every update fits the critics to r + gamma^n (1 - terminated) min_i Q'_i(s', clip(mu'(s') + eps)),
eps ~ clip(N(0, target_noise), +-target_noise_clip) (clipped double Q and target policy
smoothing). Every ``policy_delay``-th update also moves the actor up the first critic,
maximising Q_1(s, mu(s)), and then moves every target network a ``tau`` step towards its
online one. The actor's loss reaches the critic's parameters in the graph; each optimizer takes
the gradient of its own loss only.
"""

from __future__ import annotations

import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.utils.typing import ModuleID

from rlplat.algorithms.actor_critic import ACTOR, CRITIC, ActorCriticLearner
from rlplat.algorithms.td3.rl_module import Q_TWIN_VALUES, Q_VALUES

QF_LOSS_KEY = "qf_loss"


class TD3TorchLearner(ActorCriticLearner):
    def build(self) -> None:
        super().build()
        self._critic_updates: dict[ModuleID, int] = {}

    def module_losses(
        self, module_id: ModuleID, config: AlgorithmConfig, batch: dict, fwd_out: dict
    ) -> dict[str, torch.Tensor]:
        module = self.module[module_id].unwrapped()
        rewards = batch[Columns.REWARDS].float()
        n_step = batch.get("n_step")
        discount = config.gamma ** (n_step.float() if n_step is not None else 1.0)
        with torch.no_grad():
            next_value = module.forward_target(batch)[Q_VALUES]
            alive = 1.0 - batch[Columns.TERMINATEDS].float()
            target = rewards + discount * alive * next_value

        q = fwd_out[Q_VALUES]
        critic_loss = ((q - target) ** 2).mean()
        td_error = (q - target).abs()
        if Q_TWIN_VALUES in fwd_out:
            critic_loss = critic_loss + ((fwd_out[Q_TWIN_VALUES] - target) ** 2).mean()
            td_error = 0.5 * (td_error + (fwd_out[Q_TWIN_VALUES] - target).abs())
        losses = {CRITIC: critic_loss}

        updates = self._critic_updates.get(module_id, 0) + 1
        self._critic_updates[module_id] = updates
        if updates % config.policy_delay == 0:
            obs = batch[Columns.OBS]
            losses[ACTOR] = -module.q(obs, module.act(obs))[0].mean()
            self.metrics.log_value((module_id, POLICY_LOSS_KEY), losses[ACTOR].item(), window=1)

        self.metrics.log_dict(
            {
                QF_LOSS_KEY: critic_loss.item(),
                "q_mean": q.mean().item(),
                "target_mean": target.mean().item(),
                "td_error_mean": td_error.mean().item(),
            },
            key=module_id,
            window=1,
        )
        return losses
