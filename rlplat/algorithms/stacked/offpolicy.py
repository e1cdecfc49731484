"""What stacked off-policy algorithms (SAC, TD3, CrossQ, DQN) share: each seed's replay memory
along a seed axis, a learner that owns its update loop (replay, learning start, updates per
sampling call), and the training step that samples and updates until the iteration's minimum
time and env steps.

An algorithm adds its module and its one update of every seed (``update_once``).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
from ray.rllib.algorithms.dqn.dqn import calculate_rr_weights
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)
from torch import nn

from rlplat.algorithms.shared_weights import sync_env_runners
from rlplat.algorithms.stacked.learning import StackedLearner
from rlplat.algorithms.stacked.runner import (
    StackedRollout,
    StackedSettings,
)
from rlplat.engine.learner import state_requested
from rlplat.engine.optimizers import adam


def frozen_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` whose parameters take no gradient (a target network)."""
    target = copy.deepcopy(module)
    for param in target.parameters():
        param.requires_grad_(False)
    return target


class StackedOffPolicySettings(StackedSettings):
    """``StackedSettings`` of an off-policy config: a sampling call is
    ``rollout_fragment_length`` vector steps, learning starts after
    ``num_steps_sampled_before_learning_starts`` env steps of each seed."""

    def stacked_steps_per_sample(self) -> int:
        return int(self.get_rollout_fragment_length())

    def stacked_learning_starts(self) -> int:
        return int(self.num_steps_sampled_before_learning_starts or 0)


class StackedReplay:
    """Each seed's last ``capacity`` transitions, in tensors (seeds, capacity, ...): every seed
    adds the same number of steps per sampling call, so one write position serves all. A batch
    is each seed's own uniform draw of ``rows`` of its transitions.

    Rows are written vector step by vector step, E envs each, so an env's next step lies E rows
    further on: an n-step transition (``sample(n_step=...)``) sums the discounted rewards of up
    to n steps of its env, stopping where the episode ends or at the newest stored step (as
    rlplat's ``TransitionMemory`` does), with the observation after the last of them."""

    COLUMNS = (Columns.OBS, Columns.ACTIONS, "rewards", "terminateds", "truncateds",
               Columns.NEXT_OBS)  # fmt: skip

    def __init__(self, capacity: int, seed: int):
        self.capacity = capacity
        self.size = self.position = 0
        self.envs = 1  # rows per vector step
        self.columns: dict[str, torch.Tensor] = {}
        self.generator = torch.Generator().manual_seed(seed)

    def add(self, rollout: StackedRollout) -> None:
        """A rollout's transitions (its columns (seeds, steps, envs, ...))."""
        self.envs = int(rollout.columns["rewards"].shape[2])
        for name in self.COLUMNS:
            column = rollout.columns[name]
            rows = column.reshape(column.shape[0], -1, *column.shape[3:]).float()
            if name not in self.columns:
                shape = (rows.shape[0], self.capacity, *rows.shape[2:])
                self.columns[name] = torch.zeros(shape)
            count = rows.shape[1]
            at = (self.position + torch.arange(count)[-self.capacity :]) % self.capacity
            self.columns[name][:, at] = rows[:, -self.capacity :]
        self.position = (self.position + count) % self.capacity
        self.size = min(self.size + count, self.capacity)

    def get_num_timesteps(self) -> int:
        """Transitions held per seed."""
        return self.size

    def get_state(self) -> dict[str, Any]:
        """What a checkpoint keeps (``checkpoint.replay_buffer``): the held transitions in the
        order they came, the envs per vector step and the sampling generator's state."""
        order = (self.position - self.size + torch.arange(self.size)) % self.capacity
        return {
            "columns": {name: column[:, order].clone() for name, column in self.columns.items()},
            "envs": self.envs,
            "generator": self.generator.get_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        held = {name: column[:, -self.capacity :] for name, column in state["columns"].items()}
        self.columns = {}
        self.size = 0
        for name, column in held.items():
            self.size = column.shape[1]
            self.columns[name] = torch.zeros((column.shape[0], self.capacity, *column.shape[2:]))
            self.columns[name][:, : self.size] = column
        self.position = self.size % self.capacity
        self.envs = int(state.get("envs", 1))
        self.generator.set_state(state["generator"])

    def sample(self, rows: int, n_step: int = 1, gamma: float = 1.0) -> dict[str, torch.Tensor]:
        """Each seed's ``rows`` uniformly drawn transitions of up to ``n_step`` steps, with
        ``n_step`` (seeds, rows): the rewards summed (their discount is gamma ** n_step)."""
        seeds = next(iter(self.columns.values())).shape[0]
        index = torch.randint(self.size, (seeds, rows), generator=self.generator)
        seed_rows = torch.arange(seeds).unsqueeze(1)
        batch = {name: column[seed_rows, index] for name, column in self.columns.items()}
        batch["n_step"] = torch.ones(seeds, rows)
        if n_step == 1:
            return batch
        columns = self.columns
        last, rewards, summed = index, batch["rewards"].clone(), batch["n_step"]
        terminated, truncated = batch["terminateds"], batch["truncateds"]  # at the last step
        for k in range(1, n_step):
            newest = (self.position - 1 - last) % self.capacity < self.envs
            going_on = (terminated + truncated == 0) & ~newest
            if not going_on.any():
                break
            last = torch.where(going_on, (last + self.envs) % self.capacity, last)
            rewards += going_on * gamma**k * columns["rewards"][seed_rows, last]
            summed += going_on
            terminated = columns["terminateds"][seed_rows, last]
            truncated = columns["truncateds"][seed_rows, last]
        batch.update(rewards=rewards, n_step=summed, terminateds=terminated, truncateds=truncated)
        batch[Columns.NEXT_OBS] = columns[Columns.NEXT_OBS][seed_rows, last]
        return batch


UPDATE_COUNTS = "stacked_update_counts"  # an off-policy stack learner's state: where it stands


class StackedOffPolicyLearner(StackedLearner):
    """RLlib's ``Learner`` interface for a stack of off-policy seeds, owning its update loop:
    the rollouts it is given go into its ``StackedReplay``; once each seed sampled
    ``num_steps_sampled_before_learning_starts`` env steps, every call makes the updates that
    ``training_intensity`` asks for (RLlib's ratio of replayed to sampled steps), each one
    ``update_once`` of every seed on its own batch. Results are the algorithm's names averaged
    over the seeds still training, and per seed under ``SEED_RESULTS``."""

    def build(self) -> None:
        super().build()
        config = self.config
        capacity = int((config.replay_buffer_config or {}).get("capacity", 1_000_000))
        self.replay = StackedReplay(capacity, int(config.seed or 0))
        self.updates_per_call = calculate_rr_weights(config)[1]
        self.updates = 0  # made so far, by every seed
        self.sampled = 0  # env steps each seed sampled, as of this call
        self.last_target_update = 0  # env steps sampled at the last target update (DQN, SAC)

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        if state_requested(UPDATE_COUNTS, components, not_components):
            counts = {"updates": self.updates, "last_target_update": self.last_target_update}
            state[UPDATE_COUNTS] = counts
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """A resumed stack goes on where its policy delay and target cadence stood."""
        super().set_state(state)
        if UPDATE_COUNTS in state:
            self.updates = int(state[UPDATE_COUNTS]["updates"])
            self.last_target_update = int(state[UPDATE_COUNTS]["last_target_update"])

    def register_adams(self, module_id: str, groups: Any, **settings: Any) -> None:
        """One Adam (``settings``: eps, betas) per (name, stacked parameters, learning rate or
        schedule) of ``groups``: one optimizer per role over the stacked tensors, which is N
        independent ones, one per seed (Adam is elementwise)."""
        for name, params, lr in groups:
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=name,
                optimizer=adam(params, **settings),
                params=params,
                lr_or_lr_schedule=lr,
            )

    def update_once(
        self, module: nn.Module, optimizers: dict[str, Any], batch: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """One update of every seed on its batch (seeds, rows, ...); each statistic per seed."""
        raise NotImplementedError

    def update(
        self,
        training_data: TrainingData | None = None,
        *,
        timesteps: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        rollouts = (training_data or TrainingData(episodes=kwargs.get("episodes"))).episodes
        for rollout in rollouts:
            self.replay.add(rollout)
        self.sampled = int((timesteps or {}).get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0))
        config = self.config
        if self.sampled < config.num_steps_sampled_before_learning_starts or not self.replay.size:
            return {}
        module = self.module[DEFAULT_MODULE_ID].unwrapped()
        optimizers = dict(self.get_optimizers_for_module(DEFAULT_MODULE_ID))
        rows = int(config.train_batch_size_per_learner)
        n_step = int(getattr(config, "n_step", 1) or 1)  # DQN's n-step returns
        self.before_gradient_based_update(timesteps=timesteps or {})
        for _ in range(self.updates_per_call):
            batch = self.replay.sample(rows, n_step, float(config.gamma))
            stats = self.update_once(module, optimizers, batch)
            self.updates += 1
        self.after_gradient_based_update(timesteps=timesteps or {})  # learning-rate schedules
        self.log_results(stats, rows * self.updates_per_call)
        return {}


class StackedOffPolicyLoop:
    """Mixin before an RLlib off-policy algorithm (SAC, DQN's family) for a stack of seeds: one
    training step samples, replays and updates until the iteration's minimum time and env steps
    (``min_time_s_per_iteration``, ``min_sample_timesteps_per_iteration``), every sampling call
    followed by its updates, and gathers the env runner's and learner's metrics once at its end.
    The replay memory is the local learner's; as the algorithm's replay buffer it is what a
    trial's checkpoint keeps (``checkpoint.replay_buffer``)."""

    def setup(self, config: Any) -> None:
        super().setup(config)
        [memory] = self.learner_group.foreach_learner(lambda learner: learner.replay)
        self.local_replay_buffer = memory.get()

    def training_step(self) -> None:
        config = self.config
        runner = self.env_runner
        calls_per_round = calculate_rr_weights(config)[0]
        started, first_step = time.perf_counter(), runner.num_env_steps_sampled_lifetime
        while True:
            with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
                rollouts = [r for _ in range(calls_per_round) for r in runner.sample()]
            sampled = runner.num_env_steps_sampled_lifetime
            with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
                self.learner_group.update(
                    episodes=rollouts, timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: sampled}
                )
            with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
                sync_env_runners(self)
            long_enough = time.perf_counter() - started >= (config.min_time_s_per_iteration or 0)
            if long_enough and sampled - first_step >= (
                config.min_sample_timesteps_per_iteration or 0
            ):
                break
        self.metrics.aggregate([runner.get_metrics()], key=ENV_RUNNER_RESULTS)
        reduced = self.learner_group.foreach_learner(lambda learner: learner.metrics.reduce())
        self.metrics.aggregate([result.get() for result in reduced], key=LEARNER_RESULTS)
