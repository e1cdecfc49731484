"""``rlplat serve``: trained policies behind an HTTP endpoint, in one process or on Ray Serve
(see docs/serve.md).

``require_serve()`` imports Ray Serve and ``require_serve_http()`` the local engine's HTTP
server; both need the ``serve`` extra.
"""

from __future__ import annotations

from types import ModuleType

from rlplat.errors import UserError


def _missing(exc: ModuleNotFoundError) -> UserError:
    return UserError(
        f"rlplat serve needs the serve extra ({exc.name} is not installed): pip install "
        "'rlplat[serve]' (or pip install -e '.[serve]' in a checkout)."
    )


def require_serve_http() -> None:
    """The local engine's HTTP server (uvicorn), or a UserError saying how to install it."""
    try:
        import uvicorn  # noqa: F401, PLC0415
    except ModuleNotFoundError as exc:
        raise _missing(exc) from None


def require_serve() -> ModuleType:
    """``ray.serve``, or a UserError saying how to install what it needs."""
    try:
        # Ray Serve is an optional extra: imported on use, so training needs none of it.
        import starlette  # noqa: F401, PLC0415
        from ray import serve  # noqa: PLC0415
    except ModuleNotFoundError as exc:
        raise _missing(exc) from None
    return serve
