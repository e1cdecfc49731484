"""MADDPG: decentralised actors with centralised critics, for parallel multi-agent envs."""

from rlplat.algorithms.maddpg.maddpg import MADDPG, MADDPGConfig

__all__ = ["MADDPG", "MADDPGConfig"]
