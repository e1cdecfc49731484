from rlplat.algorithms.mappo.mappo import MAPPO, MAPPOConfig

__all__ = ["MAPPO", "MAPPOConfig"]
