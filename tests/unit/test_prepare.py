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


def test_self_play_says_when_no_random_step_could_tell_whether_the_game_is_competitive():
    selfplay = EXPERIMENTS / "connect_four_selfplay.yaml"  # no game ends in the usual 32 steps
    told = prepare(load_experiment(selfplay, []), probe=False)
    assert not [note for note in told.notes if "multi_agent.self_play" in note]
    untold = prepare(load_experiment(selfplay, ["env.check=false"]), probe=False)
    [note] = [note for note in untold.notes if "multi_agent.self_play" in note]
    assert "did not step the env" in note and "could not be told" in note


def test_the_probe_leaves_no_thread_to_take_cpu_from_the_training_after_it():
    """APPO's learner polls its queue from a thread of its own (10,000 times a second) until it
    is shut down: the probe's learner stops with the probe."""
    import threading

    before = set(threading.enumerate())
    prepare(load_experiment(EXPERIMENTS / "cartpole_appo.yaml"))
    assert [t.name for t in set(threading.enumerate()) - before] == []
