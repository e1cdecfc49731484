"""PPO over stacked seeds (issue 104): one RL module holds N seeds' actor-critics along a
leading axis (``rlplat.engine.stacked``), so N seeds act and learn in one process for about the
price of a few.

``StackedPPOModule`` is RLlib's default PPO networks (``DefaultPPOTorchRLModule`` without shared
layers: an actor MLP encoder and a critic MLP encoder of ``fcnet_hiddens`` with
``fcnet_activation``, then a linear policy head and a linear value head) for every seed of
``model_config["stacked_seeds"]``. Its batches are seed-major: of B rows, rows [i B/N, (i+1) B/N)
are seed i's (its env copies when acting, its minibatch when learning). Its parameters carry
RLlib's names with a leading seed axis, so ``seed_module_state`` is a state that RLlib's own
module loads: one seed is evaluated, exported and served as the single-seed policy it is.
"""

from __future__ import annotations

import pickle
from collections import deque
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.ppo.ppo import (
    LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY,
    LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY,
    PPO,
    PPOConfig,
)
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core import (
    ALL_MODULES,
    COMPONENT_ENV_RUNNER,
    COMPONENT_ENV_TO_MODULE_CONNECTOR,
    COMPONENT_LEARNER,
    COMPONENT_LEARNER_GROUP,
    COMPONENT_MODULE_TO_ENV_CONNECTOR,
    COMPONENT_RL_MODULE,
    DEFAULT_MODULE_ID,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import (
    TorchCategorical,
    TorchDiagGaussian,
)
from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY, VF_LOSS_KEY
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.env import INPUT_ENV_SINGLE_SPACES, INPUT_ENV_SPACES
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import (
    EPISODE_LEN_MEAN,
    EPISODE_RETURN_MEAN,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_TRAINED,
    NUM_EPISODES,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    WEIGHTS_SEQ_NO,
)
from torch import nn

from rlplat.algorithms.policy_change import APPROX_KL, CLIP_FRACTION
from rlplat.engine.learner import RlplatLearner, state_requested
from rlplat.engine.stacked import (
    SeedStops,
    clip_grad_norm_per_seed_,
    seed_generators,
    seed_state,
    stacked_mlp,
)
from rlplat.environments.array_runner import actions_for_env
from rlplat.environments.seeding import runner_seeds
from rlplat.health.reading import EPISODES_ENDED, EPISODES_TRUNCATED, HEALTH_KEY, OBS_ABS_SUM

STACKED_SEEDS = "stacked_seeds"  # model_config key: the stack's seeds, in order
SEED_RESULTS = "seeds"  # results of each seed, by its index in the stack
STOPPED_SEEDS = "num_stopped"  # under SEED_RESULTS: seeds stopped by a non-finite loss
SEED_STOPPED = "stopped"  # a seed's learner result: 1 once a non-finite loss stopped it
SEED_WINDOW = "window"  # a seed's env runner results over its last episodes (rlplat's window/)
BEFORE_LEARNING = "episodes_before_learning"
RECENT_EPISODES = "recent_episodes"  # the runner's state: each seed's window of episodes
# RLlib's DefaultModelConfig
DEFAULT_HIDDENS, DEFAULT_ACTIVATION, LOG_STD_CLIP = (256, 256), "tanh", 20.0


def _as_rllib_mlp(layers: nn.Sequential) -> nn.Module:
    """``layers`` where RLlib's MLP encoders and heads keep theirs (``<name>.net.mlp.<i>``)."""
    return nn.ModuleDict({"net": nn.ModuleDict({"mlp": layers})})


class StackedPPOModule(TorchRLModule, ValueFunctionAPI):
    """N seeds' PPO actor-critics (see the module's docstring), Discrete or Box actions."""

    def setup(self) -> None:
        config = self.model_config
        self.seeds = [int(seed) for seed in config[STACKED_SEEDS]]
        hiddens = list(config.get("fcnet_hiddens", DEFAULT_HIDDENS))
        activation = config.get("fcnet_activation", DEFAULT_ACTIVATION)
        count, obs_dim = len(self.seeds), gym.spaces.flatdim(self.observation_space)
        generators = seed_generators(self.seeds)  # each seed draws its layers in this order

        def encoder() -> nn.Module:
            return _as_rllib_mlp(stacked_mlp(count, obs_dim, hiddens, None, activation, generators))

        def head(size: int) -> nn.Module:
            return _as_rllib_mlp(stacked_mlp(count, hiddens[-1], [], size, activation, generators))

        self.encoder = nn.ModuleDict({"actor_encoder": encoder(), "critic_encoder": encoder()})
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            self.pi = head(int(space.n))
        else:  # a Gaussian's means and log standard deviations, as RLlib's head outputs them
            self.pi = head(2 * gym.spaces.flatdim(space))
        self.vf = head(1)

    def _by_seed(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, ...) seed-major observations as (seeds, B / seeds, features)."""
        return obs.reshape(len(self.seeds), -1, obs[0].numel()).float()

    def _features(self, side: str, obs: torch.Tensor) -> torch.Tensor:
        return self.encoder[side]["net"]["mlp"](self._by_seed(obs))

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        inputs = self.pi["net"]["mlp"](self._features("actor_encoder", obs))
        if not isinstance(self.action_space, gym.spaces.Discrete):  # RLlib's head clips log stds
            means, log_stds = inputs.chunk(2, dim=-1)
            clip = float(self.model_config.get("log_std_clip_param", LOG_STD_CLIP))
            inputs = torch.cat([means, log_stds.clamp(-clip, clip)], dim=-1)
        return {Columns.ACTION_DIST_INPUTS: inputs.reshape(obs.shape[0], -1)}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        obs = batch[Columns.OBS]
        values = self.vf["net"]["mlp"](self._features("critic_encoder", obs))
        return values.reshape(obs.shape[0])

    def _action_dist_cls(self) -> type:
        if isinstance(self.action_space, gym.spaces.Discrete):
            return TorchCategorical
        return TorchDiagGaussian

    def get_inference_action_dist_cls(self) -> type:
        return self._action_dist_cls()

    def get_exploration_action_dist_cls(self) -> type:
        return self._action_dist_cls()

    def get_train_action_dist_cls(self) -> type:
        return self._action_dist_cls()

    def seed_module_state(self, index: int) -> dict[str, torch.Tensor]:
        """The stack's ``index``-th seed as the parameters of RLlib's ``DefaultPPOTorchRLModule``
        with the same ``model_config`` (``vf_share_layers: false``); RLlib's module keeps its
        constant buffers (its heads' log-std clip)."""
        return seed_state(self.state_dict(), index)


# -- sampling ------------------------------------------------------------------------------------


class StackedRollout:
    """``steps`` vector steps of N seeds x E envs each, as tensors (N, steps, E, ...): what each
    env observed, did and got, and the observation after each step (the final one where an
    episode ended there). ``env_steps`` counts one seed's: the env steps each seed's trial
    reports. (A plain class: RLlib's sampling helpers flatten lists of samples with ``tree``
    and keep it whole.)"""

    def __init__(self, columns: dict[str, torch.Tensor]):
        self.columns = columns

    def env_steps(self) -> int:
        _, steps, envs = self.columns["rewards"].shape
        return steps * envs

    def agent_steps(self) -> int:
        return self.env_steps()


class StackedEnvRunner(EnvRunner, Checkpointable):
    """RLlib's ``EnvRunner`` interface for a stack of seeds: N x E envs stepped one by one in
    seed-major order, seed i's E envs seeded as a run of seed i alone seeds its local runner's
    (``runner_seeds``), one forward pass of the stacked module per vector step for all of them.
    An env whose episode ends is reset at once; its final observation stays in the rollout for
    the value bootstrap. Metrics are per seed (``SEED_RESULTS``/<i>/...) and, under RLlib's
    names, over all seeds' episodes; env steps count one seed's."""

    def __init__(self, *, config: AlgorithmConfig, **kwargs: Any):
        super().__init__(config=config, **kwargs)
        self.seeds = [int(seed) for seed in config.model_config[STACKED_SEEDS]]
        self.envs_per_seed = int(config.num_envs_per_env_runner)
        self.window = int(config.metrics_num_episodes_for_smoothing)
        self._weights_seq_no = 0
        self._single: tuple[Any, dict[str, Any]] | None = None  # see _single_seed_parts
        self.make_env()
        self.make_module()

    # -- set-up

    def make_env(self) -> None:
        creator = getattr(self.config, "stacked_env_creator", None) or (
            lambda _: gym.make(self.config.env)
        )
        count = len(self.seeds) * self.envs_per_seed
        self.envs = [creator(dict(self.config.env_config)) for _ in range(count)]
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        config = self.config
        self.discrete = isinstance(self.action_space, gym.spaces.Discrete)
        self.for_env = actions_for_env(
            self.action_space, config.normalize_actions, config.clip_actions
        )
        first = []
        for index, seed in enumerate(self.seeds):
            _, env_seeds = runner_seeds(seed, 0, False, self.envs_per_seed)
            envs = self.envs[index * self.envs_per_seed : (index + 1) * self.envs_per_seed]
            first += [
                env.reset(seed=env_seed)[0] for env, env_seed in zip(envs, env_seeds, strict=True)
            ]
        self.obs = np.stack([np.asarray(o, dtype=np.float32).reshape(-1) for o in first])
        self.running_returns = np.zeros(len(self.envs))
        self.running_lengths = np.zeros(len(self.envs), dtype=np.int64)
        self.running_abs = np.zeros(len(self.envs))  # each episode's sum of mean |observation|
        # (return, length, before learning) of each seed's last episodes, and of this call's
        self.recent = [deque(maxlen=self.window) for _ in self.seeds]
        self.ended: list[list[tuple[float, int, bool]]] = [[] for _ in self.seeds]

    def make_module(self) -> None:
        self.module = RLModuleSpec(
            module_class=StackedPPOModule,
            observation_space=self.observation_space,
            action_space=self.action_space,
            model_config=dict(self.config.model_config),
        ).build()

    def get_spaces(self) -> dict[str, tuple[gym.Space, gym.Space]]:
        spaces = (self.observation_space, self.action_space)
        return {
            INPUT_ENV_SPACES: spaces,
            INPUT_ENV_SINGLE_SPACES: spaces,
            DEFAULT_MODULE_ID: spaces,
        }

    def assert_healthy(self) -> None:
        assert self.envs and self.module is not None

    # -- sampling

    def sample(self, **kwargs: Any) -> list[StackedRollout]:
        # Episodes of the first call were played before any update (PPO updates after each).
        self._before_learning = self.num_env_steps_sampled_lifetime == 0
        steps = -(-int(self.config.train_batch_size_per_learner) // self.envs_per_seed)
        count = len(self.envs)
        obs_rows, actions, logps, rewards, terminated, truncated, next_obs = ([] for _ in range(7))
        dist_class = self.module.get_exploration_action_dist_cls()
        for _ in range(steps):
            with torch.no_grad():
                inputs = self.module.forward_exploration({Columns.OBS: torch.from_numpy(self.obs)})
                dist = dist_class.from_logits(inputs[Columns.ACTION_DIST_INPUTS])
                action = dist.sample()
                logps.append(dist.logp(action))
            actions.append(action)
            played = self.for_env(action.numpy())
            if self.discrete:  # Python ints: a Discrete space checks them without numpy's dtypes
                played = played.tolist()
            self.running_abs += np.abs(self.obs).mean(axis=1)
            step_rewards = np.zeros(count, dtype=np.float32)
            ended = np.zeros((2, count), dtype=bool)
            after, current = np.empty_like(self.obs), np.empty_like(self.obs)
            restarted = []
            for k, env in enumerate(self.envs):
                o, r, term, trunc, _ = env.step(played[k])
                after[k] = np.ravel(o)
                step_rewards[k], ended[0, k], ended[1, k] = r, term, trunc
                if term or trunc:
                    restarted.append(k)
                    o, _ = env.reset()
                current[k] = np.ravel(o)
            self.running_returns += step_rewards
            self.running_lengths += 1
            for k in restarted:
                self._episode_ended(k, bool(ended[1, k] and not ended[0, k]))
            obs_rows.append(self.obs)
            next_obs.append(after)
            self.obs = current
            rewards.append(step_rewards)
            terminated.append(ended[0])
            truncated.append(ended[1])
        rollout = StackedRollout(
            {
                Columns.OBS: self._by_seed(torch.from_numpy(np.stack(obs_rows))),
                Columns.NEXT_OBS: self._by_seed(torch.from_numpy(np.stack(next_obs))),
                Columns.ACTIONS: self._by_seed(torch.stack(actions)),
                Columns.ACTION_LOGP: self._by_seed(torch.stack(logps)),
                "rewards": self._by_seed(torch.from_numpy(np.stack(rewards))),
                "terminateds": self._by_seed(torch.from_numpy(np.stack(terminated))),
                "truncateds": self._by_seed(torch.from_numpy(np.stack(truncated))),
            }
        )
        self._log_steps(rollout.env_steps())
        return [rollout]

    def _by_seed(self, tensor: torch.Tensor) -> torch.Tensor:
        """(steps, N x E, ...) seed-major rows as (N, steps, E, ...)."""
        steps, rows = tensor.shape[:2]
        shaped = tensor.reshape(steps, len(self.seeds), rows // len(self.seeds), *tensor.shape[2:])
        return shaped.transpose(0, 1).contiguous()

    def _episode_ended(self, env_index: int, truncated: bool) -> None:
        seed_index = env_index // self.envs_per_seed
        length = int(self.running_lengths[env_index])
        episode = (float(self.running_returns[env_index]), length, self._before_learning)
        self.recent[seed_index].append(episode)
        self.ended[seed_index].append(episode)
        log = self.metrics.log_value
        log(NUM_EPISODES, 1, reduce="sum")
        seed = (SEED_RESULTS, str(seed_index))
        log((*seed, NUM_EPISODES), 1, reduce="sum")
        # What the training-health diagnoses read of each seed's episodes (rlplat.health).
        obs_abs = float(self.running_abs[env_index]) / max(length, 1)
        for key, value in ((EPISODES_ENDED, 1), (EPISODES_TRUNCATED, int(truncated)),
                           (OBS_ABS_SUM, obs_abs)):  # fmt: skip
            log((*seed, HEALTH_KEY, key), value, reduce="sum")
        self.running_returns[env_index], self.running_lengths[env_index] = 0.0, 0
        self.running_abs[env_index] = 0.0

    def _log_steps(self, steps: int) -> None:
        """This call's env steps; each seed's mean return and length over the episodes it
        finished in this call (RLlib's ``episode_return_mean``), and over its last
        ``metrics_num_episodes_for_smoothing`` episodes (``window``: kept from call to call, as
        rlplat's ``window/`` results are)."""
        self.num_env_steps_sampled_lifetime += steps
        self.metrics.log_value(NUM_ENV_STEPS_SAMPLED, steps, reduce="sum")
        self.metrics.log_value(NUM_ENV_STEPS_SAMPLED_LIFETIME, steps, reduce="lifetime_sum")
        every = [episode for ended in self.ended for episode in ended]
        for key, position in ((EPISODE_RETURN_MEAN, 0), (EPISODE_LEN_MEAN, 1)):
            if every:
                self.metrics.log_value(key, float(np.mean([e[position] for e in every])), window=1)
            for index, (ended, recent) in enumerate(zip(self.ended, self.recent, strict=True)):
                if ended:
                    mean = float(np.mean([episode[position] for episode in ended]))
                    self.metrics.log_value((SEED_RESULTS, str(index), key), mean, window=1)
                if recent:
                    mean = float(np.mean([episode[position] for episode in recent]))
                    self.metrics.log_value(
                        (SEED_RESULTS, str(index), SEED_WINDOW, key), mean, window=1
                    )
        for index, recent in enumerate(self.recent):
            if recent:
                window = (SEED_RESULTS, str(index), SEED_WINDOW)
                self.metrics.log_value((*window, NUM_EPISODES), len(recent), window=1)
                before = sum(episode[2] for episode in recent)
                self.metrics.log_value((*window, BEFORE_LEARNING), before, window=1)
        self.ended = [[] for _ in self.seeds]

    def get_metrics(self) -> Any:
        return self.metrics.reduce()

    # -- one seed as a policy

    def save_seed(self, index: int, path: Path) -> None:
        """The stack's ``index``-th seed as the parts of a PPO checkpoint that acting restores
        (``rlplat.policy.restore``: ``rlplat eval``, ``export``, ``serve``): its module as
        RLlib's ``DefaultPPOTorchRLModule`` holding its slice of the stacked weights, the
        config's env-to-module and module-to-env pipelines, and the env steps it sampled."""
        single, pipelines = self._single_seed_parts()
        single.load_state_dict(single.state_dict() | self.module.seed_module_state(index))
        modules = path / COMPONENT_LEARNER_GROUP / COMPONENT_LEARNER / COMPONENT_RL_MODULE
        single.save_to_path(modules / DEFAULT_MODULE_ID)
        runner = path / COMPONENT_ENV_RUNNER
        for name, pipeline in pipelines.items():
            # With its state given, a pipeline writes only its pieces that have state, as an
            # env runner's checkpoint does (asked for its own, it asks each stateless piece).
            pipeline.save_to_path(runner / name, state=pipeline.get_state())
        steps = {NUM_ENV_STEPS_SAMPLED_LIFETIME: self.num_env_steps_sampled_lifetime}
        (runner / "state.pkl").write_bytes(pickle.dumps(steps))

    def _single_seed_parts(self) -> tuple[Any, dict[str, Any]]:
        """RLlib's PPO module for one seed and the config's two pipelines, built once (a
        checkpoint of 16 seeds would build them 16 times) and given each seed's weights."""
        if self._single is None:
            with torch.random.fork_rng():  # building draws weights: not from the seeds' stream
                self._single = self._build_single_seed_parts()
        return self._single

    def _build_single_seed_parts(self) -> tuple[Any, dict[str, Any]]:
        model_config = {k: v for k, v in self.config.model_config.items() if k != STACKED_SEEDS}
        module = RLModuleSpec(
            module_class=DefaultPPOTorchRLModule,
            catalog_class=PPOCatalog,
            observation_space=self.observation_space,
            action_space=self.action_space,
            model_config=model_config,
        ).build()
        spaces = {INPUT_ENV_SINGLE_SPACES: (self.observation_space, self.action_space)}
        config = self.config
        pipelines = {
            COMPONENT_ENV_TO_MODULE_CONNECTOR: config.build_env_to_module_connector(spaces=spaces),
            COMPONENT_MODULE_TO_ENV_CONNECTOR: config.build_module_to_env_connector(spaces=spaces),
        }
        return module, pipelines

    # -- state

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        state: dict[str, Any] = {
            NUM_ENV_STEPS_SAMPLED_LIFETIME: self.num_env_steps_sampled_lifetime,
            RECENT_EPISODES: [list(recent) for recent in self.recent],
        }
        if state_requested(COMPONENT_RL_MODULE, components, not_components):
            state[COMPONENT_RL_MODULE] = self.module.get_state()
            state[WEIGHTS_SEQ_NO] = self._weights_seq_no
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        if COMPONENT_RL_MODULE in state:
            seq_no = state.get(WEIGHTS_SEQ_NO, 0)
            if seq_no == 0 or self._weights_seq_no < seq_no:
                module_state = state[COMPONENT_RL_MODULE]
                if DEFAULT_MODULE_ID in module_state:
                    module_state = module_state[DEFAULT_MODULE_ID]
                self.module.set_state(module_state)
            self._weights_seq_no = max(self._weights_seq_no, seq_no)
        if NUM_ENV_STEPS_SAMPLED_LIFETIME in state:
            self.num_env_steps_sampled_lifetime = state[NUM_ENV_STEPS_SAMPLED_LIFETIME]
        if RECENT_EPISODES in state:  # a resumed stack's window goes on from its checkpoint's
            self.recent = [deque(map(tuple, saved), maxlen=self.window)
                           for saved in state[RECENT_EPISODES]]  # fmt: skip

    def get_ctor_args_and_kwargs(self) -> tuple[tuple, dict[str, Any]]:
        return (), {"config": self.config}

    def get_checkpointable_components(self) -> list[tuple[str, Any]]:
        return [(COMPONENT_RL_MODULE, self.module)]

    def stop(self) -> None:
        for env in self.envs:
            env.close()


# -- learning ------------------------------------------------------------------------------------


class StackedPPOLearner(RlplatLearner, PPOTorchLearner):
    """RLlib's ``Learner`` interface for a stack of seeds, owning its update: each seed's
    advantages (GAE over its own envs, standardised over its own rows), then ``num_epochs``
    passes over minibatches cut per seed (each seed its own shuffle), the clipped PPO loss per
    seed, gradients clipped by each seed's own norm, a seed whose loss or gradient is not finite
    stopped alone (``SeedStops``), one Adam step over the stacked tensors. Results are RLlib's
    PPO names averaged over the seeds still training, and per seed under ``SEED_RESULTS``."""

    def build(self) -> None:
        super().build()
        seeds = self.config.model_config[STACKED_SEEDS]
        self.stops = SeedStops(len(seeds))
        self.shuffle = torch.Generator().manual_seed(int(self.config.seed or 0))

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
        data = seed_advantages(module, rollout.columns, config.gamma, config.lambda_)
        seeds, rows = data[ADVANTAGES].shape
        size = min(int(minibatch_size or rows), rows)
        params = list(module.parameters())
        [(_, optimizer)] = self.get_optimizers_for_module(DEFAULT_MODULE_ID)
        entropy_coeff = self.entropy_coeff_schedulers_per_module[
            DEFAULT_MODULE_ID
        ].get_current_value()
        for _ in range(num_epochs):
            order = torch.argsort(torch.rand(seeds, rows, generator=self.shuffle), dim=1)
            for start in range(0, rows, size):
                batch = rows_of(data, order[:, start : start + size])
                losses, stats = ppo_losses(module, batch, config, entropy_coeff)
                optimizer.zero_grad(set_to_none=True)
                losses.sum().backward()
                self.stops.check(losses, params, optimizer)
                if config.grad_clip:
                    stats["gradients_default_optimizer_global_norm"] = clip_grad_norm_per_seed_(
                        params, float(config.grad_clip)
                    )
                optimizer.step()
        self._log_results(stats, rows * num_epochs)
        self.after_gradient_based_update(timesteps=timesteps or {})
        return self.metrics.reduce()

    def _log_results(self, stats: dict[str, torch.Tensor], rows_trained: int) -> None:
        """The last minibatch's statistics: per seed, and averaged over live seeds."""
        alive = self.stops.alive
        for name, per_seed in stats.items():
            values = per_seed.detach()
            self.metrics.log_value((DEFAULT_MODULE_ID, name), values[alive].mean(), window=1)
            for index, value in enumerate(values.tolist()):
                self.metrics.log_value((SEED_RESULTS, str(index), name), value, window=1)
        self.metrics.log_value((SEED_RESULTS, STOPPED_SEEDS), len(self.stops.stopped), window=1)
        for index, live in enumerate(alive.tolist()):
            stopped = (SEED_RESULTS, str(index), SEED_STOPPED)
            self.metrics.log_value(stopped, int(not live), window=1)
        for key in (NUM_MODULE_STEPS_TRAINED, NUM_ENV_STEPS_TRAINED):
            self.metrics.log_value((DEFAULT_MODULE_ID, key), rows_trained, reduce="sum")
            self.metrics.log_value((ALL_MODULES, key), rows_trained, reduce="sum")
        self.metrics.log_value(
            (ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME), rows_trained, reduce="lifetime_sum"
        )


ADVANTAGES, VALUE_TARGETS = "advantages", "value_targets"
TOTAL_LOSS = "total_loss"


@torch.no_grad()
def seed_advantages(
    module: StackedPPOModule, columns: dict[str, torch.Tensor], gamma: float, lambda_: float
) -> dict[str, torch.Tensor]:
    """GAE(gamma, lambda) of each seed's envs, bootstrapped from the value of the observation
    after each step (zero where the episode terminated), restarting where an episode ended;
    advantages standardised per seed, as RLlib's PPO standardises a module's. Columns flattened
    to (N, steps x E, ...) per seed."""
    obs = columns[Columns.OBS]
    seeds, steps, envs = obs.shape[:3]

    def values(observations: torch.Tensor) -> torch.Tensor:
        flat = observations.reshape(seeds * steps * envs, -1)
        return module.compute_values({Columns.OBS: flat}).reshape(seeds, steps, envs)

    value, next_value = values(obs), values(columns[Columns.NEXT_OBS])
    terminated = columns["terminateds"].float()
    ended = torch.maximum(terminated, columns["truncateds"].float())
    deltas = columns["rewards"] + gamma * (1.0 - terminated) * next_value - value
    advantages = torch.empty_like(deltas)
    running = torch.zeros(seeds, envs)
    for t in reversed(range(steps)):
        running = deltas[:, t] + gamma * lambda_ * (1.0 - ended[:, t]) * running
        advantages[:, t] = running
    targets = (advantages + value).reshape(seeds, -1)
    advantages = advantages.reshape(seeds, -1)
    std = advantages.std(dim=1, keepdim=True).clamp(min=1e-4)
    rows = steps * envs
    return {
        Columns.OBS: obs.reshape(seeds, rows, -1),
        Columns.ACTIONS: columns[Columns.ACTIONS].reshape(
            seeds, rows, *columns[Columns.ACTIONS].shape[3:]
        ),
        Columns.ACTION_LOGP: columns[Columns.ACTION_LOGP].reshape(seeds, rows),
        ADVANTAGES: (advantages - advantages.mean(dim=1, keepdim=True)) / std,
        VALUE_TARGETS: targets,
    }


def rows_of(data: dict[str, torch.Tensor], index: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each seed's rows ``index`` (N, rows) of every (N, all rows, ...) column."""
    return {
        name: torch.take_along_dim(
            column, index.reshape(*index.shape, *([1] * (column.dim() - 2))), dim=1
        )
        for name, column in data.items()
    }


def ppo_losses(
    module: StackedPPOModule, batch: dict[str, torch.Tensor], config: Any, entropy_coeff: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Each seed's PPO loss over its minibatch (N,), RLlib's terms without the KL penalty: the
    clipped surrogate, the squared value error clipped at ``vf_clip_param``, the entropy bonus;
    and each term per seed."""
    seeds, rows = batch[ADVANTAGES].shape
    flat_obs = batch[Columns.OBS].reshape(seeds * rows, -1)
    inputs = module.forward_train({Columns.OBS: flat_obs})[Columns.ACTION_DIST_INPUTS]
    dist = module.get_train_action_dist_cls().from_logits(inputs)
    actions = batch[Columns.ACTIONS].reshape(seeds * rows, *batch[Columns.ACTIONS].shape[2:])
    logp = dist.logp(actions).reshape(seeds, rows)
    ratio = torch.exp(logp - batch[Columns.ACTION_LOGP])
    advantages = batch[ADVANTAGES]
    clip = config.clip_param
    surrogate = torch.minimum(advantages * ratio, advantages * ratio.clamp(1 - clip, 1 + clip))
    values = module.compute_values({Columns.OBS: flat_obs}).reshape(seeds, rows)
    vf_loss = (values - batch[VALUE_TARGETS]).square()
    vf_clipped = vf_loss.clamp(0.0, config.vf_clip_param)
    entropy = dist.entropy().reshape(seeds, rows)
    policy_loss = -surrogate.mean(1)
    losses = (
        policy_loss + config.vf_loss_coeff * vf_clipped.mean(1) - entropy_coeff * entropy.mean(1)
    )
    with torch.no_grad():  # what rlplat's PPO learner logs beside (rlplat.algorithms.policy_change)
        log_ratio = logp - batch[Columns.ACTION_LOGP]
        targets = batch[VALUE_TARGETS]
        unexplained = (targets - values).var(dim=1) / targets.var(dim=1).clamp(min=1e-8)
        stats = {
            TOTAL_LOSS: losses.detach(),
            POLICY_LOSS_KEY: policy_loss.detach(),
            VF_LOSS_KEY: vf_clipped.mean(1),
            LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY: vf_loss.mean(1),
            LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY: 1.0 - unexplained,
            ENTROPY_KEY: entropy.mean(1),
            APPROX_KL: ((ratio - 1.0) - log_ratio).mean(1),
            CLIP_FRACTION: ((ratio - 1.0).abs() > clip).float().mean(1),
        }
    return losses, stats


# -- the algorithm -------------------------------------------------------------------------------


class StackedPPOConfig(PPOConfig):
    """RLlib's ``PPOConfig`` for a stack of seeds (``stacked(seeds=...)``): the stacked module,
    learner and env runner, in the one process of the trial (no remote env runners or
    learners), without the KL penalty."""

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or StackedPPO)
        self.stacked_env_creator: Any = None
        self.use_kl_loss = False
        self.env_runners(num_env_runners=0, env_runner_cls=StackedEnvRunner)

    def stacked(self, *, seeds: list[int], env_creator: Any = None) -> StackedPPOConfig:
        """Train ``seeds`` side by side in this process; each env made by ``env_creator``
        (called with ``env_config``, as RLlib calls a registered creator; else
        ``gymnasium.make(config.env)``)."""
        self.rl_module(model_config={**self.model_config, STACKED_SEEDS: [int(s) for s in seeds]})
        self.stacked_env_creator = env_creator
        self.env_runners(num_env_runners=0)
        self.learners(num_learners=0)
        return self

    def get_default_learner_class(self) -> type:
        return StackedPPOLearner

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=StackedPPOModule)


class StackedPPO(PPO):
    """RLlib's PPO (its ``training_step``: sample, update, sync weights) over a stack of seeds."""

    @classmethod
    def get_default_config(cls) -> StackedPPOConfig:
        return StackedPPOConfig()
