"""Offline RL: datasets recorded from a policy or written from a replay memory, checked before Ray,
and BC trained from them through the same train / eval / export / report commands."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rlplat.cli import main
from tests.e2e.helpers import run_cli
from tests.helpers import EXPERIMENTS, TINY_BC, write_random_dataset


def test_plan_reserves_cpus_for_the_data_pipeline(
    ray_session, write_yaml, tmp_path, capsys, monkeypatch
):
    """Ray Data's tasks run in the trial's placement group, so the trial reserves their CPUs."""
    from rlplat import cli

    monkeypatch.setattr(cli.console, "width", 200)  # one table row per line
    data = write_random_dataset(tmp_path / "data")
    text = TINY_BC.replace("OUTPUT", str(tmp_path / "out")).replace("DATA", str(data))
    main(["plan", str(write_yaml(text)), "--address", ray_session])
    out = " ".join(capsys.readouterr().out.split())
    assert "│ 1 │ offline data pipeline │ offline_data.map_batches_kwargs │ {CPU: 1}" in out
    assert "Fits: yes" in out


def test_record_and_dataset_refuse_bad_requests(tiny_run, tmp_path, capsys):
    run_dir = Path(tiny_run.run_dir)
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")

    code, _, err = run_cli(capsys, "eval", str(run_dir), "-n", "1", "--record", str(existing))
    assert code == 2 and "already exists" in err and "never overwrites" in err
    assert (existing / "keep.txt").read_text() == "mine"

    out = tmp_path / "replay"
    code, _, err = run_cli(capsys, "dataset", str(run_dir), "--out", str(out))
    assert code == 2 and "--from-replay" in err and "--record" in err
    code, _, err = run_cli(capsys, "dataset", str(run_dir), "--from-replay", "--out", str(out))
    message = " ".join(err.split())
    assert code == 2 and "has no replay memory" in message and "DQN, SAC" in message
    assert not out.exists()
    assert "Traceback" not in err


def test_replay_memory_becomes_a_dataset_ray_data_reads(off_policy_runs, tmp_path, capsys):
    import ray.data
    from ray.rllib.utils.compression import unpack

    from rlplat.checkpoints import CheckpointInfo

    summary = off_policy_runs("pendulum_sac")
    checkpoint = Path(summary.trials[0].last_checkpoint)
    out = tmp_path / "replay"
    main(["dataset", str(checkpoint), "--from-replay", "--out", str(out)])
    info = json.loads((out / "dataset.json").read_text())
    stored = CheckpointInfo.read(checkpoint).replay_env_steps
    assert info["env_steps"] == stored > 0
    assert info["source"]["kind"] == "replay" and info["actions_normalized"] is True
    assert info["env"]["id"] == "Pendulum-v1"

    rows = ray.data.read_parquet(str(out / "data")).take_all()
    assert len(rows) == stored
    assert {"eps_id", "obs", "actions", "rewards", "new_obs", "terminateds"} <= set(rows[0])
    assert unpack(rows[0]["obs"]).shape == (3,)
    actions = np.array([row["actions"] for row in rows])
    assert np.abs(actions).max() <= 1.0  # the policy's normalized actions, as info says

    code, _, err = run_cli(capsys, "dataset", str(checkpoint), "--from-replay", "--out", str(out))
    assert code == 2 and "already exists" in err


def test_bc_learns_cartpole_from_recorded_expert_episodes(solved_cartpole, tmp_path, capsys):
    """The issue's path end to end: record greedy episodes of a solved PPO policy, train BC on
    them through Tune, then evaluate, export and report the BC run like any other."""
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    expert = tmp_path / "expert"
    main(["eval", solved_cartpole.run_dir, "-n", "10", "--record", str(expert)])
    recorded = json.loads((expert / "dataset.json").read_text())
    assert recorded["episodes"] == 10 and recorded["returns"]["mean"] >= 475
    capsys.readouterr()

    loaded = load_experiment(
        EXPERIMENTS / "cartpole_bc.yaml",
        [f"offline.input={expert}", f"output_dir={tmp_path / 'out'}", "stop.iterations=4"],
    )
    summary = train(loaded, console=Console(quiet=True))
    trial = summary.trials[0]
    assert trial.status == "finished", trial.error
    # Its returns are greedy evaluation episodes in the env (10 per iteration).
    assert trial.final_return is not None and trial.final_return > 100

    main(["eval", summary.run_dir, "-n", "10", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["returns"]["mean"] >= 450, report["returns"]

    main(["export", summary.run_dir, "--out", str(tmp_path / "onnx"), "-n", "2"])
    assert json.loads((tmp_path / "onnx" / "parity.json").read_text())["passed"]
    main(["report", summary.run_dir, "--out", str(tmp_path / "report"), "--eval-episodes", "5"])
    scored = json.loads((tmp_path / "report" / "report.json").read_text())
    assert scored
