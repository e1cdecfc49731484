"""Pieces TD3, MADDPG and CrossQ share: plain MLPs, the settings, Box exploration, and a learner
whose actor and critic optimizers each take the gradient of their own loss.

An actor's loss -Q(s, mu(s)) reaches the critic's parameters through the graph; summed with
the critic's loss and back-propagated once, it would also move the critic. Here each optimizer
gets ``torch.autograd.grad`` of its own loss with respect to its own parameters only.
"""

# No ``from __future__ import annotations``: the settings' annotations are read at run time.
from typing import Any, Literal

import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.columns import Columns
from ray.rllib.utils.metrics import ALL_MODULES
from ray.rllib.utils.typing import ModuleID, ParamDict
from torch import nn

from rlplat.algorithms.base import (
    RandomWarmupConfig,
    TargetNetworkLearner,
    not_negative,
)
from rlplat.algorithms.networks import ACTIVATIONS
from rlplat.algorithms.sac import SquashedGaussian
from rlplat.engine.learner import optimizer_parameters, registered_optimizers
from rlplat.engine.optimizers import adam

CRITIC, ACTOR = "critic", "actor"  # optimizer names


def mlp(in_dim: int, hiddens: list[int], out_dim: int, activation: str) -> nn.Sequential:
    """Linear layers of the given widths with ``activation`` between them, linear output."""
    layers: list[nn.Module] = []
    for width in hiddens:
        layers += [nn.Linear(in_dim, width), ACTIVATIONS[activation]()]
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


Activation = Literal["relu", "tanh", "elu", "silu"]


class ActorCriticConfig(RandomWarmupConfig):
    """The settings of every actor-critic algorithm rlplat writes (TD3, MADDPG, CrossQ); each
    sets its own defaults."""

    MODULE_KEYS = ("actor_hiddens", "critic_hiddens", "hidden_activation")

    actor_hiddens: list[int] = [256, 256]
    critic_hiddens: list[int] = [256, 256]
    hidden_activation: Activation = "relu"
    actor_lr: float = 3e-4
    critic_lr: float = 3e-4
    num_steps_sampled_before_learning_starts: int | None = 25_000

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class)
        self.lr = None  # the actors and the critics have their own (actor_lr, critic_lr)
        self.min_sample_timesteps_per_iteration = 1000  # rlplat's choice: 1,000 steps a report
        self.evaluation(evaluation_config=AlgorithmConfig.overrides(explore=False))

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.hidden_activation not in ACTIVATIONS:
            problems.append(
                f"training.hidden_activation must be one of {sorted(ACTIVATIONS)}, "
                f"got {self.hidden_activation!r}"
            )
        if self.lr is not None:
            problems.append("training.lr is not used: set training.actor_lr and training.critic_lr")
        if self.num_learners > 1:
            problems.append(
                f"resources.learners.count must be 0 or 1, got {self.num_learners}: the actor "
                "and the critic each take the gradient of their own loss, which torch's "
                "distributed data parallel does not synchronise across learners"
            )
        if not self.normalize_actions:
            problems.append(
                "env_runners.normalize_actions must stay true: Box actors output tanh actions in "
                "[-1, 1], scaled to the Box bounds by it"
            )
        return problems


class DeterministicActorCriticConfig(ActorCriticConfig):
    """A deterministic actor that explores with Gaussian noise, and target networks (TD3,
    MADDPG)."""

    MODULE_KEYS = (*ActorCriticConfig.MODULE_KEYS, "exploration_noise")

    tau: float = 0.005  # target networks: target <- tau * online + (1 - tau) * target
    exploration_noise: float = 0.1  # std of the acting noise, in [-1, 1] action units

    def problems(self) -> list[str]:
        problems = super().problems()
        if not 0.0 < self.tau <= 1.0:
            problems.append(f"training.tau must be in (0, 1], got {self.tau}")
        problems += not_negative(self, ["exploration_noise"])
        return problems


class BoxExploration:
    """How a deterministic actor explores in [-1, 1] action units: uniformly random actions for
    the first ``random_steps`` env steps, then its action plus Gaussian noise of std ``std``,
    clipped. Its greedy action is reported as a Gaussian of ``GREEDY_LOG_STD``, so RLlib's
    connectors and rlplat's export read it like any continuous policy's."""

    GREEDY_LOG_STD = -20.0

    def __init__(self, std: float, random_steps: int):
        self.std, self.random_steps = std, random_steps
        self.log_std = float(torch.log(torch.tensor(max(std, 1e-8))))

    def warming_up(self, t: int | None) -> bool:
        """Whether env step ``t`` is still in the random warm-up."""
        return (t or 0) < self.random_steps

    def actions(self, mean: torch.Tensor, t: int | None) -> torch.Tensor:
        """The exploring actions at env step ``t`` for greedy actions ``mean``."""
        if self.warming_up(t):
            return torch.rand_like(mean) * 2.0 - 1.0
        noise = torch.randn_like(mean) * self.std
        return (mean + noise).clamp(-1.0, 1.0)


SQUASH_EPS = 1e-6  # keeps log(1 - tanh(u)^2) finite where tanh saturates


def squashed_sample(dist_inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterised sample a = tanh(u), u ~ N(mean, std), and its log-density
    log N(u) - sum log(1 - tanh(u)^2)."""
    mean, log_std = dist_inputs.chunk(2, dim=-1)
    gaussian = torch.distributions.Normal(mean, log_std.exp())
    u = gaussian.rsample()
    action = torch.tanh(u)
    logp = gaussian.log_prob(u) - torch.log(1.0 - action.pow(2) + SQUASH_EPS)
    return action, logp.sum(dim=-1)


# The actor's log std is clipped to this range (as SAC's reference implementations do).
LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class SquashedGaussianActor:
    """RL module mixin: acting with a squashed-Gaussian ``actor`` (CrossQ, MASAC), whose output
    is a mean and a log std per action dimension. Exploring draws tanh of a sample, uniformly
    random actions for the first ``random_steps`` env steps; greedy play takes tanh of the mean
    (SAC's ``SquashedGaussian``, which RLlib's connectors and rlplat's export read)."""

    actor: nn.Module
    action_dim: int
    random_steps: int

    def dist_inputs(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's mean and clipped log std, side by side (in the network's current mode)."""
        mean, log_std = self.actor(obs.reshape(obs.shape[0], -1).float()).chunk(2, dim=-1)
        return torch.cat([mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)], dim=-1)

    @torch.no_grad()
    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self.dist_inputs(batch[Columns.OBS])}

    @torch.no_grad()
    def _forward_exploration(
        self, batch: dict[str, Any], t: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        inputs = self.dist_inputs(batch[Columns.OBS])
        if (t or 0) < self.random_steps:
            actions = torch.rand((len(inputs), self.action_dim), device=inputs.device) * 2 - 1
        else:
            actions, _ = squashed_sample(inputs)
        return {Columns.ACTIONS: actions, Columns.ACTION_DIST_INPUTS: inputs}

    def get_inference_action_dist_cls(self) -> type[SquashedGaussian]:
        return SquashedGaussian

    def get_exploration_action_dist_cls(self) -> type[SquashedGaussian]:
        return SquashedGaussian

    def get_train_action_dist_cls(self) -> type[SquashedGaussian]:
        return SquashedGaussian


def gaussian_inputs(mean: torch.Tensor, log_std: float) -> torch.Tensor:
    """RLlib's diagonal-Gaussian distribution inputs: the mean, then one log std per dim."""
    return torch.cat([mean, torch.full_like(mean, log_std)], dim=-1)


class ActorCriticLearner(TargetNetworkLearner):
    """Two Adam optimizers per module, ``critic`` (the module's ``critics()``) at
    ``config.critic_lr`` and ``actor`` at ``config.actor_lr``. ``module_losses`` gives the
    critic's loss, and the actor's when it steps; an optimizer without a loss in an update gets
    no gradient and Adam leaves its parameters alone. A module's target networks move after each
    of its actor steps."""

    def build(self) -> None:
        super().build()
        self._actor_stepped: set[ModuleID] = set()

    def target_update_due(self, module_id: ModuleID) -> bool:
        if module_id not in self._actor_stepped:
            return False
        self._actor_stepped.discard(module_id)
        return True

    def configure_optimizers_for_module(self, module_id: ModuleID, config: AlgorithmConfig) -> None:
        module = self.module[module_id].unwrapped()
        critic_params = [p for critic in module.critics() for p in self.get_parameters(critic)]
        for name, params, lr in (
            (CRITIC, critic_params, config.critic_lr),
            (ACTOR, self.get_parameters(module.actor), config.actor_lr),
        ):
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=name,
                optimizer=adam(params),
                params=params,
                lr_or_lr_schedule=lr,
            )

    def compute_gradients(
        self, loss_per_module: dict[ModuleID, torch.Tensor], **kwargs: Any
    ) -> ParamDict:
        for optim in registered_optimizers(self):
            optim.zero_grad(set_to_none=True)
        grads: ParamDict = {}
        for module_id in set(loss_per_module) - {ALL_MODULES}:
            losses = self._losses.pop(module_id)
            if ACTOR in losses:
                self._actor_stepped.add(module_id)
            for name, optim in self.get_optimizers_for_module(module_id):
                if name not in losses:
                    continue
                params = optimizer_parameters(optim)
                values = torch.autograd.grad(losses[name], params, retain_graph=True)
                grads.update(zip(params, values, strict=True))
        return grads
