"""A new run that starts from a checkpoint's policy (``init:``, ``rlplat train exp.yaml --from``),
applied to each trial's freshly built algorithm (``rlplat.prepare`` checked the checkpoint).

Unlike ``--resume``, everything else is new: the run directory, counters, replay memory, and any
changed key of the experiment (an env kwarg, a lower learning rate). Only the policy weights, and
with ``init.optimizer`` the optimizer state, come from the checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlplat.checkpoints import LEARNER, RL_MODULE
from rlplat.engine.learner import registered_optimizers
from rlplat.errors import UserError

KEY = "init.checkpoint"


def start_from_checkpoint(algo: Any, checkpoint: str, optimizer: bool) -> None:
    """Load the checkpoint's weights (and optimizer state) into a freshly built algorithm; the
    env runners get the weights too."""
    component = LEARNER if optimizer else RL_MODULE
    # A restored torch optimizer carries the old run's learning rates: this run's are those its
    # freshly built optimizers hold, set back after the restore.
    if optimizer:
        rates = next(iter(algo.learner_group.foreach_learner(learning_rates))).get()
    try:
        algo.restore_from_path(str(Path(checkpoint) / component), component=component)
    except RuntimeError as exc:  # torch: size mismatch for ...
        raise UserError(
            f"{KEY} {checkpoint}: its policy does not fit this experiment's model; the network "
            f"sizes (rl_module.model_config) and spaces must be the same. {_first_line(exc)}"
        ) from None
    if optimizer:
        algo.learner_group.foreach_learner(set_learning_rates, rates=rates)


def learning_rates(learner: Any) -> list[list[float]]:
    """Each of the learner's optimizers' learning rate, by parameter group."""
    return [[group["lr"] for group in opt.param_groups] for opt in registered_optimizers(learner)]


def set_learning_rates(learner: Any, rates: list[list[float]]) -> None:
    """Give the learner's optimizers the learning rates ``learning_rates`` read."""
    for optimizer, groups in zip(registered_optimizers(learner), rates, strict=True):
        for group, lr in zip(optimizer.param_groups, groups, strict=True):
            group["lr"] = lr


def _first_line(exc: BaseException) -> str:
    """torch's first "size mismatch for <param>: ..." line, else its first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    mismatches = [line for line in lines if line.startswith("size mismatch")]
    return (mismatches or lines or [type(exc).__name__])[0]
