"""What the tests share: small experiment files, the checks rlplat makes before Ray starts, the
``rlplat`` command in a subprocess, and readers of a run's files.

Nothing here starts Ray or trains when imported or called from a unit test (lint-imports checks
that ``tests.unit`` imports nothing that starts Ray); the in-process CLI and training helpers of
the end-to-end tests are in ``tests/e2e/helpers.py``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"

TINY_PPO = """\
name: tiny-ppo
algorithm: PPO
seed: 3
env:
  id: CartPole-v1
training:
  train_batch_size_per_learner: 256
  minibatch_size: 64
  num_epochs: 2
resources:
  env_runners: {count: 0}
stop:
  iterations: 3
checkpoint:
  every: 1
  keep: 2
output_dir: OUTPUT
"""

CORRIDOR_LSTM = """\
name: corridor-lstm
algorithm: PPO
seed: 1
env:
  factory: envs.corridor:Corridor
  kwargs: {length: 5, max_steps: 20}
training: {train_batch_size_per_learner: 200, minibatch_size: 50, num_epochs: 2}
rl_module:
  model_config: {use_lstm: true, lstm_cell_size: 16, max_seq_len: 10}
resources:
  env_runners: {count: 0}
stop: {iterations: 2}
output_dir: OUTPUT
"""

SPREAD = """\
name: tiny-spread
algorithm: PPO
seed: 1
env:
  pettingzoo: mpe2.simple_spread_v3
  kwargs: {N: 3, max_cycles: 25}
multi_agent:
  policies: shared
training:
  train_batch_size_per_learner: 200
  minibatch_size: 100
  num_epochs: 1
resources:
  env_runners: {count: 0}
stop:
  iterations: 1
checkpoint: {every: 1}
output_dir: OUTPUT
"""

# Behaviour cloning on a CartPole dataset (DATA: its directory).
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

# A PPO search on the corridor: a grid over its length x 2 samples of lr.
TINY_SEARCH = """\
name: tiny-search
algorithm: PPO
seed: 3
env:
  factory: envs.corridor:Corridor
  kwargs:
    length: {grid: [4, 7]}
training:
  lr: {loguniform: [1.0e-4, 1.0e-2]}
  train_batch_size_per_learner: 128
  minibatch_size: 64
  num_epochs: 1
rl_module: {model_config: {fcnet_hiddens: [256, 256]}}   # RLlib's, as these tests were timed
resources:
  env_runners: {count: 0, envs: 1}
stop:
  iterations: 3
checkpoint: {every: 1, keep: 1}
tune:
  num_samples: 2
output_dir: OUTPUT
"""


# A conditional choice: each trial's optimizer is Adam with its learning rate, or SGD with its
# learning rate and momentum.
OPTIMIZER_CHOICE = """\
  optimizer:
    choice:
      - {type: adam, lr: {loguniform: [1.0e-4, 1.0e-2]}}
      - {type: sgd, lr: {loguniform: [1.0e-3, 1.0e-1]}, momentum: {uniform: [0.5, 0.99]}}"""


def conditional_search(searcher: str, samples: int) -> str:
    """TINY_SEARCH with OPTIMIZER_CHOICE in place of its learning rate and a fixed corridor:
    ``samples`` trials drawn by ``searcher``."""
    text = replace(TINY_SEARCH, "{grid: [4, 7]}", "5")
    text = replace(text, "  lr: {loguniform: [1.0e-4, 1.0e-2]}", OPTIMIZER_CHOICE)
    return replace(text, "num_samples: 2", f"num_samples: {samples}\n  searcher: {searcher}")


def assert_one_branch(optimizer: dict) -> None:
    """``optimizer`` is one branch of OPTIMIZER_CHOICE with its own keys and values in its own
    ranges: Adam with lr, or SGD with lr and momentum."""
    if optimizer["type"] == "sgd":
        assert set(optimizer) == {"type", "lr", "momentum"}, optimizer
        assert 1e-3 <= optimizer["lr"] <= 1e-1 and 0.5 <= optimizer["momentum"] <= 0.99
    else:
        assert optimizer["type"] == "adam" and set(optimizer) == {"type", "lr"}, optimizer
        assert 1e-4 <= optimizer["lr"] <= 1e-2


# PPO on simple_adversary: a policy per team, only one of them trained.
MULTI_AGENT_ADVERSARY = """\
name: tiny-adversary
algorithm: PPO
seed: 2
env:
  pettingzoo: mpe2.simple_adversary_v3
  kwargs: {N: 2, max_cycles: 25}
multi_agent:
  policies: {"adversary_*": adversary, "agent_*": good}
  train: [good]
  overrides: {good: {lr: 0.001}}
training:
  lr: 0.0003
  train_batch_size_per_learner: 200
  minibatch_size: 100
  num_epochs: 2
resources:
  env_runners: {count: 0}
stop:
  iterations: 2
checkpoint: {every: 1, keep: null}
output_dir: OUTPUT
"""

CONNECT_FOUR = """\
name: tiny-connect-four
algorithm: PPO
seed: 4
env:
  pettingzoo: pettingzoo.classic.connect_four_v3
multi_agent:
  policies: {player_0: learner, player_1: opponent}
  random: [opponent]
training:
  train_batch_size_per_learner: 200
  minibatch_size: 100
  num_epochs: 1
resources:
  env_runners: {count: 0}
stop:
  iterations: 1
checkpoint: {every: 1}
output_dir: OUTPUT
"""

# MADDPG on continuous simple_spread, and (MADDPG_ADVERSARY) on simple_adversary with discrete
# actions.
MADDPG_SPREAD = """\
name: tiny-maddpg
algorithm: MADDPG
seed: 1
env:
  pettingzoo: mpe2.simple_spread_v3
  kwargs: {N: 3, max_cycles: 25, continuous_actions: true}
multi_agent:
  policies: independent
training:
  num_steps_sampled_before_learning_starts: 200
  train_batch_size_per_learner: 64
  env_steps_per_update: 10
  actor_hiddens: [32]
  critic_hiddens: [32]
reporting:
  min_sample_timesteps_per_iteration: 300
resources:
  env_runners: {count: 0}
stop:
  iterations: 2
checkpoint: {every: 1, keep: 2}
output_dir: OUTPUT
"""

# simple_adversary with discrete actions (Gumbel-softmax actors): the good agents share one
# policy, the adversary acts at random.
MADDPG_ADVERSARY = (
    MADDPG_SPREAD.replace("simple_spread_v3", "simple_adversary_v3")
    .replace("{N: 3, max_cycles: 25, continuous_actions: true}", "{N: 2, max_cycles: 25}")
    .replace(
        "policies: independent",
        'policies: {"adversary_*": adversary, "agent_*": good}\n  random: [adversary]',
    )
)


def replace(text: str, old: str, new: str) -> str:
    """``text`` with ``old`` replaced by ``new``; ``old`` must be there."""
    assert old in text, old
    return text.replace(old, new)


# --- the checks before Ray ----------------------------------------------------------------------


def assert_shipped_file_validates(path: Path, tmp_path: Path) -> None:
    """What ``rlplat train <path> --dry-run`` checks passes: every key, the env built and
    stepped, the RLlib config (and any search) built. An offline experiment is checked against
    a dataset of its env (its own data directory is made by the commands in its header)."""
    import yaml

    from rlplat.experiment.load import load_experiment
    from rlplat.experiment.yaml_io import dump_yaml
    from rlplat.prepare import prepare
    from rlplat.util.project import project_paths, use_project_paths

    spec = yaml.safe_load(path.read_text())
    extra = []
    if "offline" in spec:
        data = write_random_dataset(tmp_path / path.stem, spec["env"]["id"], episodes=1)
        extra = [f"offline.input={data}"]
    use_project_paths(project_paths(path))
    run = prepare(load_experiment(path, extra))
    resolved = yaml.safe_load(dump_yaml(run.resolved()))  # what --dry-run prints
    assert resolved["name"] == spec["name"] and resolved["algorithm"] == spec["algorithm"]
    # The probe built the module on the env's spaces and computed one finite loss per trained
    # module, on a few env steps or (offline) on the dataset's first rows.
    assert run.probe is not None and run.probe.losses, run.probe
    assert (run.probe.dataset_rows if "offline" in spec else run.probe.env_steps) > 0, run.probe


def check_before_ray(path: Path, *overrides: str):
    """What ``rlplat train path overrides`` checks before it starts Ray (an embedded Ray: the
    experiment loaded, prepared and placed on this machine); returns the prepared run."""
    from rlplat.cluster.placement import local_machine
    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare
    from rlplat.prepare.run_spec import refuse_if_impossible
    from rlplat.run.stages import first_stage
    from rlplat.util.project import project_paths, use_project_paths

    use_project_paths(project_paths(Path(path)))
    loaded = load_experiment(Path(path), list(overrides))
    first_stage(loaded)
    run = prepare(loaded, local_machine())
    refuse_if_impossible(run)
    return run


def rejection(path: Path, *overrides: str) -> str:
    """The message of the user error ``rlplat train path overrides`` exits 2 with, before Ray
    starts, whitespace-normalised (the console may wrap the paragraph)."""
    from rlplat.errors import RlplatError

    try:
        check_before_ray(path, *overrides)
    except RlplatError as exc:
        assert exc.exit_code == 2, f"exit code {exc.exit_code}: {exc}"
        return " ".join(str(exc).split())
    raise AssertionError(f"{path} was accepted")


def assert_rejected(path: Path, expected: list[str], out: Path, *overrides: str) -> None:
    """``rlplat train path overrides`` is refused before Ray starts (exit code 2) with every
    expected fragment in its message, and nothing is written under ``out``."""
    message = rejection(path, *overrides)
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert not out.exists(), "nothing may be written for a rejected experiment"


# --- datasets -----------------------------------------------------------------------------------


def write_random_dataset(path: Path, env_id: str = "CartPole-v1", episodes: int = 2) -> Path:
    """A real dataset directory of ``episodes`` uniformly random episodes of ``env_id``."""
    import gymnasium as gym

    env = gym.make(env_id)
    env.action_space.seed(0)
    return write_dataset(
        path, env, {"id": env_id}, lambda _: env.action_space.sample(), episodes, "uniform random"
    )


def write_dataset(
    path: Path, env: Any, recipe: dict, act: Callable, episodes: int, actions: str
) -> Path:
    """A real dataset directory of ``episodes`` episodes of ``env`` (built from the env section
    ``recipe``) acting with ``act(observation)``; ``actions`` says how, in its source."""
    import gymnasium as gym
    from ray.rllib.utils.serialization import gym_space_to_dict

    from rlplat.datasets.dataset import DatasetInfo, DatasetWriter, Step

    box = isinstance(env.action_space, gym.spaces.Box)
    writer = DatasetWriter(
        path,
        DatasetInfo(
            env=recipe,
            observation_space=gym_space_to_dict(env.observation_space),
            action_space=gym_space_to_dict(env.action_space),
            source={"kind": "test", "actions": actions},
            actions_normalized=box,  # Box actions as a policy records them, in [-1, 1]
        ),
    )
    for episode in range(episodes):
        obs, _ = env.reset(seed=episode)
        steps, done = [], False
        while not done:
            action = act(obs)
            next_obs, reward, terminated, truncated, _ = env.step(action)
            if box:
                low, high = env.action_space.low, env.action_space.high
                action = 2 * (action - low) / (high - low) - 1
            steps.append(Step(obs, action, float(reward), next_obs, terminated, truncated))
            obs, done = next_obs, terminated or truncated
        writer.add_episode(str(episode), steps)
    return writer.write()


# --- a run's files ------------------------------------------------------------------------------


def read_results(trial_dir: Path) -> list[dict]:
    """A trial's result.json, one dict per iteration."""
    return [json.loads(line) for line in (trial_dir / "result.json").read_text().splitlines()]


def iterations_logged(trial_dir: Path) -> list[int]:
    """The training_iteration of each line of a trial's result.json."""
    return [result["training_iteration"] for result in read_results(trial_dir)]


def read_scalars(trial_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """A trial's TensorBoard scalars: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(trial_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


# --- the rlplat command in a subprocess ---------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing uses now, from 20000-32767: below the kernel's
    ephemeral range, where every Ray started meanwhile takes its own ports and its connections
    their local ones (a port from there was taken before a served proxy bound it), and above
    Ray's worker ports (10002-19999)."""
    for port in random.SystemRandom().sample(range(20000, 32768), 200):  # not the seeded one
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-32767")


def rlplat(
    *args: str,
    env: dict | None = None,
    timeout: int = 300,
    cwd: str | os.PathLike | None = None,
    unset: tuple[str, ...] = (),
) -> subprocess.CompletedProcess:
    """The installed ``rlplat`` command (``python -m rlplat.cli`` if it is not on PATH)."""
    environment = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        rlplat_command(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**environment, **(env or {})},
    )


def rlplat_command(*args: str) -> list[str]:
    """The command line of ``rlplat *args``: the installed script, else ``python -m``."""
    exe = shutil.which("rlplat") or sys.executable
    prefix = [exe] if exe.endswith("rlplat") else [exe, "-m", "rlplat.cli"]
    return [*prefix, *args]


def rlplat_timed(
    args: list[str], line: str, timeout: int = 300, unset: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess, float]:
    """``rlplat(*args)``, and the seconds from its start until it printed a line containing
    ``line`` (the command's whole time if it never did)."""
    environment = {k: v for k, v in os.environ.items() if k not in unset}
    started = time.time()
    with subprocess.Popen(
        rlplat_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=environment,
    ) as process:
        stderr: list[str] = []
        reader = threading.Thread(target=lambda: stderr.append(process.stderr.read()))
        reader.start()
        timer = threading.Timer(timeout, process.kill)
        timer.start()
        stdout, printed_at = [], None
        for out_line in process.stdout:
            stdout.append(out_line)
            if printed_at is None and line in out_line:
                printed_at = time.time() - started
        process.wait()
        timer.cancel()
        reader.join()
    proc = subprocess.CompletedProcess(process.args, process.returncode, "".join(stdout), stderr[0])
    return proc, printed_at if printed_at is not None else time.time() - started


def launch(args: list[str], address: str) -> subprocess.Popen:
    """``rlplat train`` in its own process group (a terminal's Ctrl-C reaches the whole group)."""
    return subprocess.Popen(
        [sys.executable, "-m", "rlplat.cli", "train", "--address", address, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def rest_of_output(process: subprocess.Popen, timeout_s: float) -> str:
    """The command's remaining output once it has ended; if it has not within ``timeout_s``, a
    failure that shows its output and the state of every rlplat process (where a hang is)."""
    try:
        return process.communicate(timeout=timeout_s)[0]
    except subprocess.TimeoutExpired:
        table = subprocess.run(
            ["ps", "-ww", "-eo", "pid,ppid,pgid,stat,wchan:24,etime,args"],
            capture_output=True,
            text=True,
        ).stdout.splitlines()
        processes = "\n".join([table[0], *(line for line in table[1:] if "rlplat" in line)])
        os.killpg(process.pid, signal.SIGKILL)
        output = process.communicate()[0]
        raise AssertionError(
            f"the command had not ended {timeout_s} s later; its processes then:\n{processes}\n"
            f"its output:\n{output[-4000:]}"
        ) from None


def read_until_iteration(process: subprocess.Popen, iteration: int) -> tuple[Path, list[str]]:
    """Read the output until a progress line reports ``iteration``; return the run directory."""
    run_dir, lines = None, []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("Run directory:"):
            run_dir = Path(line.split(":", 1)[1].strip())
        if line.startswith("trial_") and "| iter" in line:
            if int(line.split("| iter")[1].split("|")[0]) >= iteration:
                break
    assert run_dir is not None, "".join(lines)
    return run_dir, lines


def read_until_resumable(process: subprocess.Popen, iteration: int) -> Path:
    """Read the output until ``iteration``, then wait until Tune's saved state names a checkpoint
    for every trial (Tune writes it about once a second, apart from the checkpoints themselves;
    a run of rlplat's own loop resumes from any complete checkpoint). A kill from then on leaves
    a run that ``--resume`` continues."""
    from rlplat.checkpoints import trials_in
    from rlplat.run.run_dir import is_loop_run
    from rlplat.seams.tune import resume_points  # Ray's import, for the tests that kill

    run_dir, _ = read_until_iteration(process, iteration)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        points = trials_in(run_dir) if is_loop_run(run_dir) else resume_points(run_dir)
        trials = list(run_dir.glob("trial_*"))
        if points and trials and len(points) == len(trials):
            assert process.poll() is None, "the run finished before it could be killed mid-run"
            return run_dir
        time.sleep(0.05)
    raise AssertionError(f"Tune saved no checkpoint of {run_dir} within 60 s")


# --- warm local Rays (rlplat.cluster.warm) -----------------------------------------------------


def warm_keepers(
    base: Path, records: tuple[str, ...] = ("head.json", "starting.json")
) -> list[dict]:
    """The keeper records (head.json, starting.json) of every warm Ray under ``base``; with
    ``records=("forkserver.json",)``, its warm interpreters'."""
    found = []
    for path in [path for name in records for path in base.glob(f"*/{name}")]:
        try:
            found.append(json.loads(path.read_text())["keeper"])
        except (OSError, ValueError, KeyError):
            pass
    return found


def stop_warm_rays(base: Path, timeout_s: float = 30.0) -> None:
    """Stop every keeper and warm interpreter under ``base`` (SIGTERM: a keeper shuts its Ray
    down), killing what lingers."""
    import signal

    from rlplat.util.process import still_running

    everything = warm_keepers(base, ("head.json", "starting.json", "forkserver.json"))
    keepers = [k for k in everything if still_running(k)]
    for keeper in keepers:
        os.kill(keeper["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while any(still_running(k) for k in keepers) and time.monotonic() < deadline:
        time.sleep(0.1)
    for keeper in keepers:
        if still_running(keeper):
            os.kill(keeper["pid"], signal.SIGKILL)
