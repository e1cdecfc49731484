"""Algorithms rlplat can run: RLlib's own, plus the ones rlplat writes (registered here)."""

from rlplat.algorithms.registry import algorithm_names, get_algorithm_class, register_algorithm

__all__ = ["algorithm_names", "get_algorithm_class", "register_algorithm"]
