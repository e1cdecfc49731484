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


def test_tunes_copy_writes_its_state_after_the_logs_the_state_vouches_for(tmp_path):
    """The saved state names each trial's latest checkpoint. Copied before the trial's
    result.json, a kill in between left a resumed run without the results up to that
    checkpoint: the copy into the run directory writes the state last."""
    from ray.train._internal.storage import _FilesystemSyncer

    from rlplat.run.storage import AtomicLocalHandler
    from rlplat.seams.tune import fitting

    written: list[str] = []

    class Recording(AtomicLocalHandler):
        def open_output_stream(self, path, metadata):
            written.append(path.removeprefix(f"{run_dir}/"))
            return super().open_output_stream(path, metadata)

    staging, run_dir = tmp_path / "staging", tmp_path / "run"
    for trial in range(12):
        for log in ("result.json", "progress.csv", "params.json"):
            (staging / f"trial_{trial}").mkdir(parents=True, exist_ok=True)
            (staging / f"trial_{trial}" / log).write_text("{}\n")
    (staging / "experiment_state-2026.json").write_text('{"trial_data": []}')
    run_dir.mkdir()
    with fitting():
        syncer = _FilesystemSyncer(pyarrow.fs.PyFileSystem(Recording()), sync_period=0)
        assert syncer.sync_up(str(staging), str(run_dir))
        syncer.wait()
    assert len(written) == 37 and written[-1] == "experiment_state-2026.json", written
    assert json.loads((run_dir / "experiment_state-2026.json").read_text()) == {"trial_data": []}
