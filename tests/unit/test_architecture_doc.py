"""docs/architecture.md names every module of rlplat where it lives."""

from __future__ import annotations

from pathlib import Path

from tests.module_index import END, START, modules

ARCHITECTURE = Path(__file__).parents[2] / "docs" / "architecture.md"


def test_the_module_index_lists_every_module_and_no_other():
    text = ARCHITECTURE.read_text()
    assert START in text and END in text, "docs/architecture.md has lost its module index"
    block = text[text.index(START) : text.index(END)]
    listed = {line.split("`")[1] for line in block.splitlines() if line.startswith("| `")}
    present = {path for path, _ in modules()}
    assert listed == present, (
        f"docs/architecture.md's module index is stale (missing {sorted(present - listed)}, "
        f"gone {sorted(listed - present)}): paste `python -m tests.module_index` there"
    )
