"""What kind of env an object is, without importing RLlib (and with it torch).

``rlplat eval`` on an ONNX export of a single-agent policy then needs neither; RLlib's
``MultiAgentEnv`` class is loaded only when a PettingZoo env is adapted to it.
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
from pettingzoo import AECEnv, ParallelEnv

# The key of the legal-move mask in PettingZoo's (and the team view's) Dict observations.
ACTION_MASK = "action_mask"
_MULTI_AGENT_ENV_MODULE = "ray.rllib.env.multi_agent_env"


def masked_observation_key(space: gym.Space) -> str | None:
    """The observation entry of a ``Dict({<observation>, action_mask})`` space (PettingZoo's
    board games); None for any other space."""
    if isinstance(space, gym.spaces.Dict) and ACTION_MASK in space.spaces and len(space) == 2:
        return next(key for key in space.spaces if key != ACTION_MASK)
    return None


def is_image(space: gym.Space) -> bool:
    """Whether RLlib's default encoder for ``space`` is its CNN (a 3-D Box)."""
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3


def is_pettingzoo(env: Any) -> bool:
    return isinstance(env, (AECEnv, ParallelEnv))


def is_multi_agent(env: Any) -> bool:
    """An RLlib ``MultiAgentEnv`` (which is also a ``gym.Env``). Until RLlib's module is loaded
    no object can be one, so the check does not load it."""
    module = sys.modules.get(_MULTI_AGENT_ENV_MODULE)
    return module is not None and isinstance(env, module.MultiAgentEnv)
