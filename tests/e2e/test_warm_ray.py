"""The warm local Ray: commands on one machine share the Ray the first of them started, each keeps
its own run directory, and nothing of Ray is left once it has been idle for its idle time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import (
    TINY_PPO,
    read_until_iteration,
    rlplat,
    stop_warm_rays,
    warm_keepers,
)

IDLE_S = 4


def _train(path: Path, warm_dir: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RLPLAT_RAY_DIR=str(warm_dir), RLPLAT_RAY_IDLE_S=str(IDLE_S))
    return subprocess.Popen(
        [sys.executable, "-m", "rlplat.cli", "train", str(path), "stop.iterations=2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip


def _processes() -> dict[int, tuple[int, str]]:
    """Every live process of this machine: pid -> (parent pid, name), from /proc."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, fields = stat.read_text().rsplit(")", 1)
        except OSError:
            continue
        state, ppid = fields.split()[:2]
        if state != "Z":
            table[int(stat.parent.name)] = (int(ppid), name.split("(", 1)[1])
    return table


def _descendants(pid: int) -> dict[int, str]:
    """``pid`` and every process below it: pid -> name."""
    table = _processes()
    found = {pid: table[pid][1]} if pid in table else {}
    while True:
        more = {p: name for p, (ppid, name) in table.items() if ppid in found and p not in found}
        if not more:
            return found
        found.update(more)


def _ignoring_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _two_runs_at_once(path: Path, warm_dir: Path) -> tuple[list[str], dict[int, str]]:
    """Both commands' output, and the warm Ray's processes (its keeper and Ray's own)."""
    first, second = _train(path, warm_dir), _train(path, warm_dir)
    outputs = [process.communicate(timeout=300)[0] for process in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    [keeper] = warm_keepers(warm_dir)
    return outputs, _descendants(keeper["pid"])


def test_two_commands_together_share_one_warm_ray_and_nothing_is_left_after_its_idle_time(
    tmp_path,
):
    warm_dir = tmp_path / "warm"
    path = tmp_path / "exp.yaml"
    path.write_text(TINY_PPO.replace("OUTPUT", str(tmp_path / "out")))
    try:
        outputs, ray_processes = _two_runs_at_once(path, warm_dir)
        assert {"gcs_server", "raylet"} <= set(ray_processes.values()), ray_processes

        said = [next(ln for ln in out.splitlines() if ln.startswith("Ray:")) for out in outputs]
        assert sorted("started a local Ray" in line for line in said) == [False, True], said
        assert any("joined the warm local Ray" in line for line in said), said
        printed = {
            line.split(":", 1)[1].strip()
            for out in outputs
            for line in out.splitlines()
            if line.startswith("Run directory:")
        }
        run_dirs = sorted((tmp_path / "out" / "tiny-ppo").iterdir())
        assert {str(run_dir) for run_dir in run_dirs} == printed and len(run_dirs) == 2
        for run_dir in run_dirs:
            summary = json.loads((run_dir / "summary.json").read_text())
            assert [trial["iterations"] for trial in summary["trials"]] == [2]
            assert list((run_dir / "trial_00000").glob("checkpoint_*"))
            cluster = json.loads((run_dir / "run.json").read_text())["cluster"]
            assert cluster["trial_process"] == "command"

        deadline = time.monotonic() + IDLE_S + 30
        while left := {pid: name for pid, name in ray_processes.items() if pid in _processes()}:
            assert time.monotonic() < deadline, f"still running after the idle time: {left}"
            time.sleep(0.2)
        assert warm_keepers(warm_dir) == [], "the keeper removed its address when it stopped"
    finally:
        stop_warm_rays(warm_dir)  # nothing left behind when the test fails
    status = rlplat("ray", "status", env={"RLPLAT_RAY_DIR": str(warm_dir)})
    assert status.returncode == 0 and "No warm local Ray" in status.stdout, status.stdout


def test_canary_ray_reads_token_auth_again_after_it_loaded():
    """Ray's private settings cache (``ray._raylet.Config``), which rlplat re-reads where Ray
    was imported before a warm Ray's lease set RAY_AUTH_MODE (a notebook): without it, the
    process would join the warm Ray without its token and be refused."""
    code = (
        "import os, ray\n"
        "from ray._raylet import AuthenticationMode, get_authentication_mode\n"
        "from rlplat.cluster.connect import _token_auth_settings\n"
        "assert get_authentication_mode() != AuthenticationMode.TOKEN\n"
        "os.environ['RAY_AUTH_MODE'] = 'token'\n"
        "_token_auth_settings()\n"
        "assert get_authentication_mode() == AuthenticationMode.TOKEN\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def _warm_env(warm_dir: Path) -> dict[str, str]:
    """Commands on a warm Ray of their own (a train's lease changes its environment)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, "RLPLAT_RAY_DIR": str(warm_dir), "RLPLAT_RAY_IDLE_S": "60"}


def _served(warm_dir: Path) -> list[int]:
    """The command processes the warm interpreter under ``warm_dir`` has forked so far."""
    [log] = warm_dir.glob("python-*/forkserver.log")
    return [int(line.split("process ")[1].split(":")[0])
            for line in log.read_text().splitlines() if ": rlplat " in line]


def _driver_pid(run_dir: Path) -> int:
    return json.loads((run_dir / "run.json").read_text())["drivers"][-1]["pid"]


def test_commands_run_in_the_warm_interpreter_as_in_their_own_process(
    tiny_run, ray_session, tmp_path
):
    """A first train starts a warm interpreter; later commands run in it with the same output,
    exit codes, Ctrl-C and kill -9 as in a process of their own; rlplat ray stop ends it."""
    warm_dir = tmp_path / "warm"
    env = _warm_env(warm_dir)
    path = tmp_path / "exp.yaml"
    path.write_text(TINY_PPO.replace("OUTPUT", str(tmp_path / "out")))
    try:
        first = subprocess.run([sys.executable, "-m", "rlplat.cli", "train", str(path),
                                "stop.iterations=1"], env=env, capture_output=True, text=True,
                               timeout=300)  # fmt: skip
        assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
        deadline = time.monotonic() + 180
        while "Warm interpreter" not in rlplat("ray", "status", env=env).stdout:
            assert time.monotonic() < deadline, "the warm interpreter did not start"
            time.sleep(0.5)

        evaluate = [sys.executable, "-m", "rlplat.cli", "eval", tiny_run.run_dir, "-n", "2",
                    "--json"]  # fmt: skip
        served = subprocess.run(evaluate, env=env, capture_output=True, text=True, timeout=300)
        assert served.returncode == 0, served.stderr[-2000:]
        assert len(_served(warm_dir)) == 1, "the train's environment is the next command's"
        own = subprocess.run(evaluate, env={**env, "RLPLAT_WARM_IMPORTS": "0"},
                             capture_output=True, text=True, timeout=300)  # fmt: skip
        assert json.loads(served.stdout) == json.loads(own.stdout)
        wrong = rlplat("eval", str(tmp_path / "nowhere"), env=env)
        assert wrong.returncode == 2 and "does not exist" in wrong.stderr, wrong.stderr
        assert wrong.stderr.count("\n") == 1 and "Traceback" not in wrong.stderr
        assert len(_served(warm_dir)) == 2
        slip = rlplat("eval", "--no-such-option", env=env)
        own_slip = rlplat("eval", "--no-such-option", env={**env, "RLPLAT_WARM_IMPORTS": "0"})
        assert (slip.returncode, slip.stderr) == (2, own_slip.stderr), "the same usage lines"
        assert len(_served(warm_dir)) == 3

        path.write_text(path.read_text().replace("iterations: 3", "iterations: 1000"))
        # Ctrl-C and kill -9 of the command; kill -9 of the process that runs it (the kernel's
        # out-of-memory killer), which must end the command, never start the run again. The
        # Ctrl-C goes to a command started with SIGINT ignored (as a script's `&` starts it):
        # its training loop answers it in its own process, so it must here too.
        cases = ((signal.SIGINT, 130, False), (signal.SIGKILL, -signal.SIGKILL, False),
                 (signal.SIGKILL, -signal.SIGKILL, True))  # fmt: skip
        for stop, code, of_driver in cases:
            process = subprocess.Popen(
                [sys.executable, "-m", "rlplat.cli", "train", str(path)], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                preexec_fn=_ignoring_ctrl_c if stop == signal.SIGINT else None,
            )  # fmt: skip
            run_dir, _ = read_until_iteration(process, 1)
            driver = _driver_pid(run_dir)
            assert driver != process.pid and driver in _served(warm_dir)
            runs = sorted(run_dir.parent.iterdir())
            if of_driver:
                os.kill(driver, stop)
            else:
                process.send_signal(stop)
            output = process.communicate(timeout=120)[0]
            assert process.returncode == code, output[-3000:]
            if stop == signal.SIGINT:
                assert "continue with: rlplat train --resume" in output, output[-3000:]
            if of_driver:
                assert "was killed (SIGKILL" in output, output[-3000:]
                assert sorted(run_dir.parent.iterdir()) == runs, "the run started again"
            deadline = time.monotonic() + 5
            while driver in _processes():  # kill -9 of the command ends its run at once
                assert time.monotonic() < deadline, "the command's run outlived it"
                time.sleep(0.05)

        stopped = rlplat("ray", "stop", env=env)
        assert "Stopped the warm interpreter" in stopped.stdout, stopped.stdout
        [server] = warm_keepers(warm_dir, ("forkserver.json",))
        assert server["pid"] not in _processes()
    finally:
        stop_warm_rays(warm_dir)


def test_a_warm_ray_that_stopped_answering_is_said_within_seconds(tmp_path):
    """The record's keeper lives, its Ray (the GCS at the recorded address) is gone: the next
    command says so and what to type within seconds, instead of Ray's minutes of retries."""
    warm_dir = tmp_path / "warm"
    env = {**_warm_env(warm_dir), "RLPLAT_WARM_IMPORTS": "0"}
    path = tmp_path / "exp.yaml"
    path.write_text(TINY_PPO.replace("OUTPUT", str(tmp_path / "out")))
    command = [sys.executable, "-m", "rlplat.cli", "train", str(path), "stop.iterations=1"]
    try:
        first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert first.returncode == 0, first.stderr[-2000:]
        [head] = [json.loads(p.read_text()) for p in warm_dir.glob("*/head.json")]
        below = _descendants(head["keeper"]["pid"])
        [gcs] = [pid for pid, name in below.items() if name == "gcs_server"]
        os.kill(gcs, signal.SIGKILL)
        started = time.monotonic()
        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert time.monotonic() - started < 30, "Ray's connection retries"
        assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
        assert "does not answer" in second.stderr and "rlplat ray stop --force" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        stop_warm_rays(warm_dir)


def test_a_killed_keeper_is_said_at_once(tmp_path):
    """SIGKILL of the warm Ray's keeper while a run trains: Ray ends with it and takes the
    command down; the command says why and what to type before it goes."""
    warm_dir = tmp_path / "warm"
    env = {**_warm_env(warm_dir), "RLPLAT_WARM_IMPORTS": "0"}
    path = tmp_path / "exp.yaml"
    path.write_text(TINY_PPO.replace("OUTPUT", str(tmp_path / "out")))
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "rlplat.cli", "train", str(path), "stop.iterations=1000"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        read_until_iteration(process, 1)
        [keeper] = warm_keepers(warm_dir)
        os.kill(keeper["pid"], signal.SIGKILL)
        output = process.communicate(timeout=60)[0]
        assert process.returncode != 0
        assert f"keeper (process {keeper['pid']}) has ended" in output, output[-3000:]
        assert "rlplat train --resume" in output
    finally:
        stop_warm_rays(warm_dir)
