"""PPO over stacked seeds (issue 104): one RL module holds N seeds' actor-critics along a
leading axis (``rlplat.engine.stacked``), so N seeds act and learn in one process for about the
price of a few.

``StackedPPOModule`` is RLlib's default PPO networks (``DefaultPPOTorchRLModule`` without shared
layers: an actor MLP encoder and a critic MLP encoder of ``fcnet_hiddens`` with
``fcnet_activation``, initialised by ``fcnet_kernel_initializer`` and ``fcnet_bias_initializer``
where given, then a linear policy head, with ``free_log_std`` a log std per action beside it,
and a linear value head) for every seed of ``model_config["stacked_seeds"]``. With the
experiment's ``reward_scaling`` each seed learns from its rewards scaled by its own running
return std (``rlplat.algorithms.stacked.rewards``). Its batches are seed-major: of B rows,
rows [i B/N, (i+1) B/N) are seed i's (its env copies when acting, its minibatch when learning).
Its parameters carry RLlib's names with a leading seed axis, so ``seed_module_state`` is a state
that RLlib's own module loads: one seed is evaluated, exported and served as the single-seed
policy it is.
"""

from __future__ import annotations

import inspect
from typing import Any

import gymnasium as gym
import torch
from ray.rllib.algorithms.ppo.ppo import (
    LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY,
    LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY,
    PPO,
    PPOConfig,
)
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import (
    TorchCategorical,
    TorchDiagGaussian,
)
from ray.rllib.core.learner.learner import ENTROPY_KEY, POLICY_LOSS_KEY, VF_LOSS_KEY
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.models.utils import get_initializer_fn
from torch import nn

from rlplat.algorithms.base import WithoutModeSwitch
from rlplat.algorithms.policy_change import APPROX_KL, CLIP_FRACTION
from rlplat.algorithms.stacked.learning import StackedOnPolicyLearner, generalized_advantages
from rlplat.algorithms.stacked.rewards import SeedRewardScaling
from rlplat.algorithms.stacked.runner import (
    STACKED_SEEDS,
    StackedSettings,
    as_rllib_mlp,
)
from rlplat.engine.learner import state_requested
from rlplat.engine.stacked import (
    StackedLinear,
    seed_generators,
    seed_state,
    stacked_mlp,
)
from rlplat.environments.reward_scaling import RewardScaling
from rlplat.seams.rllib_learner import learner_connector

# RLlib's DefaultModelConfig
DEFAULT_HIDDENS, DEFAULT_ACTIVATION, LOG_STD_CLIP = (256, 256), "tanh", 20.0


class StackedPPOModule(WithoutModeSwitch, TorchRLModule, ValueFunctionAPI):
    """N seeds' PPO actor-critics (see the module's docstring), Discrete or Box actions."""

    def setup(self) -> None:
        config = self.model_config
        self.seeds = [int(seed) for seed in config[STACKED_SEEDS]]
        hiddens = list(config.get("fcnet_hiddens", DEFAULT_HIDDENS))
        activation = config.get("fcnet_activation", DEFAULT_ACTIVATION)
        count, obs_dim = len(self.seeds), gym.spaces.flatdim(self.observation_space)
        generators = seed_generators(self.seeds)  # each seed draws its layers in this order

        def encoder() -> nn.Module:
            return as_rllib_mlp(stacked_mlp(count, obs_dim, hiddens, None, activation, generators))

        def head(size: int) -> nn.Module:
            return as_rllib_mlp(stacked_mlp(count, hiddens[-1], [], size, activation, generators))

        self.encoder = nn.ModuleDict({"actor_encoder": encoder(), "critic_encoder": encoder()})
        self._initialise_encoders(generators)
        space = self.action_space
        self.free_log_std = bool(config.get("free_log_std", False))
        if isinstance(space, gym.spaces.Discrete):
            self.pi = head(int(space.n))
        elif self.free_log_std:  # means from the head, log stds free parameters (RLlib's)
            self.pi = head(gym.spaces.flatdim(space))
            self.pi.log_std = nn.Parameter(torch.zeros(count, gym.spaces.flatdim(space)))
        else:  # a Gaussian's means and log standard deviations, as RLlib's head outputs them
            self.pi = head(2 * gym.spaces.flatdim(space))
        self.vf = head(1)

    def _initialise_encoders(self, generators: list[torch.Generator]) -> None:
        """RLlib's ``fcnet_kernel_initializer`` and ``fcnet_bias_initializer`` (with their
        ``_kwargs``) on each seed's encoder layers, drawn from the seed's generator; without
        them, ``nn.Linear``'s initialisation stays."""
        config = self.model_config
        kernel = get_initializer_fn(config.get("fcnet_kernel_initializer"))
        bias = get_initializer_fn(config.get("fcnet_bias_initializer"))
        for init, part, kwargs in (
            (kernel, "weight", config.get("fcnet_kernel_initializer_kwargs") or {}),
            (bias, "bias", config.get("fcnet_bias_initializer_kwargs") or {}),
        ):
            if init is None:
                continue
            draws = "generator" in inspect.signature(init).parameters
            for layer in self.encoder.modules():
                if not isinstance(layer, StackedLinear):
                    continue
                stacked = getattr(layer, part)
                for seed, generator in enumerate(generators):
                    # a seed's weight is nn.Linear's (out, in) transposed; its bias is (1, out)
                    single = (
                        torch.empty(stacked.shape[2], stacked.shape[1])
                        if part == "weight"
                        else torch.empty(stacked.shape[2])
                    )
                    init(single, **kwargs, **({"generator": generator} if draws else {}))
                    with torch.no_grad():
                        stacked[seed] = single.T if part == "weight" else single.reshape(1, -1)

    def _by_seed(self, obs: torch.Tensor) -> torch.Tensor:
        """(B, ...) seed-major observations as (seeds, B / seeds, features)."""
        return obs.reshape(len(self.seeds), -1, obs[0].numel()).float()

    def _features(self, side: str, obs: torch.Tensor) -> torch.Tensor:
        return self.encoder[side]["net"]["mlp"](self._by_seed(obs))

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        inputs = self.pi["net"]["mlp"](self._features("actor_encoder", obs))
        if not isinstance(self.action_space, gym.spaces.Discrete):  # RLlib's head clips log stds
            if self.free_log_std:
                means, log_stds = inputs, self.pi.log_std.unsqueeze(1).expand_as(inputs)
            else:
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


# -- learning ------------------------------------------------------------------------------------


class StackedPPOLearner(StackedOnPolicyLearner, PPOTorchLearner):
    """RLlib's ``Learner`` interface for a stack of seeds, owning its update
    (``StackedOnPolicyLearner``): each seed's advantages (GAE over its own envs, standardised
    over its own rows), the clipped PPO loss per seed. Results are RLlib's PPO names averaged
    over the seeds still training, and per seed under ``SEED_RESULTS``."""

    def build(self) -> None:
        super().build()
        seeds = self.config.model_config[STACKED_SEEDS]
        pieces = getattr(learner_connector(self), "connectors", [])
        scaling = [piece for piece in pieces if isinstance(piece, RewardScaling)]
        envs = int(self.config.num_envs_per_env_runner)
        self.reward_scaling = SeedRewardScaling(len(seeds), envs, scaling[0]) if scaling else None

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        state = super().get_state(components, not_components=not_components, **kwargs)
        if self.reward_scaling and state_requested(REWARD_SCALING, components, not_components):
            state[REWARD_SCALING] = self.reward_scaling.get_state()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        if self.reward_scaling and REWARD_SCALING in state:
            self.reward_scaling.set_state(state[REWARD_SCALING])

    def training_rows(
        self, module: StackedPPOModule, columns: dict[str, torch.Tensor], config: Any
    ) -> dict[str, torch.Tensor]:
        if self.reward_scaling:  # each seed's rewards by its own scale, for learning only
            ended = columns["terminateds"] | columns["truncateds"]
            columns = {**columns, "rewards": self.reward_scaling(columns["rewards"], ended)}
        return seed_advantages(module, columns, config.gamma, config.lambda_)

    def minibatch_losses(
        self, module: StackedPPOModule, batch: dict[str, torch.Tensor], config: Any
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        scheduler = self.entropy_coeff_schedulers_per_module[DEFAULT_MODULE_ID]
        return ppo_losses(module, batch, config, scheduler.get_current_value())


ADVANTAGES, VALUE_TARGETS = "advantages", "value_targets"
REWARD_SCALING = "stacked_reward_scaling"  # the learner's state: each seed's reward scale
TOTAL_LOSS = "total_loss"


@torch.no_grad()
def seed_advantages(
    module: StackedPPOModule, columns: dict[str, torch.Tensor], gamma: float, lambda_: float
) -> dict[str, torch.Tensor]:
    """GAE(gamma, lambda) of each seed's envs, bootstrapped from the value of the observation
    after each step (zero where the episode terminated), restarting where an episode ended;
    advantages standardised per seed as RLlib's PPO standardises a module's: over its rows and
    the bootstrap rows its learner adds (``bootstrap_row_advantages``). Columns flattened to
    (N, steps x E, ...) per seed."""
    obs = columns[Columns.OBS]
    seeds, steps, envs = obs.shape[:3]

    def values(observations: torch.Tensor) -> torch.Tensor:
        flat = observations.reshape(seeds * steps * envs, -1)
        return module.compute_values({Columns.OBS: flat}).reshape(seeds, steps, envs)

    value, next_value = values(obs), values(columns[Columns.NEXT_OBS])
    advantages = generalized_advantages(columns, value, next_value, gamma, lambda_)
    ended = torch.maximum(columns["terminateds"].float(), columns["truncateds"].float())
    targets = (advantages + value).reshape(seeds, -1)
    extra, added = bootstrap_row_advantages(value, next_value, advantages, ended, gamma, lambda_)
    advantages = advantages.reshape(seeds, -1)
    count = advantages.shape[1] + added.sum(1, keepdim=True)
    mean = (advantages.sum(1, keepdim=True) + (extra * added).sum(1, keepdim=True)) / count
    squares = (advantages - mean).square().sum(1, keepdim=True)
    squares = squares + ((extra - mean).square() * added).sum(1, keepdim=True)
    std = (squares / count).sqrt().clamp(min=1e-4)  # numpy's std, as RLlib takes it
    rows = steps * envs
    return {
        Columns.OBS: obs.reshape(seeds, rows, -1),
        Columns.ACTIONS: columns[Columns.ACTIONS].reshape(
            seeds, rows, *columns[Columns.ACTIONS].shape[3:]
        ),
        Columns.ACTION_LOGP: columns[Columns.ACTION_LOGP].reshape(seeds, rows),
        ADVANTAGES: (advantages - mean) / std,
        VALUE_TARGETS: targets,
    }


def bootstrap_row_advantages(
    value: torch.Tensor,
    next_value: torch.Tensor,
    advantages: torch.Tensor,
    ended: torch.Tensor,
    gamma: float,
    lambda_: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The advantages RLlib's PPO gives the step it appends to every episode chunk of a batch
    (``AddOneTsToEpisodesAndTruncate``: the chunk's last observation again, reward 0, loss
    masked), which its GAE computes like any row and standardises with the others: gamma
    V(next row) + gamma lambda A(next row) - V(the last observation), the next row being the
    following chunk's first step (RLlib's batch concatenates chunks: here the same env's next
    episode; an env's last chunk is taken as the batch's last, followed by nothing). Each
    (seeds, steps x envs): the advantages at the steps that end a chunk, and where they are."""
    following_value, following_advantage = torch.zeros_like(value), torch.zeros_like(advantages)
    following_value[:, :-1], following_advantage[:, :-1] = value[:, 1:], advantages[:, 1:]
    extra = gamma * following_value + gamma * lambda_ * following_advantage - next_value
    chunk_ends = ended.clone()
    chunk_ends[:, -1] = 1.0
    seeds = value.shape[0]
    return extra.reshape(seeds, -1), chunk_ends.reshape(seeds, -1)


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


class StackedPPOConfig(StackedSettings, PPOConfig):
    """RLlib's ``PPOConfig`` for a stack of seeds (``stacked(seeds=...)``): the stacked module,
    learner and env runner, in the one process of the trial (no remote env runners or
    learners), without the KL penalty."""

    stacked_module = StackedPPOModule
    stacked_learner = StackedPPOLearner
    seed_module = DefaultPPOTorchRLModule
    seed_catalog = PPOCatalog

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or StackedPPO)
        self.use_kl_loss = False

    def stacked_steps_per_sample(self) -> int:
        return -(-int(self.train_batch_size_per_learner) // int(self.num_envs_per_env_runner))

    def stacked_learning_starts(self) -> int:
        return 1  # PPO updates after every sampling call


class StackedPPO(PPO):
    """RLlib's PPO (its ``training_step``: sample, update, sync weights) over a stack of seeds."""

    @classmethod
    def get_default_config(cls) -> StackedPPOConfig:
        return StackedPPOConfig()
