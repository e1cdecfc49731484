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

import copy
import math
import time
from typing import Any

import gymnasium as gym
import torch
from ray.rllib.algorithms.dqn.dqn import calculate_rr_weights
from ray.rllib.algorithms.sac.sac import SAC as RLlibSAC
from ray.rllib.algorithms.sac.sac_learner import (
    QF_LOSS_KEY,
    QF_MEAN_KEY,
    QF_TWIN_LOSS_KEY,
    TD_ERROR_MEAN_KEY,
)
from ray.rllib.core import ALL_MODULES, DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)
from torch import nn

from rlplat.algorithms.base import WithoutModeSwitch, move_towards
from rlplat.algorithms.sac import PaperCriticSACCatalog, SACConfig, SACModule, SquashedGaussian
from rlplat.algorithms.shared_weights import sync_env_runners
from rlplat.algorithms.stacked.runner import (
    SEED_RESULTS,
    SEED_STOPPED,
    STACKED_SEEDS,
    STOPPED_SEEDS,
    StackedEnvRunner,
    StackedRollout,
    StackedSettings,
    as_rllib_mlp,
)
from rlplat.engine.learner import RlplatLearner
from rlplat.engine.optimizers import adam
from rlplat.engine.stacked import (
    SeedStops,
    clip_grad_norm_per_seed_,
    seed_generators,
    seed_state,
    stacked_mlp,
)

DEFAULT_HIDDENS, DEFAULT_ACTIVATION = (256, 256), "tanh"  # RLlib's DefaultModelConfig
ACTOR = ("pi_encoder", "pi")
CRITICS = ("qf_encoder", "qf", "qf_twin_encoder", "qf_twin")
TARGET = "target_"  # a target critic's name: target_<its critic's>
LOG_ALPHA = "log_alpha"
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
            setattr(self, TARGET + name, _frozen_copy(getattr(self, name)))
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

    def critic_parameters(self) -> list[nn.Parameter]:
        return [p for name in self.critic_names for p in getattr(self, name).parameters()]

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(getattr(self, name), getattr(self, TARGET + name)) for name in self.critic_names]

    def seed_module_state(self, index: int) -> dict[str, torch.Tensor]:
        """The stack's ``index``-th seed as the parameters of rlplat's ``SACModule`` (actor and
        critics; its targets are the learner's, its temperature the stack's)."""
        names = (*ACTOR, *self.critic_names)
        own = {k: v for k, v in self.state_dict().items() if k.split(".")[0] in names}
        return seed_state(own, index)


def _frozen_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` whose parameters take no gradient."""
    target = copy.deepcopy(module)
    for param in target.parameters():
        param.requires_grad_(False)
    return target


# -- replay --------------------------------------------------------------------------------------


class StackedReplay:
    """Each seed's last ``capacity`` transitions, in tensors (seeds, capacity, ...): every seed
    adds the same number of steps per sampling call, so one write position serves all. A batch
    is each seed's own uniform draw of ``rows`` of its transitions."""

    COLUMNS = (Columns.OBS, Columns.ACTIONS, "rewards", "terminateds", Columns.NEXT_OBS)

    def __init__(self, capacity: int, seed: int):
        self.capacity = capacity
        self.size = self.position = 0
        self.columns: dict[str, torch.Tensor] = {}
        self.generator = torch.Generator().manual_seed(seed)

    def add(self, rollout: StackedRollout) -> None:
        """A rollout's transitions (its columns (seeds, steps, envs, ...))."""
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
        order they came and the sampling generator's state."""
        order = (self.position - self.size + torch.arange(self.size)) % self.capacity
        return {
            "columns": {name: column[:, order].clone() for name, column in self.columns.items()},
            "generator": self.generator.get_state(),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.size = self.position = 0
        self.columns = {}
        held = state["columns"]
        if held:
            self.add(StackedRollout({name: column.unsqueeze(2) for name, column in held.items()}))
        self.generator.set_state(state["generator"])

    def sample(self, rows: int) -> dict[str, torch.Tensor]:
        seeds = next(iter(self.columns.values())).shape[0]
        index = torch.randint(self.size, (seeds, rows), generator=self.generator)
        seed_rows = torch.arange(seeds).unsqueeze(1)
        return {name: column[seed_rows, index] for name, column in self.columns.items()}


# -- learning ------------------------------------------------------------------------------------


class StackedSACLearner(RlplatLearner):
    """RLlib's ``Learner`` interface for a stack of SAC seeds, owning its update: the rollouts
    it is given go into its ``StackedReplay``; once each seed sampled
    ``num_steps_sampled_before_learning_starts`` env steps, every call makes the updates that
    ``training_intensity`` asks for (RLlib's ratio of replayed to sampled steps). Results are
    RLlib's SAC names averaged over the seeds still training, and per seed under
    ``SEED_RESULTS``."""

    def build(self) -> None:
        super().build()
        config = self.config
        self.stops = SeedStops(len(config.model_config[STACKED_SEEDS]))
        capacity = int((config.replay_buffer_config or {}).get("capacity", 1_000_000))
        self.replay = StackedReplay(capacity, int(config.seed or 0))
        self.updates_per_call = calculate_rr_weights(config)[1]
        self.last_target_update = 0
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
        for name, params, lr in groups:
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=name,
                optimizer=adam(params, eps=1e-7),
                params=params,
                lr_or_lr_schedule=lr,
            )

    def compute_loss_for_module(self, **kwargs: Any) -> Any:
        raise NotImplementedError("a stack's update computes its losses itself (update)")

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
        timesteps = timesteps or {}
        sampled = int(timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0))
        config = self.config
        batch_size = int(config.train_batch_size_per_learner)
        if sampled < config.num_steps_sampled_before_learning_starts or (
            self.replay.size < 1
        ):
            return {}
        module = self.module[DEFAULT_MODULE_ID].unwrapped()
        optimizers = dict(self.get_optimizers_for_module(DEFAULT_MODULE_ID))
        for _ in range(self.updates_per_call):
            stats = self._update_once(module, optimizers, self.replay.sample(batch_size))
            if config.target_network_update_freq <= sampled - self.last_target_update:
                for main, target in module.target_pairs():
                    move_towards(main, target, config.tau)
                self.last_target_update = sampled
        self._log_results(stats, batch_size * self.updates_per_call)
        return {}

    def _update_once(
        self, module: StackedSACModule, optimizers: dict[str, Any], batch: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """One SAC update of every seed on its batch (seeds, rows, ...): critics, then actor and
        temperature under the stepped critics; each seed's losses (seeds,) as statistics."""
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
        self._step(optimizers["critic"], critic_losses, module.critic_parameters())

        dist = module.policy(module.policy_inputs(obs))
        actions, logp = dist.rsample_and_logp()
        logp = logp.reshape(seeds, rows)
        value = module.q_values(obs, actions.reshape(seeds, rows, -1))
        actor_losses = (alpha * logp - value).mean(1)
        self._step(optimizers["policy"], actor_losses, module.actor_parameters())

        gap = logp.detach() + self.target_entropy
        alpha_losses = -(module.log_alpha.unsqueeze(1) * gap).mean(1)
        self._step(optimizers["alpha"], alpha_losses, [module.log_alpha])
        return {
            **{name: loss.detach() for name, loss in stats.items()},
            POLICY_LOSS_KEY: actor_losses.detach(),
            ALPHA_LOSS: alpha_losses.detach(),
            ALPHA_VALUE: alpha.squeeze(1),
            QF_MEAN_KEY: value.detach().mean(1),
            TD_ERROR_MEAN_KEY: td_error.mean(1),
        }

    def _step(self, optimizer: Any, losses: torch.Tensor, params: list[nn.Parameter]) -> None:
        """Each seed's gradient of its own loss for ``params`` only, a seed whose loss or
        gradient is not finite stopped, gradients clipped by each seed's own norm, a step."""
        grads = torch.autograd.grad(losses.sum(), params)
        for param, grad in zip(params, grads, strict=True):
            param.grad = grad
        self.stops.check(losses, params, optimizer)
        if self.config.grad_clip:
            clip_grad_norm_per_seed_(params, float(self.config.grad_clip))
        optimizer.step()
        for param in params:
            param.grad = None

    def _log_results(self, stats: dict[str, torch.Tensor], rows_trained: int) -> None:
        """The last update's statistics: per seed, and averaged over live seeds."""
        alive = self.stops.alive
        log = self.metrics.log_value
        for name, per_seed in stats.items():
            log((DEFAULT_MODULE_ID, name), per_seed[alive].mean(), window=1)
            for index, value in enumerate(per_seed.tolist()):
                log((SEED_RESULTS, str(index), name), value, window=1)
        log((SEED_RESULTS, STOPPED_SEEDS), len(self.stops.stopped), window=1)
        for index, live in enumerate(alive.tolist()):
            log((SEED_RESULTS, str(index), SEED_STOPPED), int(not live), window=1)
        for key in (NUM_MODULE_STEPS_TRAINED, NUM_ENV_STEPS_TRAINED):
            log((DEFAULT_MODULE_ID, key), rows_trained, reduce="sum")
            log((ALL_MODULES, key), rows_trained, reduce="sum")
        log((ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME), rows_trained, reduce="lifetime_sum")


# -- the algorithm -------------------------------------------------------------------------------


class StackedSACConfig(StackedSettings, SACConfig):
    """rlplat's ``SACConfig`` for a stack of seeds (``stacked(seeds=...)``): the stacked
    module, learner and env runner, in the one process of the trial."""

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or StackedSAC)
        self.env_runners(num_env_runners=0, env_runner_cls=StackedEnvRunner)

    def get_default_learner_class(self) -> type:
        return StackedSACLearner

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=StackedSACModule)

    def stacked_module_class(self) -> type:
        return StackedSACModule

    def stacked_steps_per_sample(self) -> int:
        return int(self.get_rollout_fragment_length())

    def stacked_learning_starts(self) -> int:
        return int(self.num_steps_sampled_before_learning_starts or 0)

    def single_seed_module_spec(self, observation_space: gym.Space, action_space: gym.Space,
                                model_config: dict[str, Any]) -> RLModuleSpec:  # fmt: skip
        return RLModuleSpec(
            module_class=SACModule,
            catalog_class=PaperCriticSACCatalog,
            observation_space=observation_space,
            action_space=action_space,
            model_config=model_config,
        )


class StackedSAC(RLlibSAC):
    """SAC over a stack of seeds: one training step samples, replays and updates until the
    iteration's minimum time and env steps (``min_time_s_per_iteration``,
    ``min_sample_timesteps_per_iteration``), every sampling call followed by its updates, and
    gathers the env runner's and learner's metrics once at its end."""

    @classmethod
    def get_default_config(cls) -> StackedSACConfig:
        return StackedSACConfig()

    def setup(self, config: Any) -> None:
        super().setup(config)
        # The replay memory is the local learner's; as the algorithm's replay buffer, it is
        # what a trial's checkpoint keeps (checkpoint.replay_buffer).
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
