"""Offline RL without training: datasets checked before Ray, and written only whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import TINY_BC, assert_rejected, replace, write_random_dataset


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
def test_bad_offline_input_exits_2_before_ray(case, write_yaml, tmp_path):
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
    assert_rejected(write_yaml(text), expected, tmp_path / "out")


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


def test_a_misspelt_dataset_directory_gets_a_suggestion(tmp_path):
    from rlplat.datasets.dataset import read_info
    from rlplat.errors import UserError

    (tmp_path / "cartpole_expert").mkdir()
    with pytest.raises(UserError) as raised:
        read_info(tmp_path / "cartpole_expret")
    assert f"Did you mean '{tmp_path / 'cartpole_expert'}'?" in str(raised.value)
