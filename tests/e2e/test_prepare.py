"""The prepare stage on the session's Ray: a run is checked and built once in the driver."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import torch

from rlplat.cli import main
from rlplat.experiment.load import load_experiment
from rlplat.prepare import run_spec
from tests.helpers import EXPERIMENTS

HETEROGENEOUS = EXPERIMENTS / "heterogeneous_ppo.yaml"


STAGES = (
    "_resolve_preferences",
    "_settle_name_and_seed",
    "_resolve_env",
    "_check_env_against_algorithm",
    "_resolve_global_state",
    "_build_rllib_config",
    "_probe",
    "_check_metric_paths",
    "_resolve_init_checkpoint",
    "_check_search",
    "_place",
)


@pytest.fixture
def driver_builds(monkeypatch) -> Counter:
    """Counts the env checks and RLlib config builds made in this (the driver's) process, and
    records the order in which prepare's stages ran (``stages``)."""
    counts: Counter = Counter()
    counts.stages = []  # type: ignore[attr-defined]

    def counting(name, function):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)

        return wrapper

    def recording(name, function):
        def wrapper(*args, **kwargs):
            counts.stages.append(name)  # type: ignore[attr-defined]
            return function(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(run_spec, "check_env", counting("env checks", run_spec.check_env))
    monkeypatch.setattr(
        run_spec,
        "build_algorithm_config",
        counting("RLlib builds", run_spec.build_algorithm_config),
    )
    for stage in STAGES:
        monkeypatch.setattr(run_spec, stage, recording(stage, getattr(run_spec, stage)))
    return counts


def test_plan_prepares_a_run_with_preferences_once(ray_session, driver_builds, capsys):
    main(["plan", str(HETEROGENEOUS), "--address", ray_session])
    out = capsys.readouterr().out
    assert "resources.env_runners.prefer: entry" in out and "Fits: yes" in out
    assert driver_builds == {"env checks": 1, "RLlib builds": 1}
    assert driver_builds.stages == list(STAGES), "each stage once, in the pipeline's order"


# The stages a trial runs to build its config from the driver's env: no env check, no probe.
TRIAL_STAGES = ["_settle_name_and_seed", "_resolve_global_state", "_build_rllib_config"]


@pytest.mark.parametrize(("process", "builds_here"), [("actor", 1), ("command", 2)])
def test_train_prepares_a_run_with_preferences_once(
    process, builds_here, ray_session, driver_builds, tmp_path
):
    main(
        [
            "train",
            str(HETEROGENEOUS),
            f"output_dir={tmp_path}",
            "stop.iterations=1",
            "training.train_batch_size_per_learner=256",
            "training.minibatch_size=64",
            "training.num_epochs=1",
            "resources.env_runners.envs=1",
            f"resources.driver.process={process}",
            "--address",
            ray_session,
        ]
    )
    [run_dir] = (tmp_path / "heterogeneous-ppo").iterdir()
    assert (run_dir / "summary.json").is_file()
    # Tune reserves the prepared config's resources for the trial (tune.with_resources): no
    # second env check, build or stage in the driver; the trial builds its own config once, in
    # its actor or (process: command) here, from the driver's env: it checks no env again.
    assert driver_builds == {"env checks": 1, "RLlib builds": builds_here}
    assert driver_builds.stages[: len(STAGES)] == list(STAGES)
    trial = driver_builds.stages[len(STAGES) :]  # the in-process trial's own build
    assert trial == (TRIAL_STAGES if process == "command" else [])


@pytest.mark.parametrize("name", ["cartpole_dqn", "simple_spread_maddpg"])
def test_the_probe_repeats_itself_and_leaves_the_process_generators_alone(name):
    """The same file probes to the same loss (what ``--dry-run`` prints), and the caller's
    random, numpy and torch generators and torch's determinism switch are as they were."""
    loaded = load_experiment(EXPERIMENTS / f"{name}.yaml")
    deterministic = torch.are_deterministic_algorithms_enabled()  # as earlier tests left it
    torch.use_deterministic_algorithms(False)
    torch.manual_seed(123)
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    losses = [run_spec.prepare(loaded).probe.losses for _ in range(2)]
    assert losses[0] == losses[1] and losses[0]
    assert random.getstate() == before[0]
    assert np.array_equal(np.random.get_state()[1], before[1])
    assert torch.equal(torch.get_rng_state(), before[2])
    switched = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    assert not switched
