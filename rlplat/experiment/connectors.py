"""The connectors a YAML may name (``connectors:``) and the options each accepts.

The catalog is data: each name points at its ConnectorV2 pieces (RLlib's or rlplat's) by
``module:Class``; the pieces are built by ``rlplat.environments.connectors``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlplat.util.imports import import_object


@dataclass(frozen=True)
class ConnectorKind:
    env_to_module: str | None  # "module:Class" of the env-to-module piece (None: learning only)
    learner: str | None  # the learner-side piece, when learning needs it too
    needs: str = ""  # what the observations must look like, for error messages
    accepts: Callable[[Any], bool] | None = None  # checks the observation space against needs
    # The algorithm registry's trait of the algorithms it works with (empty: all), and why.
    trait: str = ""
    trait_means: str = ""
    from_training: tuple[str, ...] = ()  # options that default to the training key of that name

    def piece(self) -> str:
        """The piece whose signature lists the options (env-to-module first)."""
        return self.env_to_module or self.learner or ""


CONNECTORS: dict[str, ConnectorKind] = {
    "mean_std_filter": ConnectorKind(
        "ray.rllib.connectors.env_to_module.mean_std_filter:MeanStdFilter",
        None,
    ),
    "frame_stack": ConnectorKind(
        "ray.rllib.connectors.env_to_module.frame_stacking:FrameStackingEnvToModule",
        "ray.rllib.connectors.learner.frame_stacking:FrameStackingLearner",
        "RLlib's frame stacking takes image observations of shape (height, width, 1), such as "
        "grayscale frames (84, 84, 1)",
        lambda space: len(getattr(space, "shape", None) or ()) == 3 and space.shape[-1] == 1,
    ),
    "reward_scaling": ConnectorKind(
        None,
        "rlplat.environments.reward_scaling:RewardScaling",
        trait="on_policy_rewards",
        trait_means="algorithms that learn from the batch's rewards on policy",
        from_training=("gamma",),
    ),
}

# Arguments RLlib fills in itself; not settable from YAML.
_INTERNAL = {"input_observation_space", "input_action_space", "multi_agent", "agent_ids"}
_INTERNAL |= {"as_learner_connector", "kwargs", "self"}


def connector_options(name: str) -> list[str]:
    """The keyword arguments a connector accepts from YAML (read from its signature)."""
    piece = import_object(CONNECTORS[name].piece())
    params = inspect.signature(piece).parameters
    return [p for p in params if p not in _INTERNAL]
