"""The prepare stage: a run is checked and built once, then never changed."""

from __future__ import annotations

import dataclasses

import pytest

from rlplat.experiment.load import load_experiment
from rlplat.prepare import prepare
from tests.helpers import EXPERIMENTS


def test_the_prepared_run_is_final_and_leaves_the_loaded_experiment_alone():
    loaded = load_experiment(
        EXPERIMENTS / "two_step_qmix.yaml", ["seed=null", "init.checkpoint=null"]
    )
    before = loaded.experiment.model_dump()
    run = prepare(loaded)
    assert loaded.experiment.model_dump() == before, "preparing changed the loaded experiment"
    assert run.experiment.seed is not None  # the seed actually used is recorded
    assert run.experiment.training["global_state"] == "env"  # the team view's resolved state
    assert run.resolved()["seed"] == run.experiment.seed
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.experiment = loaded.experiment  # type: ignore[misc]
