"""rlplat from Python: README's example runs as written, and the functions refuse what the
commands refuse."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from rlplat.errors import UserError
from tests.helpers import EXPERIMENTS, REPO


def readme_example() -> str:
    section = (REPO / "README.md").read_text().split("## rlplat from Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_python_example_trains_evaluates_and_acts(tmp_path):
    (tmp_path / "experiments").symlink_to(EXPERIMENTS)  # its paths, relative as in README
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run(
        [sys.executable, "-c", readme_example()],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    runs = sorted((tmp_path / "checkpoints" / "cartpole-ppo").iterdir())
    assert len(runs) == 2, "two train() calls, two run directories"
    first, second = runs
    steps = re.search(rf"^{first} (\d+) {first}/trial_00000/checkpoint_", proc.stdout, re.M)
    assert steps and int(steps.group(1)) >= 8000, proc.stdout[-2000:]
    assert str(second) in proc.stdout
    mean = float(re.search(r"greedy return ([\d.]+) over 5 episodes", proc.stdout).group(1))
    assert mean > 45, "8,000 env steps of PPO hold the pole twice as long as random actions"
    assert proc.stdout.count("Ray:") == 1, "the second train() found Ray connected"
    assert "Next:" not in proc.stdout and "rlplat eval" not in proc.stdout, "CLI commands"
    assert "lr: 0.001" in (second / "experiment.yaml").read_text()
    assert "Traceback" not in proc.stderr


def test_evaluate_refuses_an_option_rlplat_eval_does_not_have(tmp_path):
    from rlplat.api import evaluate

    with pytest.raises(UserError, match="Did you mean 'episodes'"):
        evaluate(tmp_path, episods=3)
