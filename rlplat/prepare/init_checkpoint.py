"""``init.checkpoint`` (``rlplat train exp.yaml --from PATH``): the checkpoint a new run starts
from, found and checked against the experiment before anything starts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray.rllib.core import DEFAULT_MODULE_ID

from rlplat.checkpoints import RL_MODULE, find_checkpoint
from rlplat.errors import ConfigError, UserError

KEY = "init.checkpoint"


def module_ids(algo_config: Any) -> set[str]:
    """The RLModule ids an algorithm config trains (single-agent: the default module)."""
    if algo_config.is_multi_agent:
        return set(algo_config.policies)
    return {DEFAULT_MODULE_ID}


def resolve_init_checkpoint(given: str, algo_config: Any, locate: Callable[[str], str]) -> str:
    """The absolute checkpoint ``init.checkpoint`` designates; it must hold a policy for every
    module the experiment trains."""
    location = locate(KEY)
    try:
        picked = find_checkpoint(Path(given))
    except UserError as exc:
        raise ConfigError(str(exc), location=location, key=KEY) from None
    modules = picked.path / RL_MODULE
    available = {p.name for p in modules.iterdir() if p.is_dir()} if modules.is_dir() else set()
    needed = module_ids(algo_config)
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
