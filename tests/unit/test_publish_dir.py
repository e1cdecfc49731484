"""Directories written whole (reports, exports, datasets): published at once, never over what
exists, and nothing left behind by a write that fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rlplat.util.paths import publish_dir


def test_a_published_directory_appears_whole_beside_an_existing_one(tmp_path):
    out = tmp_path / "cartpole"
    out.mkdir()
    (out / "kept.txt").write_text("old")
    with publish_dir(out) as draft:
        (draft.path / "policy.json").write_text("{}")
        assert not (tmp_path / "cartpole-1").exists(), "nothing is published before the end"
    assert draft.destination == tmp_path / "cartpole-1"
    assert sorted(p.name for p in draft.destination.iterdir()) == ["policy.json"]
    assert (out / "kept.txt").read_text() == "old", "an existing directory is never touched"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cartpole", "cartpole-1"], "no draft left"


def test_the_content_can_name_its_own_directory_before_it_is_published(tmp_path):
    (tmp_path / "report").mkdir()
    with publish_dir(tmp_path / "report") as draft:
        (draft.path / "report.json").write_text(str(draft.claim()))
    assert (draft.destination / "report.json").read_text() == str(tmp_path / "report-1")


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    out = tmp_path / "parent" / "data"
    with pytest.raises(OSError, match="disk full"), publish_dir(out) as draft:
        (draft.path / "part.parquet").write_text("half")
        draft.claim()
        raise OSError("disk full")
    assert list((tmp_path / "parent").iterdir()) == [], "neither the draft nor the claimed name"


def test_an_exact_name_that_exists_is_refused_and_kept(tmp_path):
    out = tmp_path / "data"
    with publish_dir(out, next_free=False) as draft:
        (draft.path / "dataset.json").write_text("first")
    with pytest.raises(FileExistsError), publish_dir(out, next_free=False) as draft:
        (draft.path / "dataset.json").write_text("second")
    assert (out / "dataset.json").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["data"]


def test_a_killed_writers_draft_is_removed_by_the_next_publish(tmp_path):
    out = tmp_path / "exported"
    with publish_dir(out) as draft:
        (draft.path / "model.onnx").write_text("whole")
    never_a_pid = Path("/proc/sys/kernel/pid_max").read_text().strip()  # pids stay below it
    killed = tmp_path / draft.path.name.replace(f"-{os.getpid()}@", f"-{never_a_pid}@")
    killed.mkdir()
    (killed / "model.onnx").write_text("half")
    with publish_dir(out) as draft:
        (draft.path / "model.onnx").write_text("again")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported", "exported-1"]


def test_a_live_writers_draft_is_kept(tmp_path):
    out = tmp_path / "exported"
    with publish_dir(out) as first:
        with publish_dir(out) as second:
            (second.path / "a").write_text("second")
        assert first.path.is_dir(), "a draft of a running process is not abandoned"
        (first.path / "a").write_text("first")
    assert (out / "a").read_text() == "second"
    assert (tmp_path / "exported-1" / "a").read_text() == "first"
