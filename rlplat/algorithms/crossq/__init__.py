"""CrossQ (SAC without target networks, batch renormalisation), for Box actions."""

from rlplat.algorithms.crossq.crossq import CrossQ, CrossQConfig

__all__ = ["CrossQ", "CrossQConfig"]
