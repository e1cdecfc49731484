"""Connectors declared in YAML instead of Python callables.

    connectors:
      - mean_std_filter                 # running mean/std normalisation of observations
      - frame_stack: {num_frames: 4}    # the last 4 observations, in acting and in learning
      - reward_scaling                  # learn from rewards / std of the discounted return

Each observation entry becomes an RLlib ConnectorV2 piece at the front of the env runners'
env-to-module pipeline (and of the learner pipeline where RLlib needs the same transformation
there). Their state, such as a filter's running statistics, is saved in every checkpoint and
restored by ``rlplat eval`` with the pipeline. A learning-only entry (``reward_scaling``) is a
learner piece only; its state is in the learner's checkpoint state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlplat.errors import ConfigError
from rlplat.experiment.connectors import CONNECTORS
from rlplat.experiment.schema import entry_parts
from rlplat.util.imports import import_object


class ConnectorFactory:
    """Picklable builder RLlib calls on every env runner (or learner) to make the pieces."""

    def __init__(
        self,
        entries: list[str | dict[str, Any]],
        side: str,
        training: dict[str, Any] | None = None,
    ):
        self.side = side  # "env_to_module" or "learner"
        self.entries = [_with_training_defaults(entry_parts(e), training or {}) for e in entries]

    def pieces(self) -> list[tuple[str, dict[str, Any]]]:
        return [
            (getattr(CONNECTORS[name], self.side), options)
            for name, options in self.entries
            if getattr(CONNECTORS[name], self.side) is not None
        ]

    def __call__(self, *spaces_or_env: Any) -> list[Any]:
        return [import_object(path)(**options) for path, options in self.pieces()]


def _with_training_defaults(
    entry: tuple[str, dict[str, Any]], training: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """An entry's options, with those it takes from the training settings filled in."""
    name, options = entry
    inherited = {key: training[key] for key in CONNECTORS[name].from_training if key in training}
    return name, {**inherited, **options}


def check_connectors(
    entries: list[str | dict[str, Any]],
    observation_space: Any,
    action_space: Any,
    algorithm: str,
    locate: Callable[[str], str],
    names_where: Callable[[str], list[str]],
) -> None:
    """Each entry fits the algorithm (``names_where(trait)``: the algorithms with a registry
    trait); each env-to-module piece is built on the env's real spaces, in order, before Ray
    starts."""
    for index, (name, options) in enumerate(map(entry_parts, entries)):
        kind = CONNECTORS[name]
        algorithms = names_where(kind.trait) if kind.trait else []
        if kind.trait and algorithm not in algorithms:
            raise ConfigError(
                f"connector {name!r} works with {', '.join(algorithms)} ({kind.trait_means}), "
                f"not {algorithm}.",
                location=locate(f"connectors.{index}"),
                key=f"connectors[{index}]",
            )
        if kind.env_to_module is None:
            continue
        try:
            if kind.accepts is not None and not kind.accepts(observation_space):
                raise ValueError(kind.needs)
            # As RLlib's pipeline does: build the piece, then hand it its input spaces.
            piece = import_object(kind.env_to_module)(**options)
            piece.input_action_space = action_space
            piece.input_observation_space = observation_space
        except Exception as exc:  # noqa: BLE001 - RLlib asserts, raises ValueError, TypeError...
            needs = kind.needs
            raise ConfigError(
                f"connector {name!r} cannot take the observations {observation_space}"
                + (f": {needs}." if needs else f" ({type(exc).__name__}: {exc}).")
                + " The env's observations reach it after the connectors listed before it.",
                location=locate(f"connectors.{index}"),
                key=f"connectors[{index}]",
            ) from None
        observation_space = piece.observation_space
