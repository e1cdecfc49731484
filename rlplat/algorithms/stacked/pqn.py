"""PQN over stacked seeds (issue 104): one RL module holds N seeds' Q-networks along a leading
seed axis (``rlplat.engine.stacked``), each seed learning from its own envs' rollouts as rlplat's
PQN does (``rlplat.algorithms.pqn``).

Each seed is rlplat's ``PQNModule`` on a flat observation: hidden layers of linear, layer norm,
ReLU (``hiddens``), a linear Q head, weights orthogonal with gain sqrt(2) and biases zero (each
seed its own draw). It acts epsilon-greedily, epsilon falling over the env steps each seed
sampled; every step's Q(s, a) is fitted by the squared error to its lambda-return over
max_a Q, computed once per rollout with the network that acted, bootstrapping where the
rollout or a time limit cut the episode (as RLlib's lambda-returns do for rlplat's PQN). Its
parameters carry ``PQNModule``'s names, so ``seed_module_state`` is a state that module loads:
one seed is evaluated, exported and served as the single-seed policy it is.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchCategorical
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from rlplat.algorithms.base import WithoutModeSwitch
from rlplat.algorithms.pqn.pqn import PQN, PQNConfig
from rlplat.algorithms.pqn.rl_module import PQNModule
from rlplat.algorithms.stacked.learning import StackedOnPolicyLearner, generalized_advantages
from rlplat.algorithms.stacked.runner import STACKED_SEEDS, StackedSettings
from rlplat.engine.stacked import StackedLayerNorm, StackedLinear, seed_generators, seed_state

VALUE_TARGETS = "value_targets"


class StackedPQNModule(WithoutModeSwitch, TorchRLModule):
    """N seeds' PQN Q-networks (see the module's docstring), Discrete actions."""

    def setup(self) -> None:
        config = self.model_config
        self.seeds = [int(seed) for seed in config[STACKED_SEEDS]]
        count, generators = len(self.seeds), seed_generators(self.seeds)
        in_dim = gym.spaces.flatdim(self.observation_space)
        layers: list[nn.Module] = []
        for width in config["hiddens"]:
            layers += [StackedLinear(count, in_dim, width), StackedLayerNorm(count, width)]
            layers.append(nn.ReLU())
            in_dim = width
        layers.append(StackedLinear(count, in_dim, int(self.action_space.n)))
        self.q_network = nn.Sequential(*layers)
        for layer in self.q_network:  # PQNModule's initialisation, each seed its own draw
            if isinstance(layer, StackedLinear):
                with torch.no_grad():
                    for seed, generator in enumerate(generators):
                        single = torch.empty(layer.weight.shape[2], layer.weight.shape[1])
                        nn.init.orthogonal_(single, math.sqrt(2), generator=generator)
                        layer.weight[seed] = single.T
                    layer.bias.zero_()
        self.epsilon_start = float(config["epsilon_start"])
        self.epsilon_end = float(config["epsilon_end"])
        self.epsilon_timesteps = int(config["epsilon_timesteps"])

    epsilon = PQNModule.epsilon  # its schedule over a seed's env steps

    def q_values(self, obs: torch.Tensor) -> torch.Tensor:
        """Q(s, .) of (seeds, rows, obs) observations: (seeds, rows, actions)."""
        return self.q_network(obs.float())

    def _q_rows(self, obs: torch.Tensor) -> torch.Tensor:
        """Q(s, .) of (B, obs) seed-major rows, as (B, actions)."""
        by_seed = obs.reshape(len(self.seeds), -1, obs[0].numel())
        return self.q_values(by_seed).reshape(obs.shape[0], -1)

    @torch.no_grad()
    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self._q_rows(batch[Columns.OBS])}

    @torch.no_grad()
    def _forward_exploration(
        self, batch: dict[str, Any], t: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Each env's greedy action, or with probability epsilon (at each seed's env step
        ``t``) a uniformly drawn one."""
        q = self._q_rows(batch[Columns.OBS])
        greedy = q.argmax(dim=-1)
        uniform = torch.randint(q.shape[-1], greedy.shape)
        explore = torch.rand(greedy.shape) < self.epsilon(t)
        return {Columns.ACTIONS: torch.where(explore, uniform, greedy)}

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {}  # the learner asks for the Q-values itself

    def get_inference_action_dist_cls(self) -> type[TorchCategorical]:
        return TorchCategorical

    def get_exploration_action_dist_cls(self) -> type[TorchCategorical]:
        return TorchCategorical

    def get_train_action_dist_cls(self) -> type[TorchCategorical]:
        return TorchCategorical

    def seed_module_state(self, index: int) -> dict[str, torch.Tensor]:
        """The stack's ``index``-th seed as the parameters of ``PQNModule``."""
        return seed_state(self.state_dict(), index)


class StackedPQNLearner(StackedOnPolicyLearner):
    """RLlib's ``Learner`` interface for a stack of PQN seeds, owning its update
    (``StackedOnPolicyLearner``): each seed's lambda-returns over its own envs, then its
    squared error per minibatch. Results are the names of rlplat's PQN learner, averaged over
    the seeds still training and per seed."""

    @torch.no_grad()
    def training_rows(
        self, module: StackedPQNModule, columns: dict[str, torch.Tensor], config: Any
    ) -> dict[str, torch.Tensor]:
        obs = columns[Columns.OBS]
        seeds, steps, envs = obs.shape[:3]

        def values(observations: torch.Tensor) -> torch.Tensor:
            rows = observations.reshape(seeds, steps * envs, -1)
            return module.q_values(rows).max(dim=-1).values.reshape(seeds, steps, envs)

        value, next_value = values(obs), values(columns[Columns.NEXT_OBS])
        returns = generalized_advantages(columns, value, next_value, config.gamma, config.q_lambda)
        rows = steps * envs
        return {
            Columns.OBS: obs.reshape(seeds, rows, -1),
            Columns.ACTIONS: columns[Columns.ACTIONS].reshape(seeds, rows),
            VALUE_TARGETS: (returns + value).reshape(seeds, rows),
        }

    def minibatch_losses(
        self, module: StackedPQNModule, batch: dict[str, torch.Tensor], config: Any
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        actions = batch[Columns.ACTIONS].long().unsqueeze(-1)
        q = module.q_values(batch[Columns.OBS]).gather(-1, actions).squeeze(-1)
        targets = batch[VALUE_TARGETS]
        losses = (q - targets).square().mean(1)
        stats = {"q_loss": losses.detach(), "q_mean": q.detach().mean(1),
                 "target_mean": targets.mean(1)}  # fmt: skip
        return losses, stats


class StackedPQNConfig(StackedSettings, PQNConfig):
    """rlplat's ``PQNConfig`` for a stack of seeds (``stacked(seeds=...)``): the stacked module,
    learner and env runner, in the one process of the trial."""

    stacked_module = StackedPQNModule
    stacked_learner = StackedPQNLearner
    seed_module = PQNModule

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or StackedPQN)

    def stacked_steps_per_sample(self) -> int:
        return -(-int(self.train_batch_size_per_learner) // int(self.num_envs_per_env_runner))

    def stacked_learning_starts(self) -> int:
        return 1  # PQN learns from every rollout


class StackedPQN(PQN):
    """rlplat's PQN loop (sample a rollout, ``num_epochs`` over it, sync the weights) over a
    stack of seeds."""

    @classmethod
    def get_default_config(cls) -> StackedPQNConfig:
        return StackedPQNConfig()
