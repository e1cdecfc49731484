"""Classes composed from a base and mixins, once per combination."""

from __future__ import annotations

import functools


@functools.cache
def mixed(base: type, *mixins: type) -> type:
    """``base`` with ``mixins`` in front of it, the first one first in the method order.

    A mixin ``base`` already derives from is left out (``base`` itself when none is left). The
    same arguments give the same class, so a config built twice names one class."""
    added = tuple(mixin for mixin in mixins if not issubclass(base, mixin))
    if not added:
        return base
    prefix = "".join(mixin.__name__ for mixin in added)
    return type(f"{prefix}{base.__name__}", (*added, base), {"__module__": added[0].__module__})
