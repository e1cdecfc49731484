"""Ray's, RLlib's and Tune's private names are named in ``rlplat/seams/`` only, and every seam
there has a canary test (docs/upgrading.md)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from tests.seams_rule import seams, snake_case, touches

UNIT = Path(__file__).parent
UPGRADING = UNIT.parent.parent / "docs" / "upgrading.md"


def test_no_private_name_of_ray_is_named_outside_the_seams():
    found = touches()
    assert not found, "private names of Ray outside rlplat/seams/ (move them into a seam):\n" + (
        "\n".join(map(str, found))
    )


@pytest.mark.parametrize(
    ("area", "name", "seam"), seams(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_every_seam_has_a_docstring_a_canary_and_a_row_in_upgrading_md(area, name, seam):
    assert f"`seams/{area}.py::{name}`" in UPGRADING.read_text(), (
        f"docs/upgrading.md does not list rlplat.seams.{area}.{name}: "
        "paste `python -m tests.seams_rule --table` there"
    )
    assert inspect.getdoc(seam), f"rlplat.seams.{area}.{name} says nowhere what it stands for"
    canaries = UNIT / f"test_seams_{area}.py"
    wanted = f"def test_{snake_case(name)}("
    where = canaries.relative_to(UNIT.parent.parent)
    assert canaries.exists() and wanted in canaries.read_text(), (
        f"rlplat.seams.{area}.{name} has no canary: {wanted[4:-1]} in {where}"
    )
