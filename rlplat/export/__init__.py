"""``rlplat export``: a trained policy as ONNX graphs with a manifest and a parity certificate.

``load_exporter()`` imports the exporter, which needs the ``export`` extra (onnx, onnxruntime).
"""

from __future__ import annotations

from types import ModuleType

from rlplat.errors import UserError


def load_exporter() -> ModuleType:
    """``rlplat.export.export``, or a UserError saying how to install what it needs."""
    try:
        # onnx is an optional extra: imported on use, so training needs none of it.
        from rlplat.export import export  # noqa: PLC0415
    except ModuleNotFoundError as exc:
        if exc.name not in ("onnx", "onnxruntime"):
            raise
        raise UserError(
            f"rlplat export needs {exc.name}, which is not installed: pip install "
            "'rlplat[export]' (or pip install -e '.[export]' in a checkout)."
        ) from None
    return export
