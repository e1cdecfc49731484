"""Every shipped experiment passes what ``rlplat train <file> --dry-run`` checks: every key, the
env built and stepped, the RLlib config (and any search) built, the module built and one update
computed on a few env steps (the probe). The suites in subfolders whose
envs start processes when built (MuJoCo's GLFW probe) are checked in their e2e tests; the
multi-agent suite (experiments/marl) is checked here."""

from __future__ import annotations

import pytest

from tests.helpers import EXPERIMENTS, assert_shipped_file_validates

SHIPPED = sorted(
    [
        *EXPERIMENTS.glob("*.yaml"),
        *EXPERIMENTS.glob("marl/*.yaml"),
        *EXPERIMENTS.glob("packages/*.yaml"),
    ]
)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_experiment_validates(path, tmp_path):
    assert_shipped_file_validates(path, tmp_path)
