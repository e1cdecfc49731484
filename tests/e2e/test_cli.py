"""The installed ``rlplat`` command end to end, and a real TensorBoard server on its output."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from rlplat.util.timings import STAGES
from tests.helpers import EXPERIMENTS, TINY_PPO, free_port, replace, rlplat, rlplat_timed


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """``rlplat train --timings`` in a subprocess, as README runs it: on the warm local Ray it
    starts (in the session's directory, stopped at the session's end). Returns the process,
    the experiment directory and the seconds from the command's start until it printed its
    timings (the interpreter's exit after them, seconds on a loaded machine, is not theirs)."""
    tmp = tmp_path_factory.mktemp("cli")
    path = tmp / "exp.yaml"
    path.write_text(TINY_PPO.replace("OUTPUT", str(tmp / "out")))
    overrides = ["stop.iterations=2", "resources.env_runners.count=1"]  # a remote env runner
    proc, printed_at = rlplat_timed(
        ["train", str(path), *overrides, "--timings"], "Where the command's time went",
        unset=("RAY_ADDRESS",),
    )
    return proc, tmp / "out" / "tiny-ppo", printed_at


def test_cli_train_end_to_end(cli_run):
    proc, experiment_dir, _ = cli_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    [run_dir] = list(experiment_dir.iterdir())
    assert f"Run directory: {run_dir}" in proc.stdout
    assert "trial_00000 | iter    2 |" in proc.stdout, "a progress line per iteration"
    assert "best checkpoint:" in proc.stdout and "tensorboard --logdir" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "WARNING" not in proc.stdout + proc.stderr, "Ray's log noise stays hidden"
    assert "core_worker.cc" not in proc.stdout + proc.stderr, "nothing failed: no E line either"
    assert list((run_dir / "trial_00000").glob("checkpoint_*"))


def test_train_timings_cover_the_command(cli_run):
    """--timings prints each stage and run.json keeps them; they cover the command's wall time,
    joining Ray (the warm local one, which this command starts) and the end included."""
    proc, experiment_dir, wall = cli_run
    assert "Where the command's time went" in proc.stdout
    [run_dir] = list(experiment_dir.iterdir())
    timings = json.loads((run_dir / "run.json").read_text())["drivers"][-1]["timings"]
    stages = timings["stages_s"]
    assert list(stages) == list(STAGES)
    assert all(stages[stage] > 0 for stage in ("imports", "ray_start", "trial_start", "training"))
    # Uncounted, it would be ~0.01 s; counted, 0.25-1.5 s here.
    assert stages["shutdown"] > 0.1, "Tune's last save, the summary and leaving Ray are counted"
    # Counted from the process's start up to the timings' writing, which is what the test saw
    # (less the fork and the pipe's latency: ~0.1 s; an uncounted Ray start would be 5 s or more).
    # The start is read in 10 ms clock ticks, floored, and the total is rounded to 0.01 s: it may
    # pass the test's wall by up to 0.015 s (CI once saw 22.11 against 22.1096).
    assert wall - max(2.0, 0.1 * wall) <= timings["total_s"] <= wall + 0.02


def test_cli_bad_input_exit_code_in_a_subprocess(write_yaml):
    path = write_yaml(TINY_PPO.replace("algorithm: PPO", "algorithm: PPOO"))
    proc = rlplat("train", str(path))
    assert proc.returncode == 2
    assert "Did you mean 'PPO'?" in proc.stderr and "Traceback" not in proc.stderr


def test_shipped_experiments_validate():
    """``rlplat train <file> --dry-run`` in a fresh process says the file is valid and prints
    the resolved experiment (every shipped file's checks: tests/unit/test_experiments.py)."""
    path = EXPERIMENTS / "cartpole_ppo.yaml"
    proc = rlplat("train", str(path), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert f"# {path} is valid:" in proc.stdout
    assert "algorithm: PPO" in proc.stdout and "Traceback" not in proc.stderr


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def test_tensorboard_server_serves_env_step_scalars(cli_run):
    """A real ``tensorboard`` process reads the run; scalars come back over its HTTP API."""
    _, experiment_dir, _ = cli_run
    [run_dir] = list(experiment_dir.iterdir())
    trial_dir = run_dir / "trial_00000"
    env_steps = [
        int(json.loads(line)["num_env_steps_sampled_lifetime"])
        for line in (trial_dir / "result.json").read_text().splitlines()
    ]
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(experiment_dir),
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        run = f"{run_dir.name}/trial_00000"
        deadline = time.monotonic() + 60
        while True:
            try:
                if run in get_json(f"{base}/data/runs"):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "TensorBoard did not list the run within 60 s"
            time.sleep(0.5)
        query = urllib.parse.urlencode({"run": run, "tag": "loss/policy"})
        points = get_json(f"{base}/data/plugin/scalars/scalars?{query}")
        assert [int(step) for _, step, _ in points] == env_steps
        tags = get_json(f"{base}/data/plugin/scalars/tags")[run]
        assert {"perf/env_steps_per_s", "policy/entropy", "train/lr"} <= set(tags)
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--bogus"], "No such option: --bogus"),
        (["train", "experiments/cartpole_ppo.yaml", "--bogus"], "No such option: --bogus"),
        (["trian", "x.yaml"], "Did you mean 'train'?"),
        (["eval", "checkpoints", "-n", "abc"], "Invalid value for '--episodes'"),
        (["eval"], "Missing argument"),
    ],
)
def test_cli_usage_slips_exit_2_with_clicks_message(args, says):
    proc = rlplat(*args)
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr
    assert "Usage: " in proc.stderr and "Traceback" not in proc.stdout + proc.stderr


def test_version_names_the_packages_that_shape_a_run():
    proc = rlplat("--version")
    assert proc.returncode == 0, proc.stderr
    for package in ("rlplat 0.", "ray 2.60", "torch 2.", "gymnasium 1.", "pettingzoo 1."):
        assert package in proc.stdout


def test_debug_shows_the_traceback_under_the_paragraph_and_keeps_exit_code_2(
    write_yaml, capsys
):
    from rlplat.cli import main

    kwargs = "id: CartPole-v1\n  kwargs: {nope: 1}"
    path = write_yaml(replace(TINY_PPO, "id: CartPole-v1", kwargs))
    with pytest.raises(SystemExit) as exit_:
        main(["train", str(path), "--dry-run", "--debug"])  # --dry-run: no warm Ray left behind
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    # the env's own TypeError (which the paragraph stands for), then rlplat's ConfigError
    assert "Traceback" in err and "TypeError" in err and "ConfigError" in err
    assert "nope" in err.rsplit("ConfigError", 1)[1]


@pytest.mark.parametrize(
    "command",
    [
        ["train", "nope.yaml"],
        ["eval", "nope"],
        ["export", "nope"],
        ["report", "nope"],
        ["serve", "nope"],
    ],
)
def test_a_missing_path_is_refused_before_rllib_loads(command, tmp_path):
    script = (
        "import sys\nfrom rlplat.cli import main\n"
        f"try:\n    main({[*command[:1], str(tmp_path / command[1])]!r})\n"
        "except SystemExit as exc:\n    print(exc.code, 'ray.rllib' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.stdout.split() == ["2", "False"], proc.stdout + proc.stderr
    assert str(tmp_path / command[1]) in proc.stderr
