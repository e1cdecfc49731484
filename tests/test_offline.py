"""Offline RL: datasets recorded from a policy or written from a replay memory, checked before Ray,
and BC trained from them through the same train / eval / export / report commands."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlplat.cli import main
from tests.conftest import EXPERIMENTS, write_random_dataset
from tests.test_config_errors import assert_rejected, replace, run_cli

TINY_BC = """\
name: tiny-bc
algorithm: BC
seed: 0
env:
  id: CartPole-v1
offline:
  input: DATA
offline_data:
  dataset_num_iters_per_learner: 2
training:
  train_batch_size_per_learner: 64
stop:
  iterations: 1
output_dir: OUTPUT
"""


def _empty_dataset(path: Path) -> Path:
    """A dataset directory whose dataset.json says it holds nothing."""
    write_random_dataset(path, episodes=1)
    info = json.loads((path / "dataset.json").read_text())
    (path / "dataset.json").write_text(json.dumps({**info, "episodes": 0, "env_steps": 0}))
    return path


CASES = {
    # id: (edit of TINY_BC, strings the message must contain)
    "offline algorithm without data": (
        lambda t: replace(t, "offline:\n  input: DATA\n", ""),
        ["exp.yaml:2", "BC learns from recorded experience", "offline: {input: DIR}", "--record"],
    ),
    "online algorithm with data": (
        lambda t: replace(t, "algorithm: BC", "algorithm: PPO"),
        ["PPO learns by sampling its env", "did you mean algorithm: BC?", "MARWIL"],
    ),
    "dataset that does not exist": (
        lambda t: replace(t, "DATA", "NOWHERE"),
        ["offline.input", "does not exist"],
    ),
    "directory that is not a dataset": (
        lambda t: replace(t, "DATA", "NOT_A_DATASET"),
        ["offline.input", "is not an rlplat dataset", "dataset.json"],
    ),
    "empty dataset": (
        lambda t: replace(t, "DATA", "EMPTY"),
        ["offline.input", "holds no env steps"],
    ),
    "dataset of another env": (
        lambda t: replace(t, "id: CartPole-v1", "id: Acrobot-v1"),
        ["offline.input", "observation space", "'Acrobot-v1'", "same env"],
    ),
    "continuous-only algorithm on discrete actions": (
        lambda t: replace(t, "algorithm: BC", "algorithm: CQL"),
        ["exp.yaml:2", "CQL needs a continuous (Box) action space", "BC or MARWIL"],
    ),
    "RLlib's input_ beside offline.input": (
        lambda t: replace(t, "offline_data:\n", "offline_data:\n  input_: [DATA]\n"),
        ["offline_data.input_", "Did you mean offline.input?"],
    ),
    "no dataset listed": (
        lambda t: replace(t, "input: DATA", "input: []"),
        ["offline.input", "names no dataset"],
    ),
    "URI instead of a directory": (
        lambda t: replace(t, "input: DATA", "input: s3://bucket/data"),
        ["offline.input", "is a URI", "file system"],
    ),
    "Box actions recorded in the other range": (
        lambda t: replace(
            replace(t, "id: CartPole-v1", "id: Pendulum-v1"),
            "offline_data:\n",
            "env_runners:\n  normalize_actions: false\noffline_data:\n",
        ),
        ["PENDULUM_DATA", "actions_normalized: true", "env_runners.normalize_actions: true"],
    ),
    "multi-agent env": (
        lambda t: replace(
            t, "env:\n  id: CartPole-v1", "env:\n  pettingzoo: mpe2.simple_spread_v3"
        ),
        ["multi-agent", "single-agent"],
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_bad_offline_input_exits_2_before_ray(case, write_yaml, tmp_path, capsys):
    edit, expected = CASES[case]
    data = write_random_dataset(tmp_path / "data")
    pendulum = write_random_dataset(tmp_path / "pendulum", "Pendulum-v1", episodes=1)
    expected = [e.replace("PENDULUM_DATA", str(pendulum)) for e in expected]
    (tmp_path / "not-a-dataset").mkdir()
    text = (
        edit(TINY_BC)
        .replace("OUTPUT", str(tmp_path / "out"))
        .replace("NOWHERE", str(tmp_path / "nowhere"))
        .replace("NOT_A_DATASET", str(tmp_path / "not-a-dataset"))
        .replace("EMPTY", str(_empty_dataset(tmp_path / "empty")))
        .replace("DATA", str(pendulum if "Pendulum" in case or "range" in case else data))
    )
    assert_rejected(write_yaml(text), expected, capsys, tmp_path / "out")


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

    code, err = run_cli(["eval", str(run_dir), "-n", "1", "--record", str(existing)], capsys)
    assert code == 2 and "already exists" in err and "never overwrites" in err
    assert (existing / "keep.txt").read_text() == "mine"

    out = tmp_path / "replay"
    code, err = run_cli(["dataset", str(run_dir), "--out", str(out)], capsys)
    assert code == 2 and "--from-replay" in err and "--record" in err
    code, err = run_cli(["dataset", str(run_dir), "--from-replay", "--out", str(out)], capsys)
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

    code, err = run_cli(["dataset", str(checkpoint), "--from-replay", "--out", str(out)], capsys)
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


def test_an_interrupted_write_leaves_no_dataset(tmp_path, monkeypatch):
    """A dataset appears only whole: a write that fails (a full disk, a kill) leaves neither the
    directory nor its hidden staging copy."""
    import pyarrow.parquet as pq

    def disk_full(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(pq, "write_table", disk_full)
    with pytest.raises(OSError):
        write_random_dataset(tmp_path / "data")
    assert list(tmp_path.iterdir()) == []
