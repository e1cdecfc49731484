"""A new run that starts from a checkpoint's policy (``init:``, ``rlplat train exp.yaml --from``).

Unlike ``--resume``, everything else is new: the run directory, counters, replay memory, and any
changed key of the experiment (an env kwarg, a lower learning rate). Only the policy weights, and
with ``init.optimizer`` the optimizer state, come from the checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlplat.errors import ConfigError, UserError

if TYPE_CHECKING:
    from rlplat.config.load import LoadedExperiment

LEARNER = "learner_group/learner"
RL_MODULE = f"{LEARNER}/rl_module"
KEY = "init.checkpoint"


def module_ids(algo_config: Any) -> set[str]:
    """The RLModule ids an algorithm config trains (single-agent: default_policy)."""
    if algo_config.is_multi_agent:
        return set(algo_config.policies)
    return {"default_policy"}


def resolve_init_checkpoint(loaded: LoadedExperiment) -> str:
    """The absolute checkpoint ``init.checkpoint`` designates, checked against the experiment:
    it must hold a policy for every module the experiment trains."""
    from rlplat.checkpoints import find_checkpoint

    experiment = loaded.experiment
    location = loaded.locate(KEY)
    try:
        picked = find_checkpoint(Path(experiment.init.checkpoint or ""))
    except UserError as exc:
        raise ConfigError(str(exc), location=location, key=KEY) from None
    modules = picked.path / RL_MODULE
    available = {p.name for p in modules.iterdir() if p.is_dir()} if modules.is_dir() else set()
    needed = module_ids(loaded.algo_config)
    missing = sorted(needed - available)
    if missing:
        raise ConfigError(
            f"checkpoint {picked.path} has policies {sorted(available) or 'none'}, but this "
            f"experiment trains {sorted(needed)} ({', '.join(missing)} missing). Start from a "
            "checkpoint of the same environment and multi_agent.policies.",
            location=location,
            key=KEY,
        )
    return str(picked.path)


def start_from_checkpoint(algo: Any, checkpoint: str, optimizer: bool) -> None:
    """Load the checkpoint's weights (and optimizer state) into a freshly built algorithm; the
    env runners get the weights too."""
    component = LEARNER if optimizer else RL_MODULE
    try:
        algo.restore_from_path(str(Path(checkpoint) / component), component=component)
    except RuntimeError as exc:  # torch: size mismatch for ...
        raise UserError(
            f"{KEY} {checkpoint}: its policy does not fit this experiment's model; the network "
            f"sizes (rl_module.model_config) and spaces must be the same. {_first_line(exc)}"
        ) from None
    if optimizer:
        algo.learner_group.foreach_learner(_reapply_learning_rates)


def _reapply_learning_rates(learner: Any) -> None:
    """A restored torch optimizer carries the old run's learning rate: set this run's back."""
    for optimizer, schedule in learner._optimizer_lr_schedules.items():
        learner._set_optimizer_lr(optimizer, schedule.get_current_value())


def _first_line(exc: BaseException) -> str:
    """torch's first "size mismatch for <param>: ..." line, else its first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    mismatches = [line for line in lines if line.startswith("size mismatch")]
    return (mismatches or lines or [type(exc).__name__])[0]
