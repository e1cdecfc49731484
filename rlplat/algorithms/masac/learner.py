"""The MASAC losses on batches of joint transitions (MADDPG's joint replay, SAC's losses).

Every trained policy's module gets the same joint sample, and for each agent i it acts for:

    critics: Q_k(x, a_1..a_N, i) -> r_i + gamma (1 - terminated_i)
                 (min_k Q'_k(x', a'_1..a'_N, i) - alpha log pi(a'_i|o'_i))
             with a'_j ~ pi_{policy(j)}(o'_j), each agent's current actor (SAC has no target
             actor), and Q'_k the critics' target copies
    actor:   minimise alpha log pi(a_i|o_i) - min_k Q_k(x, a_1..a_i..a_N, i), a_i ~ pi(o_i)
             reparameterised, the other agents' actions as replayed
    alpha:   -log alpha (log pi(a_i|o_i) + target_entropy)

(x: all observations), averaged over the policy's agents. Agents of a random policy draw their
next actions uniformly. After each update the critics' target copies move a ``tau`` step.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.utils.typing import ModuleID
from torch.nn import functional as F

from rlplat.algorithms.actor_critic import ACTOR, CRITIC
from rlplat.algorithms.maddpg.joint_replay import column
from rlplat.algorithms.maddpg.learner import QF_LOSS_KEY, MADDPGTorchLearner
from rlplat.algorithms.masac.rl_module import MASACModule

ALPHA = "alpha"  # the temperature's optimizer


class MASACTorchLearner(MADDPGTorchLearner):
    """MADDPG's joint view and optimizers, with SAC's losses and a temperature optimizer."""

    TRAINED_MODULE = MASACModule

    def configure_optimizers_for_module(self, module_id: ModuleID, config: AlgorithmConfig) -> None:
        super().configure_optimizers_for_module(module_id, config)
        module = self.module[module_id].unwrapped()
        self.register_optimizer(
            module_id=module_id,
            optimizer_name=ALPHA,
            optimizer=torch.optim.Adam([module.log_alpha]),
            params=[module.log_alpha],
            lr_or_lr_schedule=config.alpha_lr,
        )

    def _next_action(self, next_obs: torch.Tensor, entry: dict[str, Any]) -> torch.Tensor:
        module = self.module[entry["policy"]].unwrapped()
        if not isinstance(module, MASACModule):
            return super()._next_action(next_obs, entry)
        action, logp = module.sample(next_obs)
        self._next_logp[entry["agent"]] = logp
        return action

    def _joint_view(self, columns: dict) -> dict[str, Any]:
        self._next_logp: dict[str, torch.Tensor] = {}
        return super()._joint_view(columns)

    def module_losses(
        self, module_id: ModuleID, config: AlgorithmConfig, batch: dict, fwd_out: dict
    ) -> dict[str, torch.Tensor]:
        module: MASACModule = self.module[module_id].unwrapped()
        layout, count = self.layout, len(self.layout)
        obs, actions = self._joint["obs"], self._joint["actions"]
        joint_obs, joint_next = self._joint["joint_obs"], self._joint["joint_next"]
        alpha = module.log_alpha.exp().detach()
        target_entropy = config.target_entropy
        if target_entropy is None:
            target_entropy = -float(module.action_dim)
        own = [i for i, entry in enumerate(layout) if entry["policy"] == module_id]
        losses = dict.fromkeys((CRITIC, ACTOR, ALPHA), 0.0)
        q_mean, logp_mean = 0.0, 0.0
        for i in own:
            agent = F.one_hot(torch.full((len(joint_obs),), i, device=joint_obs.device), count)
            agent = agent.float()
            with torch.no_grad():
                next_logp = self._next_logp[layout[i]["agent"]]
                soft_next = module.q_values(torch.cat([joint_next, agent], -1), target=True)
                soft_next = soft_next - alpha * next_logp
                alive = 1.0 - batch[column("terminated", i)].float()
                target = batch[column("rewards", i)].float() + config.gamma * alive * soft_next
            replayed = torch.cat([joint_obs, *actions, agent], -1)
            q_first, q_second = (critic(replayed).squeeze(-1) for critic in module.critics())
            losses[CRITIC] += F.mse_loss(q_first, target) + F.mse_loss(q_second, target)
            action, logp = module.sample(obs[i])
            acting = torch.cat([joint_obs, *actions[:i], action, *actions[i + 1 :], agent], -1)
            losses[ACTOR] += (alpha * logp - module.q_values(acting)).mean()
            losses[ALPHA] += -(module.log_alpha * (logp.detach() + target_entropy)).mean()
            q_mean += q_first.mean().item()
            logp_mean += logp.mean().item()
        losses = {name: loss / len(own) for name, loss in losses.items()}
        self.metrics.log_dict(
            {
                QF_LOSS_KEY: losses[CRITIC].item(),
                POLICY_LOSS_KEY: losses[ACTOR].item(),
                "q_mean": q_mean / len(own),
                "logp": logp_mean / len(own),
                "alpha_value": alpha.item(),
            },
            key=module_id,
            window=1,
        )
        return losses
