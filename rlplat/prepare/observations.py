"""The observation stage: observation spaces RLlib's default encoders cannot take get a working
default, written into the experiment (so the run's experiment.yaml and the output say what was
chosen): Box observations of bools or integers cast to float32 (uint8 images excepted: RLlib's
CNN takes them), images a CNN sized for them, other spaces (Dict, Tuple, Discrete, 2D Box)
flattened by a wrapper. An experiment that names its own ``conv_filters`` or connectors keeps
them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from rlplat.algorithms.registry import (
    algorithm_record,
    is_joint_algorithm,
    is_team_algorithm,
)
from rlplat.environments.kinds import is_image
from rlplat.environments.make import EnvInfo
from rlplat.environments.observations import as_float
from rlplat.experiment.schema import Experiment, entry_parts

FLAT_OBSERVATION = "rlplat.environments.observations:FlatObservation"
FLATTEN_MULTI_AGENT = "flatten_v0"  # SuperSuit's, for PettingZoo envs' 2D Box observations
FLAT_AGENTS = "rlplat.environments.observations:flat_agents"  # other spaces, for PettingZoo envs
FLOAT_OBSERVATION = "rlplat.environments.observations:FloatObservation"
FLOAT_MULTI_AGENT = {"dtype_v0": {"dtype": "float32"}}  # SuperSuit's

# DeepMind's Nature CNN (Mnih et al. 2015): three unpadded convolutions down to 7x7x64 for 84x84
# frames, then 512 units (here one layer of 512 in each head on the shared convolutions). It
# takes frames of 36x36 and more.
NATURE_CNN = {
    "conv_filters": [[32, [8, 8], 4, "valid"], [64, [4, 4], 2, "valid"], [64, [3, 3], 1, "valid"]],
    "conv_activation": "relu",
    "head_fcnet_hiddens": [512],
    "head_fcnet_activation": "relu",
    "vf_share_layers": True,
}
NATURE_CNN_MIN_SIDE = 36
# Small grids (MiniGrid's 7x7 views, pursuit's 7x7): three 2x2 convolutions, as MiniGrid's
# usual agents use; frames of 4x4 and more.
SMALL_CNN = {
    "conv_filters": [[16, [2, 2], 1, "valid"], [32, [2, 2], 1, "valid"], [64, [2, 2], 1, "valid"]],
    "conv_activation": "relu",
}
SMALL_CNN_MIN_SIDE = 4
# Image shapes RLlib has a default CNN for (its catalog's table), besides 84x84.
RLLIB_CNN_SIDES = {(42, 42), (64, 64), (10, 10)}


@dataclass(frozen=True)
class ObservationDefaults:
    """The experiment with its defaults filled in, and one line per default chosen."""

    experiment: Experiment
    notes: tuple[str, ...] = ()

    @property
    def wrapped(self) -> bool:
        """Whether a wrapper was added (the env must be checked again with it)."""
        return any("env.wrappers" in note for note in self.notes)


def with_observation_defaults(experiment: Experiment, env: EnvInfo) -> ObservationDefaults:
    if is_team_algorithm(experiment.algorithm) or is_joint_algorithm(experiment.algorithm):
        return ObservationDefaults(experiment)  # their own modules read Box observations
    spaces = list(env.observation_spaces.values()) if env.multi_agent else [env.observation_space]
    notes: tuple[str, ...] = ()
    if any(_needs_float(space) for space in spaces):
        wrapper = FLOAT_MULTI_AGENT if env.multi_agent else FLOAT_OBSERVATION
        experiment = _with_wrapper(experiment, wrapper)
        notes = (
            f"env.wrappers: {entry_parts(wrapper)[0]} added: RLlib's networks take float "
            f"observations, {experiment.env.label!r} has {spaces[0].dtype} ones (cast to float32)",
        )
        spaces = [as_float(space) if _needs_float(space) else space for space in spaces]
    shaped = _shape_defaults(experiment, env.multi_agent, spaces)
    return ObservationDefaults(shaped.experiment, notes + shaped.notes)


def _shape_defaults(
    experiment: Experiment, multi_agent: bool, spaces: list[gym.Space]
) -> ObservationDefaults:
    """A CNN for images, a flattening wrapper for what RLlib's default encoders cannot take."""
    model_config = experiment.rl_module.get("model_config") or {}
    label = experiment.env.label
    if all(is_image(space) for space in spaces) and len({s.shape for s in spaces}) == 1:
        own_networks = algorithm_record(experiment.algorithm).networks == "own"
        if "conv_filters" in model_config or own_networks:
            return ObservationDefaults(experiment)  # its own CNN (PQN's Nature CNN) or none
        cnn = _cnn_for(spaces[0].shape)
        if cnn is None:
            return ObservationDefaults(experiment)
        name, settings = cnn
        rl_module = {**experiment.rl_module, "model_config": {**settings, **model_config}}
        note = (
            f"rl_module.model_config: {name} for {label!r}'s {_shape(spaces[0])} frames "
            "(conv_filters in the experiment replace it)"
        )
        return ObservationDefaults(experiment.model_copy(update={"rl_module": rl_module}), (note,))
    if experiment.connectors or not any(_needs_flattening(s, multi_agent) for s in spaces):
        return ObservationDefaults(experiment)
    if not multi_agent:
        wrapper = FLAT_OBSERVATION
    elif all(isinstance(space, gym.spaces.Box) for space in spaces):
        wrapper = FLATTEN_MULTI_AGENT
    else:
        wrapper = FLAT_AGENTS
    note = (
        f"env.wrappers: {wrapper} added: RLlib's default encoders take 1D Box observations and "
        f"images, {label!r} has {_describe(spaces[0])} (flattened to one vector)"
    )
    return ObservationDefaults(_with_wrapper(experiment, wrapper), (note,))


def _needs_float(space: gym.Space) -> bool:
    """A Box of bools or integers, except uint8 images (RLlib's CNN takes those)."""
    if not isinstance(space, gym.spaces.Box) or np.issubdtype(space.dtype, np.floating):
        return False
    return not (is_image(space) and space.dtype == np.uint8)


def _with_wrapper(experiment: Experiment, wrapper: str | dict[str, Any]) -> Experiment:
    spec = experiment.env.model_copy(update={"wrappers": [*experiment.env.wrappers, wrapper]})
    return experiment.model_copy(update={"env": spec})


def _needs_flattening(space: gym.Space, multi_agent: bool) -> bool:
    if isinstance(space, gym.spaces.Box):
        return len(space.shape) != 1
    if multi_agent and isinstance(space, gym.spaces.Dict):
        return False  # PettingZoo Dicts carry action masks, which RLlib's masked modules read
    return isinstance(
        space,
        (
            gym.spaces.Dict,
            gym.spaces.Tuple,
            gym.spaces.Discrete,
            gym.spaces.MultiDiscrete,
            gym.spaces.MultiBinary,
        ),
    )


def _cnn_for(shape: tuple[int, ...]) -> tuple[str, dict[str, Any]] | None:
    side = tuple(shape[:2])
    if side in RLLIB_CNN_SIDES:
        return None
    if side == (84, 84) or min(side) >= NATURE_CNN_MIN_SIDE:
        return "the Nature CNN", NATURE_CNN
    if min(side) >= SMALL_CNN_MIN_SIDE:
        return "a small CNN (three 2x2 convolutions)", SMALL_CNN
    return None


def _shape(space: gym.Space) -> str:
    return "x".join(str(n) for n in space.shape)


def _describe(space: gym.Space) -> str:
    if isinstance(space, gym.spaces.Box):
        return f"{len(space.shape)}D Box observations of shape {_shape(space)}"
    return f"{type(space).__name__} observations"
