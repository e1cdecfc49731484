"""A full or read-only disk under the run directory: a clear error, nothing earlier lost, and the
run continues once the disk is fixed. Runs on a small tmpfs (needs permission to mount one)."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.fs
import pytest

from rlplat.checkpoints import is_complete, trials_in
from rlplat.run.run_dir import is_loop_run
from rlplat.seams.tune import resume_points
from tests.e2e.helpers import run_cli
from tests.helpers import iterations_logged, launch, read_until_iteration

DISK_MB = 32  # a checkpoint of the run below takes 1.8 MB


@pytest.fixture
def small_disk(tmp_path: Path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


def fill(disk: Path) -> Path:
    """Write a file until the disk has no space left."""
    ballast = disk / "ballast"
    # Unbuffered: closing the file must not try again to write what did not fit.
    with open(ballast, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return ballast


def remount(disk: Path, mode: str) -> None:
    """Remount ``disk`` read-only ("ro") or writable ("rw"). Turning read-only fails while a
    file on it is open for writing (Tune copies the run's files there about once a second), so
    that is tried again for up to 10 seconds."""
    deadline = time.monotonic() + 10
    while True:
        done = subprocess.run(["mount", "-o", f"remount,{mode}", str(disk)], capture_output=True)
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"mount -o remount,{mode} {disk}: {done.stderr.decode()}")
        time.sleep(0.05)


def test_a_failed_write_leaves_the_previous_file(small_disk, tmp_path):
    """Tune copies files into the run directory through this filesystem: a copy the disk cannot
    hold raises the OS error and leaves the old file whole, with no temporary file behind."""
    from rlplat.run.storage import atomic_filesystem

    source = tmp_path / "source"
    source.mkdir()
    (source / "state.bin").write_bytes(os.urandom((DISK_MB + 1) * 2**20))
    (small_disk / "state.bin").write_bytes(b"previous")
    with pytest.raises(OSError) as raised:
        pyarrow.fs.copy_files(
            str(source), str(small_disk), destination_filesystem=atomic_filesystem()
        )
    assert raised.value.errno == errno.ENOSPC
    assert sorted(p.name for p in small_disk.iterdir()) == ["state.bin"]
    assert (small_disk / "state.bin").read_bytes() == b"previous"


def resumable_points(run_dir: Path) -> list | dict | None:
    """What a resume would continue from: a loop run's complete checkpoints, Tune's saved ones."""
    return trials_in(run_dir) if is_loop_run(run_dir) else resume_points(run_dir)


TRAIN = """\
name: disk
algorithm: PPO
seed: 2
env: {id: CartPole-v1}
training: {train_batch_size_per_learner: 256, minibatch_size: 128, num_epochs: 1}
rl_module: {model_config: {fcnet_hiddens: [256, 256]}}   # RLlib's: iterations slow enough to fail
resources:
  env_runners: {count: 0, envs: 1}
stop: {iterations: ITERATIONS}
checkpoint: {every: 1, keep: 2}
evaluation: {evaluation_interval: null}   # the disk is under test, not the policy
output_dir: OUTPUT
"""


@pytest.mark.parametrize("failure", ["full", "read-only"])
def test_run_stopped_by_its_disk_resumes_once_fixed(failure, small_disk, ray_session, write_yaml):
    """The disk fills up (or turns read-only) mid-run: exit 1 with one paragraph that names the
    OS error, the checkpoint the run continues from and the command to continue; that checkpoint
    is complete; once the disk is fixed ``--resume --retry-errored`` finishes the run with each
    iteration logged once (shown for the full disk: the resume does not depend on the error).
    The full disk stops rlplat's own loop (the trial in the command), the read-only one a trial
    on Tune: a disk with files open for writing (the loop's TensorBoard file) cannot be turned
    read-only by a remount, and Tune writes them in a staging directory elsewhere."""
    # An iteration takes ~0.15 s on an idle 2-core machine: 12 finished in 2 s, before the disk
    # failed (the wait for a checkpoint to resume from below takes up to a second); 40 leave the
    # run seconds (and the resume's iterations after the failure cost the test as many).
    iterations = 40
    text = TRAIN.replace("ITERATIONS", str(iterations)).replace("OUTPUT", str(small_disk))
    if failure == "read-only":
        text = text.replace("resources:\n", "resources:\n  driver: {process: actor}\n")
    process = launch([str(write_yaml(text))], ray_session)
    run_dir, lines = read_until_iteration(process, 4)
    deadline = time.monotonic() + 30
    while not resumable_points(run_dir) and time.monotonic() < deadline:
        time.sleep(0.1)  # Tune saves the checkpoint to resume from about once a second
    if failure == "full":
        ballast = fill(small_disk)
    else:
        remount(small_disk, "ro")
    lines += process.stdout.readlines()
    process.wait(timeout=120)
    output = "".join(lines)
    if failure == "full":
        ballast.unlink()
    else:
        remount(small_disk, "rw")

    assert process.returncode == 1, output[-3000:]
    reason = "No space left on device" if failure == "full" else "Read-only file system"
    assert "error: " in output, output[-3000:]
    message = output[output.index("error: ") :]
    assert f"writing the run directory {run_dir} failed: {reason}" in message
    assert f"rlplat train --resume {run_dir} --retry-errored" in message
    assert "Traceback" not in output
    [trial_dir] = run_dir.glob("trial_*")
    point = re.search(r"continues from (checkpoint_\d+) \(iteration (\d+)", message)
    assert point, output[-3000:]
    assert is_complete(trial_dir / point.group(1))
    assert not list(run_dir.rglob("*.partial")), "no half-written file is left"
    if failure != "full":
        return

    resumed = subprocess.run(
        [sys.executable, "-m", "rlplat.cli", "train", "--address", ray_session]
        + ["--resume", str(run_dir), "--retry-errored"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"continues from {point.group(1)} (iteration {point.group(2)}," in resumed.stdout
    summary = json.loads((run_dir / "summary.json").read_text())["trials"][0]
    assert summary["iterations"] == iterations
    assert iterations_logged(trial_dir) == list(range(1, iterations + 1)), resumed.stdout


def test_an_export_onto_a_full_disk_says_so_and_keeps_the_one_before(
    small_disk, tiny_run, capsys
):
    out = small_disk / "exported"
    code, _, err = run_cli(capsys, "export", tiny_run.run_dir, "--out", out, "--no-verify")
    assert code == 0, err
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    ballast = fill(small_disk)
    try:
        code, _, err = run_cli(capsys, "export", tiny_run.run_dir, "--out", out, "--no-verify")
    finally:
        ballast.unlink()
    assert code == 1, err
    assert "No space left on device" in err and "Nothing was published" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before, "the old export intact"
    assert sorted(p.name for p in small_disk.iterdir()) == ["exported"], "no draft, no new name"
