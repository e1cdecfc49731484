"""Shared fixtures: one Ray instance for the whole test session, small experiment files."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray for every test that trains in-process; its address for subprocess tests."""
    import ray

    from rlplat.cluster import start_ray

    start_ray(None)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


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
