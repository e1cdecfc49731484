"""Every shipped experiment passes what ``rlplat train <file> --dry-run`` checks: every key, the
env built and stepped, the RLlib config (and any search) built."""

from __future__ import annotations

import pytest
import yaml

from rlplat.experiment.load import load_experiment
from rlplat.experiment.yaml_io import dump_yaml
from rlplat.prepare import prepare
from rlplat.util.project import project_paths, use_project_paths
from tests.helpers import EXPERIMENTS, write_random_dataset


@pytest.mark.parametrize("path", sorted(EXPERIMENTS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_experiment_validates(path, tmp_path):
    """An offline one against a dataset of its env (its own data directory is made by the
    commands in its header)."""
    spec = yaml.safe_load(path.read_text())
    extra = []
    if "offline" in spec:
        data = write_random_dataset(tmp_path / path.stem, spec["env"]["id"], episodes=1)
        extra = [f"offline.input={data}"]
    use_project_paths(project_paths(path))
    run = prepare(load_experiment(path, extra))
    resolved = yaml.safe_load(dump_yaml(run.resolved()))  # what --dry-run prints
    assert resolved["name"] == spec["name"] and resolved["algorithm"] == spec["algorithm"]
