"""docs/architecture.md names every module of rlplat where it lives."""

from __future__ import annotations

import re
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


def test_the_guide_names_every_file_outside_its_package_that_an_algorithm_touches():
    """"A new algorithm" lists the files to touch: every rlplat module outside
    ``rlplat/algorithms/`` (where algorithms reuse each other's pieces) that names one of
    rlplat's own algorithms' modules, and the registry, is among them."""
    from rlplat.algorithms.registry import algorithm_records

    text = ARCHITECTURE.read_text()
    section = text[text.index("- **A new algorithm**") : text.index("- **A new env suite**")]
    named = set(re.findall(r"`([\w/]+\.py)(?:::\w+)?`", section))
    package = ARCHITECTURE.parents[1] / "rlplat"
    sources = {
        path.relative_to(package).as_posix(): path.read_text()
        for path in package.rglob("*.py")
        if path.parent.name != "algorithms" and "algorithms/" not in path.as_posix()
    }
    sources["algorithms/registry.py"] = (package / "algorithms" / "registry.py").read_text()
    for record in algorithm_records():
        if record.import_path is None:
            continue
        module = record.import_path.split(":")[0]
        pattern = re.compile(re.escape(module) + r"\b")
        touching = {path for path, source in sources.items() if pattern.search(source)}
        assert touching, record.name
        assert touching <= named, (record.name, sorted(touching - named))
