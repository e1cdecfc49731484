"""Versions of the packages that shape a run's results (``run.json``, ``rlplat --version``)."""

from __future__ import annotations

import platform
from importlib import metadata

VERSIONED_PACKAGES = (
    "rlplat",
    "ray",
    "torch",
    "gymnasium",
    "pettingzoo",
    "supersuit",
    "numpy",
    "pydantic",
)


def versions() -> dict[str, str]:
    """Versions of Python and of every package that shapes a run's results."""
    found = {"python": platform.python_version()}
    for package in VERSIONED_PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found
