"""The MADDPG losses (Lowe et al. 2017) on batches of joint transitions.

Every trained policy's module gets the same joint sample (``joint_replay.column`` names), and
for each agent i it acts for:

    critic:  Q_p(x, a_1..a_N, i) -> r_i + gamma (1 - terminated_i) Q'_p(x', a'_1..a'_N, i)
             with a'_j = mu'_{policy(j)}(o'_j), each agent's own target actor
    actor:   maximise Q_p(x, a_1..mu_p(o_i)..a_N, i), the other agents' actions as replayed,
             plus ``actor_reg`` times the mean square of the actor's raw output

(x: all observations). Agents of a random policy (``multi_agent.random``) have no actor; their
next actions are drawn uniformly. After each update every trained module's target networks move
a ``tau`` step towards its online ones.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.utils.typing import ModuleID
from torch.nn import functional as F

from rlplat.algorithms.actor_critic import ACTOR, CRITIC, ActorCriticLearner
from rlplat.algorithms.maddpg.joint_replay import column
from rlplat.algorithms.maddpg.rl_module import MADDPGModule

QF_LOSS_KEY = "qf_loss"


class MADDPGTorchLearner(ActorCriticLearner):
    TRAINED_MODULE: ClassVar[type] = MADDPGModule  # the modules it trains (random ones aside)

    def build(self) -> None:
        super().build()
        modules = [m.unwrapped() for m in self.module.values()]
        first = next(m for m in modules if isinstance(m, self.TRAINED_MODULE))
        self.layout: list[dict[str, Any]] = first.model_config["joint_layout"]

    def _replayed_action(self, actions: torch.Tensor, entry: dict[str, Any]) -> torch.Tensor:
        if entry["discrete"]:
            return F.one_hot(actions.long(), entry["action_dim"]).float()
        return actions.float()

    def _next_action(self, next_obs: torch.Tensor, entry: dict[str, Any]) -> torch.Tensor:
        module = self.module[entry["policy"]].unwrapped()
        if isinstance(module, MADDPGModule):
            return module.target_action(next_obs)
        count, width = next_obs.shape[0], entry["action_dim"]  # a random policy's agent
        device = next_obs.device
        if entry["discrete"]:
            return F.one_hot(torch.randint(0, width, (count,), device=device), width).float()
        return torch.rand(count, width, device=device) * 2.0 - 1.0

    def compute_losses(self, *, fwd_out: dict, batch: dict) -> dict:
        # Every policy's batch holds the same joint rows, so the joint view (with each agent's
        # target action) is made once per update, not once per policy.
        self._joint = self._joint_view(next(iter(batch.values())))
        return super().compute_losses(fwd_out=fwd_out, batch=batch)

    def _joint_view(self, columns: dict) -> dict[str, Any]:
        count = len(self.layout)
        obs = [columns[column("obs", i)].float() for i in range(count)]
        actions = [
            self._replayed_action(columns[column("actions", i)], entry)
            for i, entry in enumerate(self.layout)
        ]
        with torch.no_grad():
            next_obs = [columns[column("next_obs", i)].float() for i in range(count)]
            next_actions = [
                self._next_action(o, entry) for o, entry in zip(next_obs, self.layout, strict=True)
            ]
            joint_next = torch.cat(next_obs + next_actions, dim=-1)
        joint_obs = torch.cat(obs, dim=-1)
        return {"obs": obs, "actions": actions, "joint_obs": joint_obs, "joint_next": joint_next}

    def module_losses(
        self, module_id: ModuleID, config: AlgorithmConfig, batch: dict, fwd_out: dict
    ) -> dict[str, torch.Tensor]:
        columns = batch
        module = self.module[module_id].unwrapped()
        layout, count = self.layout, len(self.layout)
        obs, actions = self._joint["obs"], self._joint["actions"]
        joint_obs, joint_next = self._joint["joint_obs"], self._joint["joint_next"]
        own = [i for i, entry in enumerate(layout) if entry["policy"] == module_id]
        critic_loss, actor_loss, q_mean = 0.0, 0.0, 0.0
        for i in own:
            agent = F.one_hot(torch.full((joint_obs.shape[0],), i, device=joint_obs.device), count)
            agent = agent.float()
            with torch.no_grad():
                next_q = module.target_critic(torch.cat([joint_next, agent], -1)).squeeze(-1)
                alive = 1.0 - columns[column("terminated", i)].float()
                target = columns[column("rewards", i)].float() + config.gamma * alive * next_q
            q = module.critic(torch.cat([joint_obs, *actions, agent], -1)).squeeze(-1)
            critic_loss = critic_loss + F.mse_loss(q, target)
            raw = module.raw_action(obs[i])
            acting = [*actions[:i], module.critic_action(raw), *actions[i + 1 :]]
            value = module.critic(torch.cat([joint_obs, *acting, agent], -1)).squeeze(-1)
            actor_loss = actor_loss - value.mean() + config.actor_reg * (raw**2).mean()
            q_mean = q_mean + q.mean().item()
        critic_loss, actor_loss = critic_loss / len(own), actor_loss / len(own)
        self.metrics.log_dict(
            {
                QF_LOSS_KEY: critic_loss.item(),
                POLICY_LOSS_KEY: actor_loss.item(),
                "q_mean": q_mean / len(own),
            },
            key=module_id,
            window=1,
        )
        return {CRITIC: critic_loss, ACTOR: actor_loss}
