"""DQN over stacked seeds (issue 104): one RL module holds N seeds' Q-networks and their target
copies along a leading seed axis (``rlplat.engine.stacked``), trained on
``StackedOffPolicyLoop`` with each seed's own replay of n-step transitions.

Each seed is RLlib's default DQN module as rlplat runs it (``rlplat.algorithms.transition_loop``)
for a Discrete action space: an encoder MLP (``fcnet_hiddens``, ``fcnet_activation``) and a head
of one Q-value per action (``head_fcnet_hiddens``, ``head_fcnet_activation``), or with
``dueling`` an advantage head and a value head, Q = V + A - mean(A). It is fitted to
r_n + gamma^n (1 - terminated) Q'(s', a*) by the Huber loss (``td_error_loss_fn``), a* the
online network's greedy action with ``double_q`` else the target's; the target network moves
``tau`` towards the online one every ``target_network_update_freq`` env steps. It acts
epsilon-greedily, epsilon following its schedule over the env steps each seed sampled. Its
parameters carry the names of RLlib's DQN module, so ``seed_module_state`` is a state that
module loads: one seed is evaluated, exported and served as the single-seed policy it is.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from ray.rllib.algorithms.dqn.dqn import DQN as RLlibDQN
from ray.rllib.algorithms.dqn.dqn_learner import (
    QF_LOSS_KEY,
    QF_MAX_KEY,
    QF_MEAN_KEY,
    QF_MIN_KEY,
    TD_ERROR_MEAN_KEY,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.schedules.scheduler import Scheduler
from torch import nn

from rlplat.algorithms.base import WithoutModeSwitch, move_towards
from rlplat.algorithms.stacked.offpolicy import (
    StackedOffPolicyLearner,
    StackedOffPolicyLoop,
    StackedOffPolicySettings,
    frozen_copy,
)
from rlplat.algorithms.stacked.runner import STACKED_SEEDS, as_rllib_mlp
from rlplat.algorithms.transition_loop import DQNConfig, DQNModule
from rlplat.engine.stacked import seed_generators, seed_state, stacked_mlp

DEFAULT_HIDDENS, DEFAULT_ACTIVATION = (256, 256), "tanh"  # RLlib's DefaultModelConfig
TARGET = "target_"  # a target network's name: target_<its online network's>


class StackedDQNModule(WithoutModeSwitch, TorchRLModule):
    """N seeds' DQN networks (see the module's docstring), Discrete actions."""

    def setup(self) -> None:
        config = self.model_config
        self.seeds = [int(seed) for seed in config[STACKED_SEEDS]]
        count = len(self.seeds)
        hiddens = list(config.get("fcnet_hiddens", DEFAULT_HIDDENS))
        head_hiddens = list(config.get("head_fcnet_hiddens", []))
        head_activation = config.get("head_fcnet_activation", "relu")
        self.actions = int(self.action_space.n)
        self.dueling = bool(config.get("dueling", True))
        generators = seed_generators(self.seeds)
        obs_dim = gym.spaces.flatdim(self.observation_space)
        activation = config.get("fcnet_activation", DEFAULT_ACTIVATION)
        encoder = stacked_mlp(count, obs_dim, hiddens, None, activation, generators)
        self.encoder = as_rllib_mlp(encoder)

        def head(size: int) -> nn.Module:
            return as_rllib_mlp(
                stacked_mlp(count, hiddens[-1], head_hiddens, size, head_activation, generators)
            )

        self.af = head(self.actions)
        if self.dueling:
            self.vf = head(1)
        for name in self.network_names:
            setattr(self, TARGET + name, frozen_copy(getattr(self, name)))
        self.epsilon_schedule = Scheduler(fixed_value_or_schedule=config["epsilon"])

    @property
    def network_names(self) -> tuple[str, ...]:
        return ("encoder", "af", "vf") if self.dueling else ("encoder", "af")

    def by_seed(self, rows: torch.Tensor) -> torch.Tensor:
        """(B, ...) seed-major rows as (seeds, B / seeds, features)."""
        return rows.reshape(len(self.seeds), -1, rows[0].numel()).float()

    def q_values(self, obs: torch.Tensor, prefix: str = "") -> torch.Tensor:
        """Every action's Q-value of (seeds, rows, obs) observations by the online (or, with
        ``prefix`` "target_", the target) networks: (seeds, rows, actions)."""
        features = getattr(self, prefix + "encoder")["net"]["mlp"](obs)
        advantages = getattr(self, prefix + "af")["net"]["mlp"](features)
        if not self.dueling:
            return advantages
        value = getattr(self, prefix + "vf")["net"]["mlp"](features)
        return value + advantages - advantages.mean(-1, keepdim=True)

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        q = self.q_values(self.by_seed(obs)).reshape(obs.shape[0], -1)
        return {Columns.ACTIONS: q.argmax(-1)}

    @torch.no_grad()
    def _forward_exploration(
        self, batch: dict[str, Any], t: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """With probability epsilon (its schedule at env step ``t`` of each seed) a uniformly
        drawn action, else the greedy one."""
        greedy = self._forward(batch)[Columns.ACTIONS]
        self.epsilon_schedule.update(t or 0)
        epsilon = self.epsilon_schedule.get_current_value()
        uniform = torch.randint(self.actions, greedy.shape)
        return {Columns.ACTIONS: torch.where(torch.rand(greedy.shape) < epsilon, uniform, greedy)}

    def q_parameters(self) -> list[nn.Parameter]:
        return [p for name in self.network_names for p in getattr(self, name).parameters()]

    def target_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(getattr(self, name), getattr(self, TARGET + name)) for name in self.network_names]

    def seed_module_state(self, index: int) -> dict[str, torch.Tensor]:
        """The stack's ``index``-th seed as the parameters of RLlib's DQN module (its target
        network is the learner's)."""
        names = self.network_names
        own = {k: v for k, v in self.state_dict().items() if k.split(".")[0] in names}
        return seed_state(own, index)


class StackedDQNLearner(StackedOffPolicyLearner):
    """``StackedOffPolicyLearner`` whose update is DQN's, for every seed at once."""

    def configure_optimizers_for_module(self, module_id: str, config: Any = None) -> None:
        """Adam (torch's defaults, RLlib's DQN learner's) over the stacked Q-networks: one
        optimizer, N independent ones per seed."""
        module = self.module[module_id].unwrapped()
        self.register_adams(module_id, (("q", module.q_parameters(), config.lr),))

    def update_once(
        self, module: StackedDQNModule, optimizers: dict[str, Any], batch: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """One DQN update of every seed on its batch (seeds, rows, ...), then the target
        networks where due (``target_network_update_freq`` env steps, RLlib's cadence)."""
        config = self.config
        obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
        actions = batch[Columns.ACTIONS].long().unsqueeze(-1)
        q = module.q_values(obs).gather(-1, actions).squeeze(-1)
        with torch.no_grad():
            next_target = module.q_values(next_obs, TARGET)
            chooser = module.q_values(next_obs) if config.double_q else next_target
            best = next_target.gather(-1, chooser.argmax(-1, keepdim=True)).squeeze(-1)
            discount = config.gamma ** batch["n_step"]
            target = batch["rewards"] + discount * (1.0 - batch["terminateds"]) * best
        loss = nn.HuberLoss if config.td_error_loss_fn == "huber" else nn.MSELoss
        losses = loss(reduction="none")(q, target).mean(1)
        self.step(optimizers["q"], losses, module.q_parameters())
        if config.target_network_update_freq <= self.sampled - self.last_target_update:
            for online, target_network in module.target_pairs():
                move_towards(online, target_network, config.tau)
            self.last_target_update = self.sampled
        q = q.detach()
        return {
            QF_LOSS_KEY: losses.detach(),
            QF_MEAN_KEY: q.mean(1),
            QF_MAX_KEY: q.amax(1),
            QF_MIN_KEY: q.amin(1),
            TD_ERROR_MEAN_KEY: (q - target).abs().mean(1),
        }


class StackedDQNConfig(StackedOffPolicySettings, DQNConfig):
    """rlplat's ``DQNConfig`` for a stack of seeds (``stacked(seeds=...)``): the stacked
    module, learner and env runner, in the one process of the trial."""

    stacked_module = StackedDQNModule
    stacked_learner = StackedDQNLearner
    seed_module = DQNModule

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or StackedDQN)


class StackedDQN(StackedOffPolicyLoop, RLlibDQN):
    """DQN over a stack of seeds, on ``StackedOffPolicyLoop``."""

    @classmethod
    def get_default_config(cls) -> StackedDQNConfig:
        return StackedDQNConfig()
