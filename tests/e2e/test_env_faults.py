"""A user's env that misbehaves only while training: failures RLlib's env runners swallow stop
the trial with the env's own error, remote env runners included."""

from __future__ import annotations

import os
import re
import signal
import time

from rich.console import Console

from rlplat.experiment.load import load_experiment
from rlplat.run.launch import train
from tests.helpers import TINY_PPO, launch, read_until_iteration, replace, rest_of_output


def test_an_env_failing_only_in_remote_env_runners_stops_the_trial_with_its_error(
    ray_session, write_yaml, tmp_path
):
    """The env passes the check before Ray (it fails only inside Ray actors); its remote env
    runner fails on every step. RLlib would carry on without the runner's samples forever; the
    trial stops after the runner's five restarts (each a new process: about 10 s each on 2 busy
    cores), naming the env's error, well before its 1,000 iterations, and is not restarted as a
    trial whose node was lost would be."""
    text = replace(
        TINY_PPO,
        "  id: CartPole-v1\n",
        "  factory: envs.flaky:FlakyCartPole\n  kwargs: {crash_in_ray_actors: true}\n",
    )
    text = replace(text, "env_runners: {count: 0}", "env_runners: {count: 1}")
    text = replace(text, "iterations: 3", "iterations: 1000")
    text += "fault_tolerance: {delay_between_env_runner_restarts_s: 1}\n"  # no 10 s waits
    loaded = load_experiment(write_yaml(text.replace("OUTPUT", str(tmp_path / "out"))))
    started = time.monotonic()
    summary = train(loaded, console=Console(quiet=True))
    elapsed = time.monotonic() - started
    [trial] = summary.trials
    assert trial.status == "error", trial
    assert "failed 5 times in a row without finishing an episode" in trial.error
    assert "SimulatorCrash: the simulator crashed in a Ray actor" in trial.error
    assert trial.restarts == 0, "an env that fails every time is its own error, not a lost node"
    assert elapsed < 180, f"stopped after {elapsed:.0f} s"


def test_a_stuck_iteration_gets_a_watchdog_warning_and_ctrl_c_stops_at_once(
    ray_session, write_yaml, tmp_path
):
    """The env deadlocks in the second iteration: after watchdog_s the terminal says so, and a
    single Ctrl-C then ends the run (exit 130) instead of waiting for an iteration that never
    ends. One env of 256 steps an iteration hangs at its 300th step, so the watchdog's first
    word after iteration 1 is about the stuck iteration (on a loaded machine a slow iteration
    before it could have drawn the word, and the Ctrl-C then waited for the stuck one)."""
    text = replace(
        TINY_PPO,
        "  id: CartPole-v1\n",
        "  factory: envs.flaky:FlakyCartPole\n  kwargs: {hang_at_step: 300}\n",
    )
    text = replace(text, "env_runners: {count: 0}", "env_runners: {count: 0, envs: 1}")
    text = replace(text, "iterations: 3", "iterations: 100") + "watchdog_s: 3\n"
    text += "evaluation: {evaluation_interval: null}\n"  # greedy episodes would hang too
    process = launch([str(write_yaml(text.replace("OUTPUT", str(tmp_path / "out"))))], ray_session)
    _, lines = read_until_iteration(process, 1)
    for line in process.stdout:
        lines.append(line)
        if line.startswith("watchdog:"):
            break
    waited = re.search(r"has been in one iteration for (\d+) s", "".join(lines))
    assert waited and 3 <= int(waited.group(1)) <= 10, "".join(lines)  # it looks every 0.25 s
    os.killpg(process.pid, signal.SIGINT)
    output = rest_of_output(process, 90)
    assert process.returncode == 130, output[-3000:]
    assert "Stopping now" in output and "None" not in output
