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


def test_train_in_a_notebook_shows_progress_as_one_updating_output(tmp_path):
    """In a Jupyter kernel, train()'s lines (progress and summary) are one display output that
    updates in place, not one output per line; the API prints no CLI commands."""
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    code = (
        "import rlplat\n"
        f"run = rlplat.train({str(EXPERIMENTS / 'cartpole_ppo.yaml')!r}, "
        f"'stop={{iterations: 3}}', 'output_dir={tmp_path}', 'checkpoint.rescore=0')\n"
        "print('trained', run.directory)"
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    nbclient.NotebookClient(notebook, timeout=300).execute(cwd=str(tmp_path), env=env)
    outputs = notebook.cells[0].outputs
    displays = [o for o in outputs if o.output_type == "display_data"]
    streams = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert len(displays) == 1, outputs
    shown = re.sub(r"\x1b\[[0-9;]*m", "", displays[0].data["text/plain"])  # Rich's bold
    assert shown.count("trial_00000 | iter") >= 2 and "Run finished" in shown, shown
    assert "| iter" not in streams and "trained " in streams, streams
    assert "Next:" not in shown + streams and "rlplat eval" not in shown + streams


def test_the_functions_name_the_argument_a_slip_gave(tiny_run, tmp_path):
    """rlplat.train(path, 5), evaluate(run, episodes="many") and act() on an observation of the
    wrong shape raised AttributeError, TypeError and torch's "mat1 and mat2 shapes cannot be
    multiplied"; each now names the argument and what it takes."""
    import rlplat

    with pytest.raises(UserError, match=r"overrides as strings.*got 5 \(int\)"):
        rlplat.train(EXPERIMENTS / "cartpole_ppo.yaml", 5)
    with pytest.raises(UserError, match=r"option episodes takes int .*got 'many'"):
        rlplat.evaluate(tiny_run.run_dir, episodes="many")
    experiment = {"name": "x", "algorithm": "PPO", "env": {"id": "CartPole-v1"},
                  "stop": {"env_steps": 100}, "training": {"lrr": 0.1}}  # fmt: skip
    with pytest.raises(UserError, match=r"^the experiment dict given to train\(\), key"):
        rlplat.train(experiment)
    policy = rlplat.load_policy(tiny_run.run_dir)
    with pytest.raises(ValueError, match=r"shape \(4,\)\); got one of shape \(2,\)"):
        policy.act([0.1, 0.2])
    assert policy.action_space.contains(policy.act([0.0, 0.0, 0.0, 0.0]))
