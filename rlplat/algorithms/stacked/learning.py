"""What every stacked learner shares (issue 104): which seeds still train (``SeedStops``), one
gradient step of every seed on its own loss, the results per seed and over the live seeds;
and, for on-policy stacks (PPO, PQN), the update loop over one rollout: ``num_epochs`` passes
over minibatches cut per seed, each seed with its own shuffle.

An on-policy algorithm adds the rows it learns from (``training_rows``) and its loss per seed
(``minibatch_losses``); an off-policy one its replay (``rlplat.algorithms.stacked.offpolicy``).
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core import ALL_MODULES, DEFAULT_MODULE_ID
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.utils.metrics import (
    NUM_ENV_STEPS_TRAINED,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
)
from torch import nn

from rlplat.algorithms.stacked.runner import (
    SEED_RESULTS,
    SEED_STOPPED,
    STACKED_SEEDS,
    STOPPED_SEEDS,
)
from rlplat.engine.learner import RlplatLearner
from rlplat.engine.stacked import SeedStops, SeedStopsState, clip_grad_norm_per_seed_

GRADIENT_NORM = "gradients_default_optimizer_global_norm"  # RLlib's name, per seed before clipping


class StackedLearner(SeedStopsState, RlplatLearner):
    """RLlib's ``Learner`` interface for a stack of seeds whose update computes its losses
    itself: each seed's gradient step (``step``) and results (``log_results``)."""

    def build(self) -> None:
        super().build()
        self.stops = SeedStops(len(self.config.model_config[STACKED_SEEDS]))

    def compute_loss_for_module(self, **kwargs: Any) -> Any:
        raise NotImplementedError("a stack's update computes its losses itself")

    def step(
        self,
        optimizer: Any,
        losses: torch.Tensor,
        params: list[nn.Parameter],
        grads: tuple[torch.Tensor, ...] | None = None,
        clip_groups: list[list[nn.Parameter]] | None = None,
    ) -> torch.Tensor | None:
        """Each seed's gradient of its own loss (``losses``, (seeds,)) for ``params`` only (or
        ``grads``, taken before), a seed whose loss or gradient is not finite stopped
        (``SeedStops``), gradients clipped by each seed's own norm (``grad_clip``) over each of
        ``clip_groups`` (the parameters of one single-seed optimizer; default all), one step of
        ``optimizer``. Each seed's gradient norm before clipping (of the last group), or None
        without ``grad_clip``."""
        if grads is None:
            grads = torch.autograd.grad(losses.sum(), params)
        for param, grad in zip(params, grads, strict=True):
            param.grad = grad
        self.stops.check(losses, params, optimizer)
        norms = None
        if self.config.grad_clip:
            for group in clip_groups or [params]:
                norms = clip_grad_norm_per_seed_(group, float(self.config.grad_clip))
        optimizer.step()
        for param in params:
            param.grad = None
        return norms

    def log_results(self, stats: dict[str, torch.Tensor], rows_trained: int) -> None:
        """The last update's statistics (each (seeds,)): per seed, and averaged over the seeds
        still training; the rows trained on by each seed."""
        alive = self.stops.alive
        log = self.metrics.log_value
        for name, per_seed in stats.items():
            values = per_seed.detach()
            log((DEFAULT_MODULE_ID, name), values[alive].mean(), window=1)
            for index, value in enumerate(values.tolist()):
                log((SEED_RESULTS, str(index), name), value, window=1)
        log((SEED_RESULTS, STOPPED_SEEDS), len(self.stops.stopped), window=1)
        for index, live in enumerate(alive.tolist()):
            log((SEED_RESULTS, str(index), SEED_STOPPED), int(not live), window=1)
        for key in (NUM_MODULE_STEPS_TRAINED, NUM_ENV_STEPS_TRAINED):
            log((DEFAULT_MODULE_ID, key), rows_trained, reduce="sum")
            log((ALL_MODULES, key), rows_trained, reduce="sum")
        for key in (NUM_MODULE_STEPS_TRAINED_LIFETIME, NUM_ENV_STEPS_TRAINED_LIFETIME):
            log((ALL_MODULES, key), rows_trained, reduce="lifetime_sum")


class StackedOnPolicyLearner(StackedLearner):
    """The update of an on-policy stack over the rollout it is given: ``training_rows`` of it
    (N, rows, ...), then ``num_epochs`` passes over minibatches of ``minibatch_size`` rows cut
    per seed (each seed its own shuffle), each minibatch's ``minibatch_losses`` one gradient
    step of every seed (``step``) with the module's one optimizer."""

    def build(self) -> None:
        super().build()
        self.shuffle = torch.Generator().manual_seed(int(self.config.seed or 0))

    def training_rows(
        self, module: nn.Module, columns: dict[str, torch.Tensor], config: Any
    ) -> dict[str, torch.Tensor]:
        """What the epochs learn from, from the rollout's columns (N, steps, E, ...): every
        column (N, rows, ...)."""
        raise NotImplementedError

    def minibatch_losses(
        self, module: nn.Module, batch: dict[str, torch.Tensor], config: Any
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Each seed's loss over its minibatch (N,) and the statistics to log, each (N,)."""
        raise NotImplementedError

    def update(
        self,
        training_data: TrainingData | None = None,
        *,
        timesteps: dict[str, Any] | None = None,
        num_epochs: int = 1,
        minibatch_size: int | None = None,
        **kwargs: Any,
    ) -> Any:
        rollout = (training_data or TrainingData(episodes=kwargs.get("episodes"))).episodes[0]
        self.before_gradient_based_update(timesteps=timesteps or {})
        module = self.module[DEFAULT_MODULE_ID].unwrapped()
        config = self.config.get_config_for_module(DEFAULT_MODULE_ID)
        data = self.training_rows(module, rollout.columns, config)
        seeds, rows = next(iter(data.values())).shape[:2]
        size = min(int(minibatch_size or rows), rows)
        params = list(module.parameters())
        [(_, optimizer)] = self.get_optimizers_for_module(DEFAULT_MODULE_ID)
        for _ in range(num_epochs):
            order = torch.argsort(torch.rand(seeds, rows, generator=self.shuffle), dim=1)
            for start in range(0, rows, size):
                batch = rows_of(data, order[:, start : start + size])
                losses, stats = self.minibatch_losses(module, batch, config)
                norms = self.step(optimizer, losses, params)
                if norms is not None:
                    stats[GRADIENT_NORM] = norms
        self.log_results(stats, rows * num_epochs)
        self.after_gradient_based_update(timesteps=timesteps or {})
        return self.metrics.reduce()


def rows_of(data: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each seed's rows ``index`` (N, rows) of every (N, all rows, ...) column."""
    return {
        name: torch.take_along_dim(
            column, index.reshape(*index.shape, *([1] * (column.dim() - 2))), dim=1
        )
        for name, column in data.items()
    }


def generalized_advantages(
    columns: dict[str, torch.Tensor],
    value: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float,
    lambda_: float,
) -> torch.Tensor:
    """GAE(gamma, lambda) of each env's steps (N, steps, E): bootstrapped from ``next_value``,
    the value of the observation after each step (none where the episode terminated; at a
    truncation, the final observation's), restarting where an episode ended. The advantage
    plus ``value`` is the lambda-return."""
    terminated = columns["terminateds"].float()
    ended = torch.maximum(terminated, columns["truncateds"].float())
    deltas = columns["rewards"] + gamma * (1.0 - terminated) * next_value - value
    advantages = torch.empty_like(deltas)
    running = torch.zeros_like(deltas[:, 0])
    for t in reversed(range(deltas.shape[1])):
        running = deltas[:, t] + gamma * lambda_ * (1.0 - ended[:, t]) * running
        advantages[:, t] = running
    return advantages
