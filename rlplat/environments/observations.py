"""``FlatObservation``: an env's observations as one float vector, for spaces RLlib's default
encoders cannot take (Dict, Tuple, Discrete, 2D Box). Gymnasium's ``FlattenObservation`` does
the flattening (one-hot for discrete parts); parts that are not numbers (a Dict's ``Text``
mission, as MiniGrid's) are left out first, since they have no flat form.
``FloatObservation``: Box observations of bools or integers (MinAtar's frames) as float32,
which RLlib's networks multiply."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

NUMERIC_SPACES = (
    gym.spaces.Box,
    gym.spaces.Discrete,
    gym.spaces.MultiDiscrete,
    gym.spaces.MultiBinary,
    gym.spaces.Dict,
    gym.spaces.Tuple,
)


def numeric_part(space: gym.Space) -> gym.Space | None:
    """``space`` without its non-numeric parts (None when nothing numeric is left)."""
    if isinstance(space, gym.spaces.Dict):
        kept = {k: numeric_part(s) for k, s in space.spaces.items()}
        kept = {k: s for k, s in kept.items() if s is not None}
        return gym.spaces.Dict(kept) if kept else None
    if isinstance(space, gym.spaces.Tuple):
        parts = [numeric_part(s) for s in space.spaces]
        return gym.spaces.Tuple(parts) if all(p is not None for p in parts) else None
    return space if isinstance(space, NUMERIC_SPACES) else None


def _numeric_value(space: gym.Space, value: Any) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {k: _numeric_value(s, value[k]) for k, s in space.spaces.items()}
    return value


class FlatObservation(gym.ObservationWrapper):
    """Observations flattened to a float32 vector, non-numeric parts left out."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        numeric = numeric_part(env.observation_space)
        if numeric is None:
            raise ValueError(f"{env.observation_space} has no numeric part to flatten")
        self._numeric = numeric
        flat = gym.spaces.flatten_space(numeric)
        self.observation_space = gym.spaces.Box(
            flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32
        )

    def observation(self, observation: Any) -> np.ndarray:
        value = _numeric_value(self._numeric, observation)
        return gym.spaces.flatten(self._numeric, value).astype(np.float32)


def as_float(space: gym.spaces.Box) -> gym.spaces.Box:
    """``space`` with float32 values and the same bounds and shape."""
    low, high = space.low.astype(np.float32), space.high.astype(np.float32)
    return gym.spaces.Box(low, high, dtype=np.float32)


class FloatObservation(gym.ObservationWrapper):
    """Box observations of bools or integers as float32 of the same shape."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.observation_space = as_float(env.observation_space)

    def observation(self, observation: Any) -> np.ndarray:
        return np.asarray(observation, dtype=np.float32)


def flat_agents(env: Any) -> Any:
    """A PettingZoo env (AEC or parallel) whose agents' observations are flattened to float32
    vectors, as ``FlatObservation`` does for one agent (a Discrete observation becomes its one-hot
    vector: rock-paper-scissors' last moves). SuperSuit's ``flatten_v0`` takes Box observations
    only."""
    from supersuit import observation_lambda_v0  # noqa: PLC0415 - the multiagent extra's

    def flat_space(space: gym.Space, *_: Any) -> gym.spaces.Box:
        flat = gym.spaces.flatten_space(space)
        return gym.spaces.Box(
            flat.low.astype(np.float32), flat.high.astype(np.float32), dtype=np.float32
        )

    def flat_value(observation: Any, space: gym.Space, *_: Any) -> np.ndarray:
        return gym.spaces.flatten(space, observation).astype(np.float32)

    return observation_lambda_v0(env, flat_value, flat_space)
