"""New names beside existing ones: ``stem``, ``stem-1``, ``stem-2``, ... never an existing one."""

from __future__ import annotations

from pathlib import Path


def new_path(parent: Path, stem: str, suffix: str = "", *, make_dir: bool = False) -> Path:
    """The first of ``parent/stem<suffix>``, ``parent/stem-1<suffix>``, ... that does not exist.

    With ``make_dir`` the directory is created here: ``mkdir`` without exist_ok claims the name,
    so two processes never get the same one. A file's writer must create it exclusively itself
    (``os.link``, ``open(..., "x")``). FileExistsError when 10,000 names are taken.
    """
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(10_000):
        candidate = parent / (f"{stem}{suffix}" if n == 0 else f"{stem}-{n}{suffix}")
        if not make_dir:
            if not candidate.exists():
                return candidate
            continue
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise FileExistsError(f"no free name for {stem}{suffix} in {parent}")
