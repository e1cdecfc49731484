"""The user's own code (``env.factory``, wrappers) comes from their project, not rlplat's install.

A name such as ``envs.corridor:Corridor`` is imported first from the current directory, then from
the directory of the file the command was given (an experiment file, a run or a checkpoint) and
the project that holds it: its nearest ancestor with a ``pyproject.toml``, ``setup.py``,
``setup.cfg`` or ``.git``. Ray's workers get the same code shipped with the job
(``runtime_env.py_modules``), so nodes without the user's checkout run it too.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def project_paths(path: Path | None = None) -> list[Path]:
    """Where user code is imported from, first match first (see the module's docstring)."""
    found = [Path.cwd().resolve()]
    if path is not None:
        path = path.expanduser().resolve()
        start = path if path.is_dir() else path.parent
        if not path.is_dir():
            found.append(start)
        root = next(
            (p for p in (start, *start.parents) if any((p / m).exists() for m in PROJECT_MARKERS)),
            None,
        )
        if root is not None:
            found.append(root)
    return list(dict.fromkeys(found))


def use_project_paths(paths: Iterable[Path]) -> None:
    """Put ``paths`` first on this process's import path, in order."""
    for path in reversed(list(paths)):
        entry = str(path)
        if entry in sys.path:
            sys.path.remove(entry)
        sys.path.insert(0, entry)
    importlib.invalidate_caches()


def project_code(modules: Iterable[str]) -> list[Path]:
    """The package directories (or module files) of the top-level ``modules`` that this process
    imports from outside the installed packages: the user's code, which Ray's workers need
    shipped."""
    installed_roots = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix)}
    shipped: list[Path] = []
    for name in dict.fromkeys(module.partition(".")[0] for module in modules):
        if name == "rlplat":
            continue
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            location = Path(list(spec.submodule_search_locations)[0])
        elif spec.origin:
            location = Path(spec.origin)
        else:
            continue
        location = location.resolve()
        installed = any(location.is_relative_to(root) for root in installed_roots) or any(
            part in ("site-packages", "dist-packages") for part in location.parts
        )
        if not installed:
            shipped.append(location)
    return shipped
