"""Each seed's own reward scaling in a stacked PPO (the experiment's ``reward_scaling``).

A run of one seed learns from its rewards divided by the running std of its discounted return
(``rlplat.environments.reward_scaling``: G <- gamma G + r along each episode, the variance of G
over every step it trained on, rewards scaled by 1 / sqrt(var + epsilon) and clipped).
``SeedRewardScaling`` keeps the running returns of every env and the variance of every seed
apart, so no seed's rewards change another seed's scale.
"""

from __future__ import annotations

from typing import Any

import torch

from rlplat.environments.reward_scaling import RewardScaling


class SeedRewardScaling:
    """Reward scaling with ``piece``'s settings (``gamma``, ``clip``, ``epsilon``) for
    ``seeds`` seeds of ``envs`` envs each: per seed the running mean and variance of its
    discounted returns (Chan's merge, a batch at a time), per env its running return."""

    def __init__(self, seeds: int, envs: int, piece: RewardScaling):
        self.gamma, self.clip, self.epsilon = piece.gamma, piece.clip, piece.epsilon
        self.mean = torch.zeros(seeds, dtype=torch.float64)
        self.var = torch.ones(seeds, dtype=torch.float64)
        self.count = torch.zeros(seeds, dtype=torch.float64)
        self.returns = torch.zeros(seeds, envs, dtype=torch.float64)  # each env's ongoing G

    def __call__(self, rewards: torch.Tensor, ended: torch.Tensor) -> torch.Tensor:
        """Rewards (seeds, steps, envs) scaled by their seed's std of the discounted return,
        after adding this batch's returns to it; ``ended``: where an episode ended (its env's
        return starts again from 0 at the next step)."""
        seeds, steps, _ = rewards.shape
        discounted = torch.empty_like(rewards, dtype=torch.float64)
        running = self.returns
        for t in range(steps):
            running = self.gamma * running + rewards[:, t].double()
            discounted[:, t] = running
            running = running * (1.0 - ended[:, t].double())
        self.returns = running
        values = discounted.reshape(seeds, -1)
        batch_mean, batch_var = values.mean(1), values.var(1, unbiased=False)
        added = float(values.shape[1])
        total = self.count + added
        delta = batch_mean - self.mean
        merged_var = (self.var * self.count + batch_var * added
                      + delta**2 * self.count * added / total) / total  # fmt: skip
        first = self.count == 0
        self.mean = torch.where(first, batch_mean, self.mean + delta * added / total)
        self.var = torch.where(first, batch_var, merged_var)
        self.count = total
        scale = (1.0 / torch.sqrt(self.var + self.epsilon)).reshape(seeds, 1, 1)
        return (rewards.double() * scale).clamp(-self.clip, self.clip).to(rewards.dtype)

    def get_state(self) -> dict[str, Any]:
        return {name: getattr(self, name).clone() for name in ("mean", "var", "count", "returns")}

    def set_state(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value.clone())
