"""What a canary test of a seam (``rlplat/seams/``) checks: that a private name of Ray, RLlib or
Tune that the seam relies on is still there, with the parameters it is called with.

A failure names the seam, the name and what changed, and points at docs/upgrading.md."""

from __future__ import annotations

import inspect
from typing import Any


def _fail(seam: str, what: str) -> None:
    raise AssertionError(f"seam {seam}: {what}. See docs/upgrading.md for how to re-check a seam.")


def has(seam: str, owner: Any, name: str, *, params: tuple[str, ...] | None = None) -> Any:
    """``owner.name`` exists (a class or module member, or an attribute an instance sets in its
    ``__init__``'s source); with ``params``, it is callable and takes those parameters by name."""
    label = f"{getattr(owner, '__module__', '')}.{getattr(owner, '__qualname__', owner)}.{name}"
    if isinstance(owner, type) and not hasattr(owner, name):
        try:
            source = inspect.getsource(owner)
        except (OSError, TypeError):
            source = ""
        for base in owner.__mro__[1:]:
            try:
                source += inspect.getsource(base)
            except (OSError, TypeError):
                continue
        if f"self.{name} =" in source or f"self.{name}:" in source:
            return None
        _fail(seam, f"{label} is gone from Ray {_ray_version()}")
    if not isinstance(owner, type) and not hasattr(owner, name):
        _fail(seam, f"{label} is gone from Ray {_ray_version()}")
    member = getattr(owner, name, None)
    if params is not None:
        try:
            signature = inspect.signature(member)
        except (TypeError, ValueError):
            _fail(seam, f"{label} is no longer a function")
        missing = [p for p in params if p not in signature.parameters]
        if missing:
            _fail(seam, f"{label}{signature} no longer takes {', '.join(missing)}")
    return member


def holds(seam: str, condition: bool, what: str) -> None:
    """A behaviour the seam relies on: ``what`` says it, as it should be."""
    if not condition:
        _fail(seam, f"no longer true: {what}")


def _ray_version() -> str:
    import ray  # noqa: PLC0415 - only for the message

    return ray.__version__
