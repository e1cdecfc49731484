"""MADDPG and MASAC: short real runs (MADDPG continuous and Gumbel-softmax discrete, MASAC
continuous with one shared policy) that checkpoint, evaluate (against a random side) and export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.helpers import eval_json, export_json
from tests.helpers import MADDPG_ADVERSARY, MADDPG_SPREAD, read_results, replace


@pytest.fixture(scope="module")
def maddpg_runs(ray_session, tmp_path_factory):
    """Two short MADDPG runs: continuous simple_spread, and discrete simple_adversary with a
    random adversary; a short MASAC run on continuous simple_spread, one policy for all."""
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    runs = {}
    masac = replace(MADDPG_SPREAD, "algorithm: MADDPG", "algorithm: MASAC")
    masac = replace(masac, "policies: independent", "policies: shared")
    for name, text in (
        ("spread", MADDPG_SPREAD), ("adversary", MADDPG_ADVERSARY), ("masac", masac)
    ):
        tmp = tmp_path_factory.mktemp(name)
        path = tmp / "exp.yaml"
        path.write_text(text.replace("OUTPUT", str(tmp / "out")))
        runs[name] = train(load_experiment(path), console=Console(quiet=True))
    return runs


@pytest.mark.parametrize("name", ["spread", "adversary", "masac"])
def test_maddpg_trains_every_policy_from_aligned_joint_steps(name, maddpg_runs):
    [trial] = maddpg_runs[name].trials
    assert trial.error is None and trial.iterations == 2
    last = read_results(Path(trial.path))[-1]
    replay = last["replay_buffer"]
    assert replay["steps_stored"] >= 600 and replay["steps_not_aligned"] == 0
    trained = {
        "spread": ["agent_0", "agent_1", "agent_2"], "adversary": ["good"], "masac": ["shared"]
    }[name]
    learners = last["learners"]
    for policy in trained:
        assert np.isfinite(learners[policy]["qf_loss"]) and np.isfinite(
            learners[policy]["policy_loss"]
        )
    assert "adversary" not in learners, "a random policy is never trained"
    if name == "masac":
        assert learners["shared"]["alpha_value"] < 1.0, "the temperature is learned"


def test_maddpg_checkpoint_evaluates_with_a_side_swapped_for_random(maddpg_runs, capsys):
    run_dir = maddpg_runs["adversary"].run_dir
    trained = eval_json(capsys, run_dir, "-n", "2")
    assert set(trained["policy_returns"]) == {"adversary", "good"}
    swapped = eval_json(capsys, run_dir, "-n", "2", "--random", "good")
    assert swapped["random"] == ["good"]
    assert swapped["per_episode"] != trained["per_episode"], "the good agents acted otherwise"


@pytest.mark.parametrize("name", ["spread", "masac"])
def test_maddpg_export_passes_parity(name, maddpg_runs, tmp_path, capsys):
    report = export_json(capsys, maddpg_runs[name].run_dir, "--out", tmp_path / "x", "-n", "2")
    assert report["parity"]["passed"] and report["parity"]["compared_actions"] > 0
    manifest = json.loads((Path(report["directory"]) / "policy.json").read_text())
    policies = {"spread": {"agent_0", "agent_1", "agent_2"}, "masac": {"shared"}}[name]
    assert set(manifest["policies"]) == policies
