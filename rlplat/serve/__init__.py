"""``rlplat serve``: trained policies behind an HTTP endpoint on Ray Serve (see docs/serve.md).

``require_serve()`` imports Ray Serve, which needs the ``serve`` extra.
"""

from __future__ import annotations

from types import ModuleType

from rlplat.errors import UserError


def require_serve() -> ModuleType:
    """``ray.serve``, or a UserError saying how to install what it needs."""
    try:
        # Ray Serve is an optional extra: imported on use, so training needs none of it.
        import starlette  # noqa: F401, PLC0415
        from ray import serve  # noqa: PLC0415
    except ModuleNotFoundError as exc:
        raise UserError(
            f"rlplat serve needs Ray Serve ({exc.name} is not installed): pip install "
            "'rlplat[serve]' (or pip install -e '.[serve]' in a checkout)."
        ) from None
    return serve
