"""Pieces TD3 and MADDPG share: plain MLPs, and a learner whose actor and critic optimizers each
take the gradient of their own loss.

An actor's loss -Q(s, mu(s)) reaches the critic's parameters through the graph; summed with
the critic's loss and back-propagated once, it would also move the critic. Here each optimizer
gets ``torch.autograd.grad`` of its own loss with respect to its own parameters only.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.rl_module.apis import TargetNetworkAPI
from ray.rllib.utils.metrics import ALL_MODULES
from ray.rllib.utils.typing import ModuleID, ParamDict
from torch import nn

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "silu": nn.SiLU}
CRITIC, ACTOR = "critic", "actor"  # optimizer names


def mlp(in_dim: int, hiddens: list[int], out_dim: int, activation: str) -> nn.Sequential:
    """Linear layers of the given widths with ``activation`` between them, linear output."""
    layers: list[nn.Module] = []
    for width in hiddens:
        layers += [nn.Linear(in_dim, width), ACTIVATIONS[activation]()]
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


def actor_critic_problems(config: AlgorithmConfig) -> list[str]:
    """What is wrong with the settings TD3 and MADDPG share (nothing: an empty list)."""
    problems = []
    if not 0.0 < config.tau <= 1.0:
        problems.append(f"training.tau must be in (0, 1], got {config.tau}")
    if config.exploration_noise < 0:
        problems.append(
            f"training.exploration_noise must not be negative, got {config.exploration_noise}"
        )
    if config.hidden_activation not in ACTIVATIONS:
        problems.append(
            f"training.hidden_activation must be one of {sorted(ACTIVATIONS)}, "
            f"got {config.hidden_activation!r}"
        )
    if config.lr is not None:
        problems.append("training.lr is not used: set training.actor_lr and training.critic_lr")
    if config.num_learners > 1:
        problems.append(
            f"resources.learners.count must be 0 or 1, got {config.num_learners}: the actor and "
            "the critic each take the gradient of their own loss, which torch's distributed "
            "data parallel does not synchronise across learners"
        )
    if not config.normalize_actions:
        problems.append(
            "env_runners.normalize_actions must stay true: Box actors output tanh actions in "
            "[-1, 1], scaled to the Box bounds by it"
        )
    return problems


def warmup_steps(config: AlgorithmConfig) -> int:
    """Env steps acted uniformly at random before the actors take over: ``random_steps``, or
    when that is None as many as ``num_steps_sampled_before_learning_starts``."""
    if config.random_steps is None:
        return config.num_steps_sampled_before_learning_starts
    return config.random_steps


class ActorCriticLearner(TorchLearner):
    """Two Adam optimizers per module, ``critic`` (the module's ``critics()``) at
    ``config.critic_lr`` and ``actor`` at ``config.actor_lr``. A loss computation stores each
    optimizer's loss in ``self._losses[module_id][name]``; an optimizer without a loss in an
    update gets no gradient and Adam leaves its parameters alone."""

    def build(self) -> None:
        super().build()
        self._losses: dict[ModuleID, dict[str, torch.Tensor]] = {}
        self.module.foreach_module(
            lambda mid, module: (
                module.make_target_networks() if isinstance(module, TargetNetworkAPI) else None
            )
        )

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
                optimizer=torch.optim.Adam(params),
                params=params,
                lr_or_lr_schedule=lr,
            )

    def compute_gradients(
        self, loss_per_module: dict[ModuleID, torch.Tensor], **kwargs: Any
    ) -> ParamDict:
        for optim in self._optimizer_parameters:
            optim.zero_grad(set_to_none=True)
        grads: ParamDict = {}
        for module_id in set(loss_per_module) - {ALL_MODULES}:
            losses = self._losses.pop(module_id)
            for name, optim in self.get_optimizers_for_module(module_id):
                if name not in losses:
                    continue
                params = self.filter_param_dict_for_optimizer(self._params, optim)
                values = torch.autograd.grad(losses[name], list(params.values()), retain_graph=True)
                grads.update(zip(params.keys(), values, strict=True))
        return grads
