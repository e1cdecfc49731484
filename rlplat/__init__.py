"""rlplat: one YAML file becomes an RLlib run under Ray Tune.

``rlplat.train``, ``rlplat.evaluate`` and ``rlplat.load_policy`` (``rlplat.api``) load RLlib on
first use: ``import rlplat`` stays light for the command line and ``rlplat.runtime``.
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["Run", "evaluate", "load_policy", "train"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rlplat import api  # noqa: PLC0415 - RLlib, Tune and torch load on first use

        return getattr(api, name)
    raise AttributeError(f"module 'rlplat' has no attribute {name!r}")
