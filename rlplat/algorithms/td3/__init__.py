"""TD3 (twin critics, target smoothing, delayed actor) and DDPG as its settings, for Box actions."""

from rlplat.algorithms.td3.td3 import DDPG, TD3, DDPGConfig, TD3Config

__all__ = ["DDPG", "DDPGConfig", "TD3", "TD3Config"]
