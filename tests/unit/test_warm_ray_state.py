"""The warm local Ray's bookkeeping (rlplat.cluster.warm), without starting it: its idle time,
which directory a command uses, leases of ended processes, and a stop refused while in use."""

from __future__ import annotations

import json
import os

import pytest

from rlplat.cluster import forkserver, warm
from rlplat.errors import UserError
from rlplat.util.process import this_process


@pytest.fixture
def warm_base(tmp_path, monkeypatch):
    monkeypatch.setenv("RLPLAT_RAY_DIR", str(tmp_path / "warm"))
    monkeypatch.delenv("RLPLAT_RAY_IDLE_S", raising=False)
    return tmp_path / "warm"


@pytest.mark.parametrize("text", ["-1", "soon", "nan", "inf"])
def test_an_idle_time_that_is_not_seconds_is_refused(text, monkeypatch):
    monkeypatch.setenv("RLPLAT_RAY_IDLE_S", text)
    with pytest.raises(UserError, match="RLPLAT_RAY_IDLE_S"):
        warm.idle_seconds()


def test_zero_turns_it_off_and_the_default_is_ten_minutes(monkeypatch):
    monkeypatch.delenv("RLPLAT_RAY_IDLE_S", raising=False)
    assert warm.idle_seconds() == 600 and warm.enabled()
    assert warm.describe_idle(600) == "10 min"
    monkeypatch.setenv("RLPLAT_RAY_IDLE_S", "0")
    assert not warm.enabled()


def test_each_working_directory_has_its_own(warm_base, tmp_path):
    one, other = tmp_path / "a", tmp_path / "b"
    one.mkdir(), other.mkdir()
    assert warm.directory(one) != warm.directory(other)
    assert warm.directory(one) == warm.directory(one)
    assert warm.directory(one).parent == warm_base


def test_leases_of_ended_processes_do_not_count(warm_base):
    where = warm.directory()
    (where / warm.LEASES).mkdir(parents=True)
    mine = this_process()
    ended = {**mine, "pid": 2**22 + 7}  # above Linux's pid_max default: no such process
    (where / warm.LEASES / "mine.json").write_text(json.dumps(mine))
    (where / warm.LEASES / "ended.json").write_text(json.dumps(ended))
    assert [lease["pid"] for lease in warm.live_leases(where)] == [os.getpid()]
    assert not (where / warm.LEASES / "ended.json").exists(), "removed once seen dead"


def test_stop_is_refused_while_another_command_uses_it(warm_base):
    where = warm.directory()
    (where / warm.LEASES).mkdir(parents=True)
    head = {"address": "127.0.0.1:1", "keeper": this_process(), "since": 0.0, "idle_s": 600}
    (where / warm.HEAD).write_text(json.dumps(head))
    (where / warm.LEASES / "1.json").write_text(json.dumps(this_process(1)))
    with pytest.raises(UserError, match="in use by 1 running command"):
        warm.stop()
    assert warm.status()["address"] == "127.0.0.1:1", "still there"


def test_none_runs_where_its_keeper_ended(warm_base):
    where = warm.directory()
    where.mkdir(parents=True)
    ended = {**this_process(), "pid": 2**22 + 7}
    (where / warm.HEAD).write_text(json.dumps({"address": "x", "keeper": ended}))
    assert warm.status() is None
    assert warm.stop() is None
    assert not (where / warm.HEAD).exists()


@pytest.mark.parametrize(
    ("variables", "on"),
    [({}, True), ({"RLPLAT_WARM_IMPORTS": "0"}, False), ({"RLPLAT_RAY_IDLE_S": "0"}, False),
     ({"RLPLAT_RAY_IDLE_S": "soon"}, False)],
)  # fmt: skip
def test_the_warm_interpreter_follows_its_switch_and_the_idle_time(variables, on, monkeypatch):
    """A bad idle time turns it off here: the command itself refuses it, with its message."""
    monkeypatch.delenv("RLPLAT_WARM_IMPORTS", raising=False)
    monkeypatch.delenv("RLPLAT_RAY_IDLE_S", raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert forkserver.enabled() is on


@pytest.mark.parametrize("argv", [["rlplat"], ["rlplat", "runs"], ["rlplat", "ray", "stop"],
                                  ["rlplat", "--version"]])  # fmt: skip
def test_commands_that_import_nothing_heavy_run_in_their_own_process(argv, warm_base):
    assert forkserver.run_command(argv, entry="rlplat.cli:run_here") is None
    assert not forkserver.directory().exists(), "no warm interpreter started for them"


def test_the_shells_bookkeeping_does_not_tell_environments_apart():
    mine = {"HOME": "/root", "PYTHONHASHSEED": "0", "SHLVL": "1", "_": "/usr/bin/rlplat"}
    other = {**mine, "SHLVL": "3", "_": "/bin/env", "OLDPWD": "/tmp"}
    assert forkserver.comparable(mine) == forkserver.comparable(other)
    assert forkserver.comparable(mine) != forkserver.comparable({**mine, "PYTHONHASHSEED": "1"})


def test_a_warm_ray_directory_that_is_a_file_is_one_paragraph(tmp_path, monkeypatch):
    """RLPLAT_RAY_DIR naming a file was a NotADirectoryError traceback."""
    import pytest

    from rlplat.cluster import forkserver, warm
    from rlplat.errors import UserError

    file = tmp_path / "file"
    file.write_text("")
    monkeypatch.setenv("RLPLAT_RAY_DIR", str(file))
    with pytest.raises(UserError, match=f"RLPLAT_RAY_DIR={file}: .* is not a directory"):
        warm.base_directory()
    assert forkserver.run_command(["rlplat", "train", "x.yaml"], "rlplat.cli:run_here") is None
    monkeypatch.setenv("RLPLAT_RAY_DIR", str(tmp_path / "new" / "dir"))
    assert warm.base_directory() == tmp_path / "new" / "dir", "one that can be made is taken"
