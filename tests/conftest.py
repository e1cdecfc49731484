"""Shared fixtures: one Ray instance for the whole test session, small experiment files."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"


@pytest.fixture(scope="session")
def ray_cluster():
    """One Ray cluster for the whole session: a head node with this machine's resources (and the
    dashboard, for Ray's state API); tests that need more nodes add and remove them."""
    import ray
    from ray._private.utils import get_num_cpus
    from ray.cluster_utils import Cluster

    from rlplat.cluster.connect import start_ray

    # Cluster's nodes default to 1 CPU: give the head what ray.init() would detect here.
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"include_dashboard": True, "num_cpus": get_num_cpus()},
    )
    start_ray(cluster.address)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="session")
def ray_session(ray_cluster):
    """The session's Ray, connected in this process; its address for subprocess tests."""
    return ray_cluster.address


@pytest.fixture
def write_yaml(tmp_path: Path):
    """Write YAML text to a file in tmp_path and return its path."""

    def _write(text: str, name: str = "exp.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return _write


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


@pytest.fixture
def tiny_ppo(write_yaml, tmp_path: Path) -> Path:
    """A PPO experiment that runs three tiny iterations into tmp_path/out."""
    return write_yaml(TINY_PPO.replace("OUTPUT", str(tmp_path / "out")))


@pytest.fixture(scope="session")
def tiny_run(ray_session, tmp_path_factory):
    """One tiny PPO run (with an override, RLlib evaluation and videos) shared by many tests."""
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    tmp = tmp_path_factory.mktemp("tiny")
    path = tmp / "exp.yaml"
    path.write_text(TINY_PPO.replace("OUTPUT", str(tmp / "out")))
    overrides = [
        "training.lr=0.0007",
        "video.every=1",
        "evaluation.evaluation_interval=2",
        "evaluation.evaluation_duration=2",
    ]
    return train(load_experiment(path, overrides), console=Console(quiet=True))


@pytest.fixture(scope="session")
def solved_cartpole(ray_session, tmp_path_factory):
    """The shipped CartPole PPO experiment trained to its target (about 100k env steps)."""
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    out = tmp_path_factory.mktemp("solved")
    loaded = load_experiment(EXPERIMENTS / "cartpole_ppo.yaml", [f"output_dir={out}"])
    return train(loaded, console=Console(quiet=True))
