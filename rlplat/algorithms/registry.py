"""Name -> RLlib ``Algorithm`` class.

RLlib's registered algorithms are found by name (case-insensitive). An algorithm rlplat writes joins
with one ``register_algorithm("NAME", "module.path:AlgorithmClass")`` line at the bottom of this
file; the import happens only when the algorithm is used.

A *joint* algorithm (MADDPG) keeps one policy per ``multi_agent.policies`` entry, but its
critics see every agent's observation and action at the same step.

A *team* algorithm learns one policy for all agents of a cooperative multi-agent env together
(value factorisation): it sees the env as one team agent (``rlplat.environments.team.TeamEnv``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ray.rllib.algorithms.registry import ALGORITHMS

from rlplat.errors import UserError, allowed_list, did_you_mean
from rlplat.util.imports import import_object

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm import Algorithm

_CUSTOM: dict[str, str] = {}
_TEAM: set[str] = set()
_JOINT: set[str] = set()
# RLlib's algorithms that learn from recorded data (offline_data) and never sample for training.
OFFLINE = ("BC", "MARWIL", "CQL", "IQL")
# Algorithms whose RLModule needs continuous (Box) actions, with those to use for discrete ones.
CONTINUOUS_ONLY = {
    "CQL": "BC or MARWIL",
    "IQL": "BC or MARWIL",
    "TD3": "SAC or DQN",
    "DDPG": "SAC or DQN",
}


def register_algorithm(
    name: str, import_path: str, *, team: bool = False, joint: bool = False
) -> None:
    """Make ``algorithm: NAME`` resolve to the class at ``module.path:ClassName``."""
    _CUSTOM[name] = import_path
    if team:
        _TEAM.add(name)
    if joint:
        _JOINT.add(name)


def is_team_algorithm(name: str) -> bool:
    """Whether ``name`` (a canonical name) learns over a multi-agent env seen as one team."""
    return name in _TEAM


def is_joint_algorithm(name: str) -> bool:
    """Whether ``name`` learns from every agent's step at once (centralised critics): it needs
    a multi-agent env whose agents all act at every step, and the joint layout of its agents."""
    return name in _JOINT


def is_offline_algorithm(name: str) -> bool:
    """Whether ``name`` (a canonical name) trains from datasets (``offline:``)."""
    return name in OFFLINE


def discrete_alternative(name: str) -> str | None:
    """For an algorithm that needs Box actions, what to use on discrete ones; else None."""
    return CONTINUOUS_ONLY.get(name)


def _rllib_names() -> list[str]:
    return list(ALGORITHMS)


def algorithm_names() -> list[str]:
    """Every name ``algorithm:`` accepts."""
    return sorted({*_rllib_names(), *_CUSTOM})


def canonical_name(name: str) -> str:
    """The registered spelling of ``name`` (matched case-insensitively), or a UserError."""
    names = algorithm_names()
    by_lower = {n.lower(): n for n in names}
    if name.lower() in by_lower:
        return by_lower[name.lower()]
    raise UserError(
        f"unknown algorithm {name!r}; allowed: {allowed_list(names, limit=30)}."
        + did_you_mean(name, names)
    )


def get_algorithm_class(name: str) -> type[Algorithm]:
    """The Algorithm class for a name; imports it on first use."""
    name = canonical_name(name)
    if name in _CUSTOM:
        return import_object(_CUSTOM[name])

    return ALGORITHMS[name]()[0]


register_algorithm("QMIX", "rlplat.algorithms.qmix:QMIX", team=True)
register_algorithm("TD3", "rlplat.algorithms.td3:TD3")
register_algorithm("DDPG", "rlplat.algorithms.td3:DDPG")
register_algorithm("MADDPG", "rlplat.algorithms.maddpg:MADDPG", joint=True)
