"""docs/architecture.md's module index: every module of rlplat with the first paragraph of its
docstring. ``python -m tests.module_index`` prints it; a unit test checks that the document lists
every module there is."""

from __future__ import annotations

import ast
from pathlib import Path

RLPLAT = Path(__file__).parents[1] / "rlplat"  # read as files: importing rlplat loads its CLI
START = "<!-- module index: python -m tests.module_index -->"
END = "<!-- end of module index -->"


def modules() -> list[tuple[str, str]]:
    """(path under rlplat/, first paragraph of its docstring) for every module, in path order."""
    found = []
    for path in sorted(RLPLAT.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if path.name == "__init__.py" and not doc:
            continue
        summary = " ".join(doc.split("\n\n")[0].split()).replace("|", "\\|")
        found.append((str(path.relative_to(RLPLAT.parent)), summary))
    return found


def index() -> str:
    rows = ["| module | what it holds |", "|---|---|"]
    rows += [f"| `{path}` | {summary} |" for path, summary in modules()]
    return "\n".join([START, *rows, END])


if __name__ == "__main__":
    print(index())
