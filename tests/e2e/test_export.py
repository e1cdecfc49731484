"""``rlplat export``: ONNX graphs that act like the checkpoint, proven by the parity certificate;
``rlplat eval`` and ``rlplat.runtime`` on exports; bad input. Multi-agent and QMIX exports are
tested beside their trained runs (test_multi_agent.py, test_qmix.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from tests.e2e.helpers import export_json, run_cli
from tests.helpers import REPO


def files_digest(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())
    }


def test_cartpole_export_acts_like_the_checkpoint(cartpole_export, solved_cartpole):
    import onnx

    out, manifest, parity = (cartpole_export[k] for k in ("dir", "manifest", "parity"))
    assert sorted(p.name for p in out.iterdir()) == [
        "experiment.yaml", "parity.json", "policy.json", "policy.onnx"
    ]
    # The certificate: 10 seeded episodes with each path acting, every action compared.
    assert parity["passed"] and parity["agreement"] == 1.0
    assert parity["seeds"] == list(range(10))
    assert parity["compared_actions"] >= 2 * 10 * 400, "two rollouts of ~500 steps each"
    assert parity["checkpoint"]["returns"] == parity["onnx"]["returns"]
    assert parity["onnx"]["mean"] >= 475
    # The manifest says what the graph takes and gives, and where it came from.
    policy = manifest["policies"]["default_policy"]
    assert [(i["name"], i["shape"], i["dtype"]) for i in policy["inputs"]] == [
        ("obs", ["batch", 4], "float32")
    ]
    assert [(o["name"], o["dtype"]) for o in policy["outputs"]] == [
        ("action", "int64"), ("action_dist_inputs", "float32")
    ]
    assert policy["action"] == {"type": "Discrete", "n": 2, "start": 0, "dtype": "int64"}
    assert manifest["checkpoint"]["path"] == solved_cartpole.trials[0].best_checkpoint
    assert manifest["training"]["episode_return_mean"] >= 475
    assert manifest["verified"] is True
    assert {"rlplat", "ray", "torch", "onnx", "onnxruntime"} <= set(manifest["versions"])
    model = onnx.load(str(out / "policy.onnx"))
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == policy["opset"]


def test_runtime_batches_and_gives_the_logits(cartpole_export):
    from rlplat.runtime import load

    policy = load(cartpole_export["dir"])
    observations = np.random.default_rng(0).normal(size=(256, 4)).astype(np.float32) * 0.1
    outputs = policy.forward(list(observations))
    assert outputs["action"].shape == (256,) and outputs["action"].dtype == np.int64
    assert outputs["action_dist_inputs"].shape == (256, 2)
    assert (outputs["action"] == outputs["action_dist_inputs"].argmax(axis=1)).all()
    assert policy.act(observations[0]) == int(outputs["action"][0])


def test_an_existing_output_is_never_overwritten(cartpole_export, solved_cartpole, capsys):
    out = cartpole_export["dir"]
    before = files_digest(out)
    report = export_json(capsys, solved_cartpole.run_dir, "--out", out, "-n", "1")
    assert Path(report["directory"]) == out.with_name(f"{out.name}-1")
    assert files_digest(out) == before
    assert not list(out.parent.glob(".*partial*")), "no staging directory left behind"


def test_eval_plays_an_export_without_torch_or_ray(cartpole_export, solved_cartpole, capsys):
    """Same report as for the checkpoint, from onnxruntime; torch and Ray are never imported."""
    script = (
        "import json, sys\n"
        "from rlplat.cli import main\n"
        "try:\n"
        f"    main(['eval', {str(cartpole_export['dir'])!r}, '-n', '3', '--json'])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "loaded = sorted(m for m in ('torch', 'ray') if m in sys.modules)\n"
        "print('LOADED', json.dumps(loaded), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert "LOADED []" in done.stderr.splitlines(), done.stderr
    report = json.loads(done.stdout)
    code, out, err = run_cli(capsys, "eval", solved_cartpole.run_dir, "-n", "3", "--json")
    assert code == 0, err
    assert report["per_episode"] == json.loads(out)["per_episode"]
    assert report["reported"]["episode_return_mean"] >= 475


def test_runtime_plays_cartpole_where_torch_and_ray_are_not_installed(cartpole_export, tmp_path):
    """A fresh virtual environment with onnxruntime, numpy and gymnasium only."""
    env_dir = tmp_path / "bare"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "onnxruntime", "numpy", "gymnasium"],
        check=True,
        capture_output=True,
    )
    package = tmp_path / "site" / "rlplat"
    package.mkdir(parents=True)
    for name in ("__init__.py", "runtime.py"):  # the module copied, nothing else of rlplat
        shutil.copy(REPO / "rlplat" / name, package / name)
    script = f"""
import importlib.util, json
assert importlib.util.find_spec("torch") is None and importlib.util.find_spec("ray") is None
import gymnasium as gym
from rlplat.runtime import load
policy = load({str(cartpole_export['dir'])!r})
env = gym.make("CartPole-v1")
returns = []
for seed in range(10):
    obs, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
        total += reward
        done = terminated or truncated
    returns.append(total)
print(json.dumps(returns))
"""
    done = subprocess.run(
        [python, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )
    assert done.returncode == 0, done.stderr
    returns = json.loads(done.stdout)
    assert np.mean(returns) >= 475, returns


@pytest.mark.parametrize(
    "name", ["cartpole_dqn", "pendulum_sac", "pendulum_td3", "pendulum_crossq"]
)
def test_off_policy_exports_pass_parity(name, off_policy_runs, tmp_path, capsys):
    """DQN (a dueling head: nanmean in the graph) and SAC (continuous, unsquashed to bounds)."""
    report = export_json(capsys, off_policy_runs(name).run_dir, "--out", tmp_path / name, "-n", "3")
    parity = report["parity"]
    assert parity["passed"] and parity["agreement"] == 1.0 and parity["compared_actions"] > 0
    manifest = json.loads((Path(report["directory"]) / "policy.json").read_text())
    action = manifest["policies"]["default_policy"]["action"]
    if name != "cartpole_dqn":
        assert action["type"] == "Box" and action["low"] == [-2.0] and action["high"] == [2.0]
        assert parity["max_abs_diff"] <= 1e-4
        from rlplat.runtime import load

        # Far outside what the network saw: the action still lies inside the env's bounds.
        outputs = load(report["directory"]).forward([np.array([1.0, 0.0, 8.0], np.float32)])
        assert -2.0 <= float(outputs["action"][0, 0]) <= 2.0
    else:
        assert action["type"] == "Discrete"
    if name == "pendulum_crossq":
        import onnx

        graph = onnx.load(Path(report["directory"]) / "policy.onnx").graph
        assert "module.actor.0.running_mean" in {i.name for i in graph.initializer}, (
            "batch renormalisation acts with its running statistics, carried in the graph"
        )


def test_a_pqn_run_exports_its_greedy_q_policy_and_evaluates(ray_session, tmp_path, capsys):
    """PQN (CartPole, 3 short rollouts): the checkpoint's greedy policy is the argmax of its
    Q-values, in the export as in the checkpoint; the export acts greedily only (epsilon-greedy
    needs more than the graph)."""
    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train
    from tests.e2e.helpers import eval_json

    loaded = load_experiment(
        REPO / "experiments/cartpole_pqn.yaml",
        [
            f"output_dir={tmp_path / 'runs'}",
            "stop.iterations=3",
            "evaluation.evaluation_interval=3",
        ],
    )
    summary = train(loaded, console=Console(quiet=True))
    [trial] = summary.trials
    assert trial.error is None and trial.iterations == 3
    report = export_json(capsys, summary.run_dir, "--out", tmp_path / "export", "-n", "2")
    parity = report["parity"]
    assert parity["passed"] and parity["agreement"] == 1.0 and parity["compared_actions"] > 0
    manifest = json.loads((tmp_path / "export" / "policy.json").read_text())
    assert manifest["policies"]["default_policy"].get("exploration") is None
    played = eval_json(capsys, tmp_path / "export", "-n", "1")
    assert played["episodes"] == 1 and played["per_episode"][0]["length"] > 0


def test_mean_std_filter_is_inside_the_graph_and_at_end_exports(filtered_run):
    """export.at_end writes <run>/export with a passing certificate; the filter's frozen
    statistics are part of the graph (an export without them would disagree)."""
    summary = filtered_run
    assert summary.export is not None and summary.export.get("passed"), summary.export
    out = Path(summary.export["directory"])
    assert out == Path(summary.run_dir) / "export"
    parity = json.loads((out / "parity.json").read_text())
    assert parity["agreement"] == 1.0 and parity["compared_actions"] > 0
    saved = json.loads((Path(summary.run_dir) / "summary.json").read_text())
    assert saved["export"]["directory"] == str(out)
    # The same graph without normalisation acts differently: the filter is really in it.
    from rlplat.runtime import load

    observations = [np.array([0.1, 1.5, -0.05, -1.2], np.float32) * k for k in range(1, 40)]
    with_filter = load(out).forward(observations)["action_dist_inputs"]
    raw = _unfiltered_logits(Path(summary.export["directory"]), observations)
    assert not np.allclose(with_filter, raw)


def _unfiltered_logits(export_dir: Path, observations: list) -> np.ndarray:
    """The module alone on raw observations, from the checkpoint the export came from."""
    import torch
    from ray.rllib.core.columns import Columns

    from rlplat.policy.restore import Policy

    manifest = json.loads((export_dir / "policy.json").read_text())
    policy = Policy.from_checkpoint(Path(manifest["checkpoint"]["path"]))
    with torch.no_grad():
        batch = {Columns.OBS: torch.tensor(np.stack(observations))}
        output = policy.module.forward_inference(batch)
    return output[Columns.ACTION_DIST_INPUTS].numpy()


def test_bad_input_exits_2_and_writes_nothing(tiny_run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the default output, exported/, would go
    plain = tmp_path / "plain"
    plain.mkdir()
    code, _, err = run_cli(capsys, "export", plain)
    assert code == 2 and f"no checkpoint found in {plain}" in err, err

    a_file = tmp_path / "taken.txt"
    a_file.write_text("keep me")
    code, _, err = run_cli(capsys, "export", tiny_run.run_dir, "--out", a_file)
    assert code == 2 and "is an existing file" in err, err
    assert a_file.read_text() == "keep me"

    code, _, err = run_cli(capsys, "export", tiny_run.run_dir, "--tolerance", "-1")
    assert code == 2 and "--tolerance" in err, err
    assert not (tmp_path / "exported").exists()


def test_an_env_that_cannot_be_rebuilt_needs_no_verify(tiny_run, tmp_path, capsys):
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(tiny_run.trials[0].last_checkpoint, checkpoint)
    experiment = checkpoint / "experiment.yaml"
    experiment.write_text(experiment.read_text().replace("CartPole-v1", "CartPoleGone-v1"))
    code, _, err = run_cli(capsys, "export", checkpoint, "--out", tmp_path / "x")
    assert code == 2, err
    assert "CartPoleGone-v1" in err and "--no-verify" in err
    assert not (tmp_path / "x").exists()

    report = export_json(capsys, checkpoint, "--out", tmp_path / "x", "--no-verify")
    manifest = json.loads((Path(report["directory"]) / "policy.json").read_text())
    parity = json.loads((Path(report["directory"]) / "parity.json").read_text())
    assert manifest["verified"] is False and parity["verified"] is False
    assert (Path(report["directory"]) / "policy.onnx").is_file()


def test_a_recurrent_ppo_export_carries_its_lstm_state(corridor_lstm, tmp_path, capsys):
    """use_lstm PPO: the LSTMs' h and c travel flat as state_in/state_out; the certificate plays
    whole episodes with the state carried, and rlplat eval of the export plays as the
    checkpoint does, seed for seed."""
    from tests.e2e.helpers import eval_json

    report = export_json(capsys, corridor_lstm, "--out", tmp_path / "x", "-n", "3")
    parity = report["parity"]
    assert parity["passed"] and parity["agreement"] == 1.0 and parity["compared_actions"] > 0
    spec = json.loads((tmp_path / "x" / "policy.json").read_text())["policies"]["default_policy"]
    assert [entry["name"] for entry in spec["inputs"]] == ["obs", "state_in"]
    assert spec["outputs"][-1]["name"] == "state_out"
    layout = [(part["name"], part["size"]) for part in spec["state"]["layout"]]
    assert layout == [(f"{net}.{leaf}", 16) for net in ("actor", "critic") for leaf in "ch"]
    exported = eval_json(capsys, tmp_path / "x", "-n", "3")
    checkpoint = eval_json(capsys, corridor_lstm, "-n", "3")
    assert [e["return"] for e in exported["per_episode"]] == [
        e["return"] for e in checkpoint["per_episode"]
    ]


FRAMES = """\
name: pixel-corridor
algorithm: PPO
seed: 2
env:
  factory: envs.corridor:PixelCorridor
  kwargs: {length: 6, max_steps: 20}
connectors: [{frame_stack: {num_frames: 3}}]
training: {train_batch_size_per_learner: 200, minibatch_size: 50, num_epochs: 1}
rl_module:
  model_config: {conv_filters: [[4, [3, 3], 1]], head_fcnet_hiddens: [16]}
resources:
  env_runners: {count: 0}
stop: {iterations: 2}
output_dir: OUTPUT
"""


def test_frame_stacking_is_done_by_the_runtime(ray_session, tmp_path, capsys):
    """RLlib's frame_stack connector is stateful: the runtime stacks the env's frames (zeros
    before the first) and the graph takes the stack; the certificate checks it step by step."""
    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    path = tmp_path / "exp.yaml"
    path.write_text(FRAMES.replace("OUTPUT", str(tmp_path / "out")))
    summary = train(load_experiment(path), console=Console(quiet=True))
    assert summary.trials[0].error is None, summary.trials[0].error
    report = export_json(capsys, summary.run_dir, "--out", tmp_path / "x", "-n", "5")
    parity = report["parity"]
    assert parity["passed"] and parity["agreement"] == 1.0 and parity["compared_actions"] >= 10
    manifest = json.loads((Path(report["directory"]) / "policy.json").read_text())
    policy = manifest["policies"]["default_policy"]
    assert policy["frame_stack"] == {"num_frames": 3}
    assert policy["inputs"][0]["shape"] == ["batch", 3, 6, 3]
    from rlplat.runtime import load

    runtime = load(report["directory"])
    frames = [np.zeros((3, 6, 1), np.float32) for _ in range(2)]
    for position in (0, 1):
        frames[position][1, position, 0] = 1.0
    zero = np.zeros_like(frames[0])
    stacks = [[zero, zero, frames[0]], [zero, frames[0], frames[1]]]
    expected = runtime.forward([np.concatenate(stack, axis=2) for stack in stacks])
    # An episode's first observation is stacked behind two zero frames, then they shift.
    for step, frame in enumerate(frames):
        runtime.act(frame)
        got = runtime.last_outputs["action_dist_inputs"]
        assert np.array_equal(got, expected["action_dist_inputs"][step]), step
    assert not np.array_equal(*expected["action_dist_inputs"]), "two different stacks"
