"""Tune's state copied into the run directory: a torn copy never replaces a whole one."""

from __future__ import annotations

import json

import pyarrow.fs


def test_a_torn_copy_of_tunes_state_never_replaces_the_saved_one(tmp_path):
    """Tune rewrites its experiment state in place while its syncer copies it into the run
    directory; a copy that read it empty or cut off must leave the complete state in place."""
    from rlplat.run.storage import atomic_filesystem

    fs = atomic_filesystem()
    staging, run_dir = tmp_path / "staging", tmp_path / "run"
    staging.mkdir()
    run_dir.mkdir()
    state = run_dir / "experiment_state-2026.json"
    state.write_text('{"trial_data": [1, 2]}')
    for torn in ("", '{"trial_data": [1,'):
        (staging / state.name).write_text(torn)
        try:  # pyarrow may swallow the error its stream's close raised
            pyarrow.fs.copy_files(str(staging), str(run_dir), destination_filesystem=fs)
        except OSError as exc:
            assert "incomplete" in str(exc)
        assert json.loads(state.read_text()) == {"trial_data": [1, 2]}
        assert [p.name for p in run_dir.iterdir()] == [state.name], "no partial file is left"
    (staging / state.name).write_text('{"trial_data": [1, 2, 3]}')
    pyarrow.fs.copy_files(str(staging), str(run_dir), destination_filesystem=fs)
    assert json.loads(state.read_text()) == {"trial_data": [1, 2, 3]}
