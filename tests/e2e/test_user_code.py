"""A user's own env in their own project: imported from there (not from rlplat's examples), and
shipped to Ray's workers with the job, so env runners on other nodes run it too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import rlplat

LINE_ENV = '''\
"""Walk right along a line; reward 1 at its end. Each instance logs where its code came from."""

import json
import os

import gymnasium as gym
import numpy as np


class Line(gym.Env):
    def __init__(self, length=4, log=None):
        self.observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.length = length
        self.position = 0
        if log:
            with open(log, "a") as file:
                file.write(json.dumps({"file": __file__, "pid": os.getpid()}) + "\\n")

    def _observation(self):
        return np.array([self.position / self.length], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return self._observation(), {}

    def step(self, action):
        self.position = max(0, self.position + (1 if action == 1 else -1))
        done = self.position >= self.length
        return self._observation(), float(done), done, self.position > 40, {}
'''

EXPERIMENT = """\
name: line
algorithm: PPO
env:
  factory: envs.line:Line
  kwargs: {{log: {log}}}
training: {{train_batch_size_per_learner: 128, minibatch_size: 64, num_epochs: 1}}
resources:
  env_runners: {runners}
stop: {{iterations: 2}}
output_dir: out
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory with its own envs/ package, unrelated to rlplat's examples."""
    root = tmp_path / "project"
    (root / "envs").mkdir(parents=True)
    (root / "envs" / "__init__.py").write_text("")
    (root / "envs" / "line.py").write_text(LINE_ENV)
    (root / "experiments").mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "line"\n')
    return root


def run_in(project: Path, runners: str, address: str, cwd: Path) -> tuple[object, list[dict]]:
    log = project / "envs.log"
    (project / "experiments" / "line.yaml").write_text(
        EXPERIMENT.format(log=log, runners=runners)
    )
    experiment = project / "experiments" / "line.yaml"
    # No PYTHONPATH: nothing of rlplat's checkout (its envs/ examples) is importable.
    proc = rlplat("train", str(experiment), "--address", address, cwd=cwd, unset=("PYTHONPATH",))
    built = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc, built


def test_a_projects_env_trains_from_its_directory(project, ray_session):
    """Started in the project: its envs.line, not rlplat's envs package, runs in the driver's
    check and in the trial's env runner (in the command's process: one trial on one node)."""
    proc, built = run_in(project, "{count: 0}", ray_session, cwd=project)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert len(built) >= 2, "the driver's check and the trial"
    assert all(entry["file"].endswith("envs/line.py") for entry in built), built


def test_a_projects_env_runs_on_a_remote_node(project, ray_cluster, ray_session, tmp_path):
    """Started from elsewhere (the experiment file locates the project), with the env runner on
    a second node: the runner builds the env from the shipped copy of the project's code."""
    node = ray_cluster.add_node(num_cpus=2, resources={"line_node": 1})
    ray_cluster.wait_for_nodes()
    try:
        proc, built = run_in(
            project, "{count: 1, custom: {line_node: 1}}", ray_session, cwd=tmp_path
        )
    finally:
        ray_cluster.remove_node(node)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    pids = {entry["pid"] for entry in built}
    assert len(pids) >= 3, "driver check, the trial's local runner and the remote runner"
    shipped = {entry["file"] for entry in built if not entry["file"].startswith(str(project))}
    assert shipped, "every worker imported the project's own checkout instead of the shipment"
