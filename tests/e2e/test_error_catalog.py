"""docs/errors.md is what rlplat really prints for each class of bad input."""

from __future__ import annotations

from tests.error_catalog import CASES, REPO, render, run_all


def test_every_bad_input_gets_its_documented_answer(ray_session):
    """Runs every case of the catalog with the rlplat command: one paragraph, the documented
    exit code (2 bad input, 1 run-time failure), no traceback, and docs/errors.md up to date."""
    results = run_all(address=ray_session)
    for case, code, text in results:
        assert code == case.exit, f"{case.what}: exit {code}\n{text}"
        assert text.strip(), f"{case.what}: rlplat said nothing"
        assert "Traceback" not in text and 'File "' not in text, f"{case.what}: {text}"
    assert len(results) == len(CASES)
    documented = (REPO / "docs/errors.md").read_text()
    assert render(results) == documented, (
        "docs/errors.md is out of date: python -m tests.error_catalog > docs/errors.md"
    )
