"""The torch learner every algorithm rlplat registers trains with: ``RlplatLearner``.

It is a ``TorchLearner`` (RLlib's interface for a learner), and an algorithm's learner derives
from it beside the RLlib learner whose loss it computes, in a class written in a file
(``rlplat.algorithms.rllib_learners`` for RLlib's algorithms, each own algorithm's
``learner.py``). What it changes in RLlib's update, for every algorithm alike:

- minibatches cut once per epoch as views of shuffled columns, trained-steps counters logged once
  per update (``EpochMinibatches``, ``rlplat.engine.minibatches``);
- gradients clipped to a global norm by fused calls over all tensors, and checked for nan/inf by
  one fused norm (RLlib makes two calls per tensor for each: about 0.25 ms of a 3 ms PPO minibatch
  update of a 256x256 network, the same update), unless the experiment asks for
  ``torch_skip_nan_gradients`` (RLlib's AMP scalers and torch LR schedulers, which its step also
  serves, are settings of RLlib's ``experimental()`` section, which an experiment does not have);
- each module's optimizer as ``training.optimizer: {type: ...}`` gives it (RLlib reads that key
  only on its old stack), RLlib's one Adam otherwise, fused (``rlplat.engine.optimizers``);
- the learner connector pipeline's state (a ``reward_scaling`` piece's running statistics) in the
  learner's checkpoint state, which RLlib leaves out, so ``--resume`` carries it on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core import ALL_MODULES
from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.utils import force_list
from ray.rllib.utils.torch_utils import clip_gradients as rllib_clip_gradients
from ray.rllib.utils.typing import ModuleID, ParamDict

from rlplat.engine.minibatches import EpochMinibatches
from rlplat.engine.optimizers import build_optimizer
from rlplat.seams.rllib_learner import learner_connector

logger = logging.getLogger(__name__)

LEARNER_CONNECTOR = "rlplat_learner_connector"  # its state's key in the learner's state


class RlplatLearner(EpochMinibatches, TorchLearner):
    """See the module's docstring. An algorithm's learner puts it before the RLlib learner it
    derives from: ``class PPOLearner(RlplatLearner, PPOTorchLearner)``."""

    def apply_gradients(self, gradients_dict: ParamDict) -> None:
        # RLlib's AMP gradient scalers and torch LR schedulers, which its apply_gradients also
        # serves, come from the config's ``experimental()`` section: an experiment has none.
        if not self.config.torch_skip_nan_gradients:
            step_if_finite(self, gradients_dict)
        else:
            super().apply_gradients(gradients_dict)

    def clip_function(self) -> Callable[..., Any]:
        return clip_gradients

    def configure_optimizers_for_module(
        self, module_id: ModuleID, config: AlgorithmConfig = None
    ) -> None:
        if sets_up_own_optimizers(type(self)):
            super().configure_optimizers_for_module(module_id, config)
            return
        spec = dict(config.optimizer or {}) if isinstance(config.optimizer, dict) else {}
        kind = spec.pop("type", "adam")  # RLlib's: one Adam per module
        lr = spec.pop("lr", config.lr)
        params = self.get_parameters(self.module[module_id])
        self.register_optimizer(
            module_id=module_id,
            optimizer=build_optimizer(kind, params, **spec),
            params=params,
            lr_or_lr_schedule=lr,
        )

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> Any:
        state = super().get_state(components, not_components=not_components, **kwargs)
        pipeline = learner_connector(self)
        wanted = state_requested(LEARNER_CONNECTOR, components, not_components)
        if wanted and pipeline is not None:
            state[LEARNER_CONNECTOR] = pipeline.get_state()
        return state

    def set_state(self, state: Any) -> None:
        super().set_state(state)
        pipeline = learner_connector(self)
        if LEARNER_CONNECTOR in state and pipeline is not None:
            pipeline.set_state(state[LEARNER_CONNECTOR])


def state_requested(name: str, components: Any, not_components: Any) -> bool:
    """Whether ``get_state(components, not_components=not_components)`` asks for the state
    component ``name`` that a learner adds to RLlib's: with no ``components`` every one is
    asked for, else those named or with a part named (``"name/..."``); ``not_components``
    leaves out those it names. RLlib's own components are picked the same way."""
    wanted = force_list(components)
    asked = components is None or name in wanted or any(c.startswith(f"{name}/") for c in wanted)
    return asked and name not in force_list(not_components)


def sets_up_own_optimizers(learner_class: type) -> bool:
    """Whether a class of ``learner_class`` sets up its optimizers (SAC's several per module),
    where RLlib's ``TorchLearner`` gives each module one Adam (``training.optimizer`` sets
    that one)."""
    return any(
        "configure_optimizers_for_module" in vars(klass)
        for klass in learner_class.__mro__
        if klass not in (RlplatLearner, TorchLearner, Learner)
    )


def clip_gradients(gradients: ParamDict, *, grad_clip: float, grad_clip_by: str) -> Any:
    """RLlib's gradient clipping (``ray.rllib.utils.torch_utils.clip_gradients``), with the
    global norm computed and applied by fused calls over all tensors (:func:`clip_by_global_norm`)
    where RLlib makes two calls per tensor."""
    if grad_clip_by != "global_norm":
        return rllib_clip_gradients(gradients, grad_clip=grad_clip, grad_clip_by=grad_clip_by)
    return clip_by_global_norm([g for g in gradients.values() if g is not None], grad_clip)


def clip_by_global_norm(grads: list[torch.Tensor], grad_clip: float) -> torch.Tensor:
    """Scale ``grads`` in place so that their global 2-norm is at most ``grad_clip``, as RLlib
    does (each tensor's norm and the total with inf mapped to 1e9, the same 1e-6); the norm."""
    if not grads:
        return torch.tensor(0.0)
    norms = torch.stack(torch._foreach_norm([g.detach() for g in grads]))
    total = torch.linalg.vector_norm(norms.nan_to_num(neginf=-10e8, posinf=10e8))
    total = total.nan_to_num(neginf=-10e8, posinf=10e8)
    scale = torch.clamp(grad_clip / torch.clamp(total + 1e-6, min=grad_clip), max=1.0)
    torch._foreach_mul_([g.detach() for g in grads], scale)
    return total


def step_if_finite(
    learner: TorchLearner,
    gradients: ParamDict,
    optimizers: list[torch.optim.Optimizer] | None = None,
) -> None:
    """RLlib's ``apply_gradients`` without AMP or torch LR schedulers: gradients with nan or
    inf become zeros, as RLlib's do; then every optimizer (or those given) steps. One fused norm
    checks all gradients, where RLlib checks each tensor twice."""
    grads = list(gradients.values())
    if grads and not torch.isfinite(torch.stack(torch._foreach_norm(grads))).all():
        logger.warning("Gradients contain `nan/inf` values; setting them to zero.")
        grads = [torch.nan_to_num(grad) for grad in grads]
    for param, grad in zip(gradients, grads, strict=True):  # a torch param is its own ref
        param.grad = grad
    for optimizer in registered_optimizers(learner) if optimizers is None else optimizers:
        optimizer.step()


def registered_optimizers(learner: TorchLearner) -> list[torch.optim.Optimizer]:
    """Every optimizer the learner registered, as RLlib's ``apply_gradients`` steps them: each
    of its modules' and any under ``ALL_MODULES``."""
    return [
        optimizer
        for module_id in (*learner.module.keys(), ALL_MODULES)
        for _, optimizer in learner.get_optimizers_for_module(module_id)
    ]


def optimizer_parameters(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The parameters ``optimizer`` updates, in the order it was given them: in a torch learner
    also their keys in a gradient dict (``TorchLearner.get_param_ref`` is the parameter)."""
    return [param for group in optimizer.param_groups for param in group["params"]]
