"""What an exception raised by someone else's code says, in one line a user can act on.

An env package's bare ``assert`` gives ``AssertionError`` with no message: "failed:
AssertionError: " tells nobody anything. Here every description carries the exception's type, its
message or the source line that raised it, the frame (file:line, relative to the package's
install) and the versions of the packages in its traceback and what they require, since a
package's failure is often another's new release (an env's assert under a newer MuJoCo).
"""

from __future__ import annotations

import functools
import re
import traceback
from importlib import metadata
from pathlib import Path

MAX_PACKAGES = 6


def describe_raised(exc: BaseException, *, versions: bool = True) -> str:
    """``AssertionError at pkg/mod.py:12 (`assert x`) [pkg 1.0, dep 2.0]``, or with a message
    ``ValueError: message (at pkg/mod.py:12) [pkg 1.0]``; ``versions=False`` leaves the
    packages out (a checker's own complaint)."""
    frames = traceback.extract_tb(exc.__traceback__)
    name = type(exc).__name__
    text = str(exc).strip()
    if not frames:
        return f"{name}: {text}" if text else name
    last = frames[-1]
    where = f"{_short_path(last.filename)}:{last.lineno}"
    if text:
        described = f"{name}: {text} (at {where})"
    else:
        described = f"{name} at {where}" + (f" (`{last.line}`)" if last.line else "")
    shown = _versions([frame.filename for frame in frames]) if versions else []
    return described + (f" [{', '.join(shown)}]" if shown else "")


# The folder that holds the rlplat package: a checkout's root, where its envs/ live too.
_ROOT = Path(__file__).resolve().parents[2]


def _short_path(filename: str) -> str:
    """A file's path from its package's install folder (``gymnasium_robotics/envs/x.py``), from
    the folder holding rlplat (``envs/flaky.py`` in a checkout), from the working directory, or
    its name."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in filename:
            return filename.rsplit(marker, 1)[1]
    path = Path(filename).resolve()
    for base in (_ROOT, Path.cwd()):
        if path.is_relative_to(base):
            return str(path.relative_to(base))
    return path.name


def _versions(filenames: list[str]) -> list[str]:
    """'name version' of the installed distributions the traceback's frames belong to (rlplat's
    own left out), then of what they require; at most ``MAX_PACKAGES``."""
    owners: list[str] = []
    for filename in reversed(filenames):  # the raising frame's package first
        for distribution in _distributions_of(filename):
            if distribution not in owners and distribution != "rlplat":
                owners.append(distribution)
    required = [req for owner in owners for req in _requirements(owner) if req not in owners]
    shown: list[str] = []
    for distribution in [*owners, *dict.fromkeys(required)]:
        try:
            shown.append(f"{distribution} {metadata.version(distribution)}")
        except metadata.PackageNotFoundError:
            continue
        if len(shown) == MAX_PACKAGES:
            break
    return shown


def _distributions_of(filename: str) -> list[str]:
    for marker in ("site-packages/", "dist-packages/"):
        if marker in filename:
            top = filename.rsplit(marker, 1)[1].split("/", 1)[0].removesuffix(".py")
            return _packages_distributions().get(top, [])
    return []


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    return metadata.packages_distributions()


def _requirements(distribution: str) -> list[str]:
    """The names of a distribution's requirements without an extra or a marker this Python
    fails."""
    names = []
    for requirement in metadata.requires(distribution) or []:
        spec, _, marker = requirement.partition(";")
        if "extra" in marker or (marker and not _marker_holds(marker)):
            continue
        match = re.match(r"[A-Za-z0-9_.-]+", spec.strip())
        if match:
            names.append(match.group(0))
    return names


def _marker_holds(marker: str) -> bool:
    """A requirement's environment marker, judged for this Python (packaging is always there
    where pip is; without it, every marker holds)."""
    try:
        from packaging.markers import Marker  # noqa: PLC0415 - a light import, used on failure
    except ImportError:
        return True
    try:
        return bool(Marker(marker.strip()).evaluate())
    except Exception:  # noqa: BLE001 - a marker packaging cannot read: keep the requirement
        return True
