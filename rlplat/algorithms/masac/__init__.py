from rlplat.algorithms.masac.masac import MASAC, MASACConfig

__all__ = ["MASAC", "MASACConfig"]
