"""The QMIX loss: mixed TD error over batches of whole, zero-padded episodes.

The batch (built by ``EpisodeStore.sample``) holds, for B episodes padded to T steps:
obs (B, T+1, n, o), action_mask (B, T+1, n, A), state (B, T+1, s), actions (B, T, n),
rewards (B, T), terminated (B, T) and filled (B, T) (1 on real steps, 0 on padding).
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.learner.learner import DEFAULT_OPTIMIZER
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME
from ray.rllib.utils.typing import ModuleID

from rlplat.algorithms.base import TargetNetworkLearner
from rlplat.algorithms.qmix.rl_module import Q_TOTAL, Q_VALUES, masked_argmax
from rlplat.engine.learner import state_requested


def lambda_returns(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    filled: torch.Tensor,
    next_values: torch.Tensor,
    gamma: float,
    td_lambda: float,
) -> torch.Tensor:
    """TD(lambda) targets G_t = r_t + gamma (1 - d_t) [(1 - lambda) V_{t+1} + lambda G_{t+1}].

    ``next_values[:, t]`` is the target value of the state after step t; the last real step
    of each episode bootstraps from it alone. All tensors are (B, T, k) but ``filled`` (B, T, 1).
    lambda = 0 gives one-step targets.
    """
    steps = rewards.shape[1]
    targets = torch.zeros_like(next_values)
    following = next_values[:, -1]
    for t in reversed(range(steps)):
        has_next = filled[:, t + 1] if t + 1 < steps else torch.zeros_like(filled[:, t])
        blended = torch.where(
            has_next > 0,
            (1.0 - td_lambda) * next_values[:, t] + td_lambda * following,
            next_values[:, t],
        )
        targets[:, t] = rewards[:, t] + gamma * (1.0 - terminated[:, t]) * blended
        following = targets[:, t]
    return targets


class RunningMeanStd:
    """Running mean and variance of rewards (Chan et al.'s parallel update)."""

    def __init__(self) -> None:
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def update(self, values: torch.Tensor) -> None:
        if values.numel() == 0:
            return
        mean, var, count = values.mean().item(), values.var(unbiased=False).item(), values.numel()
        delta, total = mean - self.mean, self.count + count
        self.mean += delta * count / total
        self.var = (self.var * self.count + var * count + delta**2 * self.count * count / total) / (
            total
        )
        self.count = total

    def get_state(self) -> dict[str, float]:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def set_state(self, state: dict[str, float]) -> None:
        self.mean, self.var, self.count = state["mean"], state["var"], state["count"]


# The learner's own counters in its checkpoint state: updates since the start (the target
# networks' cadence) and the reward statistics, so that ``--resume`` continues both.
LEARNER_COUNTERS = "rlplat_qmix_counters"


class QMIXTorchLearner(TargetNetworkLearner):
    """One optimizer per module; the target networks move every ``target_update_interval``
    learner updates."""

    LOG_TARGET_UPDATES = True

    def build(self) -> None:
        super().build()
        self._updates: dict[ModuleID, int] = {}
        self._reward_stats: dict[ModuleID, RunningMeanStd] = {}

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        if state_requested(LEARNER_COUNTERS, components, not_components):
            state[LEARNER_COUNTERS] = {
                "updates": dict(self._updates),
                "reward_stats": {m: s.get_state() for m, s in self._reward_stats.items()},
            }
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        counters = state.get(LEARNER_COUNTERS)
        if counters is None:  # a checkpoint from before the counters were saved
            return
        self._updates = dict(counters["updates"])
        self._reward_stats = {}
        for module_id, values in counters["reward_stats"].items():
            self._reward_stats[module_id] = RunningMeanStd()
            self._reward_stats[module_id].set_state(values)

    def configure_optimizers_for_module(self, module_id: ModuleID, config: AlgorithmConfig) -> None:
        if config.optimizer == "adam":
            return super().configure_optimizers_for_module(module_id, config)
        params = self.get_parameters(self.module[module_id])
        self.register_optimizer(
            module_id=module_id,
            # pymarl's RMSprop settings (alpha 0.99, eps 1e-5).
            optimizer=torch.optim.RMSprop(params, lr=config.lr, alpha=0.99, eps=1e-5),
            params=params,
            lr_or_lr_schedule=config.lr,
        )

    def module_losses(
        self, module_id: ModuleID, config: AlgorithmConfig, batch: dict, fwd_out: dict
    ) -> dict[str, torch.Tensor]:
        module = self.module[module_id].unwrapped()
        filled = batch["filled"].float()[..., None]  # (B, T, 1)
        rewards = batch["rewards"].float()[..., None]
        if config.standardise_rewards:
            stats = self._reward_stats.setdefault(module_id, RunningMeanStd())
            stats.update(rewards[filled > 0])
            rewards = (rewards - stats.mean) / (stats.var**0.5 + 1e-8)
        with torch.no_grad():
            target_q = module.forward_target(batch)[Q_VALUES]
            mask = batch["action_mask"]
            chooser = fwd_out[Q_VALUES].detach() if config.double_q else target_q
            best = masked_argmax(chooser, mask)[:, 1:]
            next_q = target_q[:, 1:].gather(-1, best[..., None]).squeeze(-1)
            next_values = module.mix_target(next_q, batch["state"][:, 1:])
            targets = lambda_returns(
                rewards.expand_as(next_values),
                batch["terminated"].float()[..., None].expand_as(next_values),
                filled,
                next_values,
                config.gamma,
                config.td_lambda,
            )
        td_error = (fwd_out[Q_TOTAL] - targets) * filled
        real = filled.sum().clamp(min=1.0) * td_error.shape[-1]  # real (step, Q_tot) entries
        loss = (td_error**2).sum() / real
        self.metrics.log_dict(
            {
                "td_error_abs": (td_error.abs().sum() / real).item(),
                "q_taken_mean": ((fwd_out[Q_TOTAL] * filled).sum() / real).item(),
                "target_mean": ((targets * filled).sum() / real).item(),
            },
            key=module_id,
            window=1,
        )
        return {DEFAULT_OPTIMIZER: loss}

    def target_update_due(self, module_id: ModuleID) -> bool:
        self._updates[module_id] = self._updates.get(module_id, 0) + 1
        interval = self.config.get_config_for_module(module_id).target_update_interval
        return self._updates[module_id] % interval == 0

    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        super().after_gradient_based_update(timesteps=timesteps)
        env_steps = timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0)
        for module_id in self.module.keys():
            # The env runners' exploration rate at these env steps, for TensorBoard.
            epsilon = self.module[module_id].unwrapped().epsilon(env_steps)
            self.metrics.log_value((module_id, "epsilon"), epsilon, window=1)
