"""What kind of env an object is, without importing RLlib (and with it torch).

``rlplat eval`` on an ONNX export of a single-agent policy then needs neither; RLlib's
``MultiAgentEnv`` class is loaded only when a PettingZoo env is adapted to it.
"""

from __future__ import annotations

import sys
from typing import Any

from pettingzoo import AECEnv, ParallelEnv

# The key of the legal-move mask in PettingZoo's (and the team view's) Dict observations.
ACTION_MASK = "action_mask"
_MULTI_AGENT_ENV_MODULE = "ray.rllib.env.multi_agent_env"


def is_pettingzoo(env: Any) -> bool:
    return isinstance(env, (AECEnv, ParallelEnv))


def is_multi_agent(env: Any) -> bool:
    """An RLlib ``MultiAgentEnv`` (which is also a ``gym.Env``). Until RLlib's module is loaded
    no object can be one, so the check does not load it."""
    module = sys.modules.get(_MULTI_AGENT_ENV_MODULE)
    return module is not None and isinstance(env, module.MultiAgentEnv)
