"""``rlplat export``'s options (light: read when the CLI starts, without torch or onnx)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlplat.checkpoints import last_option
from rlplat.util.options import option

DEFAULT_TOLERANCE = 1e-4


@dataclass
class ExportOptions:
    """Where a policy is exported and how its parity is certified; each field is an option of
    ``rlplat export``."""

    out: Path | None = option(  # default: exported/<experiment name>
        None,
        help="Output directory (default exported/<experiment name>); an existing one is "
        "kept and the export gets a new sibling name.",
    )
    episodes: int = option(
        10, flags=("--episodes", "-n"), help="Seeded episodes of the parity check."
    )
    seed: int = option(0, help="Seed of the first parity episode.")
    tolerance: float = option(  # continuous actions agree within this
        DEFAULT_TOLERANCE, help="Largest difference at which two continuous actions agree."
    )
    min_agreement: float = option(
        1.0, help="Fraction of visited observations whose actions must agree (1: all)."
    )
    verify: bool = option(
        True,
        flags=("--verify/--no-verify",),
        help="Play the parity episodes (--no-verify: no certificate; the manifest says so).",
    )
    last: bool = last_option()
