"""Observation connectors declared in YAML instead of Python callables.

    connectors:
      - mean_std_filter                 # running mean/std normalisation of observations
      - frame_stack: {num_frames: 4}    # the last 4 observations, in acting and in learning

Each entry becomes an RLlib ConnectorV2 piece at the front of the env runners' env-to-module
pipeline (and of the learner pipeline where RLlib needs the same transformation there). Their
state, such as a filter's running statistics, is saved in every checkpoint and restored by
``rlplat eval`` with the pipeline.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from rlplat.environments import import_object


@dataclass(frozen=True)
class ConnectorKind:
    env_to_module: str  # "module:Class" of the env-to-module piece
    learner: str | None  # the learner-side piece, when learning needs it too
    doc: str


CONNECTORS: dict[str, ConnectorKind] = {
    "mean_std_filter": ConnectorKind(
        "ray.rllib.connectors.env_to_module.mean_std_filter:MeanStdFilter",
        None,
        "normalise observations by running mean and std (clip_by_value, de_mean_to_zero, ...)",
    ),
    "frame_stack": ConnectorKind(
        "ray.rllib.connectors.env_to_module.frame_stacking:FrameStackingEnvToModule",
        "ray.rllib.connectors.learner.frame_stacking:FrameStackingLearner",
        "stack the last num_frames observations along the last axis",
    ),
}

# Arguments RLlib fills in itself; not settable from YAML.
_INTERNAL = {"input_observation_space", "input_action_space", "multi_agent", "agent_ids"}
_INTERNAL |= {"as_learner_connector", "kwargs", "self"}


def entry_parts(entry: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``"name"`` or ``{name: {option: value}}`` -> (name, options)."""
    if isinstance(entry, str):
        return entry, {}
    [(name, options)] = entry.items()
    return name, dict(options or {})


def connector_options(name: str) -> list[str]:
    """The keyword arguments a connector accepts from YAML (read from its signature)."""
    piece = import_object(CONNECTORS[name].env_to_module)
    params = inspect.signature(piece).parameters
    return [p for p in params if p not in _INTERNAL]


class ConnectorFactory:
    """Picklable builder RLlib calls on every env runner (or learner) to make the pieces."""

    def __init__(self, entries: list[str | dict[str, Any]], side: str):
        self.side = side  # "env_to_module" or "learner"
        self.entries = [entry_parts(e) for e in entries]

    def pieces(self) -> list[tuple[str, dict[str, Any]]]:
        return [
            (getattr(CONNECTORS[name], self.side), options)
            for name, options in self.entries
            if getattr(CONNECTORS[name], self.side) is not None
        ]

    def __call__(self, *spaces_or_env: Any) -> list[Any]:
        return [import_object(path)(**options) for path, options in self.pieces()]
