"""``rlplat eval`` on real checkpoints: picking, restoring without Ray, rollouts, videos, errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.e2e.helpers import eval_json, run_eval
from tests.helpers import REPO

CARTPOLE_POLE_RGB = (202, 152, 101)

def test_solved_cartpole_scores_475_greedily(solved_cartpole, capsys):
    report = eval_json(capsys, solved_cartpole.run_dir, "--episodes", "10")
    assert report["episodes"] == 10
    assert report["returns"]["mean"] >= 475, report["per_episode"]
    assert report["checkpoint"] == solved_cartpole.trials[0].best_checkpoint
    assert report["reported"]["episode_return_mean"] >= 475


def test_gif_has_one_frame_per_step_and_shows_the_pole(solved_cartpole, capsys, tmp_path):
    from PIL import Image, ImageSequence

    out = tmp_path / "videos"
    report = eval_json(capsys, solved_cartpole.run_dir, "-n", "1", "--render", "gif", "--out", out)
    [video] = report["videos"]
    assert Path(video).parent == out and video.endswith("_seed0.gif")
    frames = [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(Image.open(video))]
    assert len(frames) == report["per_episode"][0]["length"]
    assert not np.array_equal(frames[0], frames[len(frames) // 2]), "the frames differ"
    pole = np.all(np.abs(frames[0].astype(int) - CARTPOLE_POLE_RGB) < 12, axis=-1)
    assert pole.sum() > 500, "the pole is drawn"
    # A second run never overwrites the first one's file.
    again = eval_json(capsys, solved_cartpole.run_dir, "-n", "1", "--render", "gif", "--out", out)
    assert again["videos"][0] != video and Path(video).stat().st_size > 0


def test_mp4_with_all_episodes_in_one_file(tiny_run, capsys, tmp_path):
    import imageio.v3 as iio

    report = eval_json(
        capsys, tiny_run.run_dir, "-n", "2", "--render", "mp4", "--one-file", "--out", tmp_path
    )
    [video] = report["videos"]
    steps = sum(e["length"] for e in report["per_episode"])
    assert iio.improps(video, plugin="pyav").shape[0] == steps


def test_eval_starts_no_ray(tiny_run):
    """The whole command in a fresh interpreter: Ray stays uninitialised, no process spawned."""
    script = f"""
import json, os
from rlplat.cli import main
try:
    main(["eval", {tiny_run.run_dir!r}, "-n", "2"])
except SystemExit as exc:
    assert not exc.code, exc.code
import ray
me = str(os.getpid())
children = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        stat = open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if stat[1] == me:
        children.append(pid)
print(json.dumps({{"ray": ray.is_initialized(), "children": children}}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"ray": False, "children": []}
    assert "episode   2" in done.stdout


def test_picks_best_or_newest_checkpoint(tiny_run, capsys):
    trial_dir = Path(tiny_run.trials[0].path)
    infos = {
        c: json.loads((c / "rlplat_checkpoint.json").read_text())
        for c in trial_dir.glob("checkpoint_*")
    }
    best = max(infos, key=lambda c: infos[c]["score"])
    newest = max(infos, key=lambda c: infos[c]["iteration"])
    for path in (trial_dir, tiny_run.run_dir):
        report = eval_json(capsys, path, "-n", "1")
        assert report["checkpoint"] == str(best)
        assert "best checkpoint of trial_00000" in report["picked"]
    assert eval_json(capsys, trial_dir, "-n", "1", "--last")["checkpoint"] == str(newest)
    experiment_dir = trial_dir.parent.parent
    newest_run = max(p for p in experiment_dir.iterdir() if list(p.glob("trial_*/checkpoint_*")))
    report = eval_json(capsys, experiment_dir, "-n", "1")
    assert Path(report["checkpoint"]).is_relative_to(newest_run)
    assert report["picked"].startswith(f"newest run {newest_run.name}")


def test_same_seed_same_episodes(tiny_run, capsys):
    checkpoint = tiny_run.trials[0].last_checkpoint
    for mode in ([], ["--explore"]):
        first = eval_json(capsys, checkpoint, "-n", "4", "--seed", "5", *mode)["per_episode"]
        again = eval_json(capsys, checkpoint, "-n", "4", "--seed", "5", *mode)["per_episode"]
        other = eval_json(capsys, checkpoint, "-n", "4", "--seed", "50", *mode)["per_episode"]
        assert first == again
        assert [e["seed"] for e in first] == [5, 6, 7, 8]
        assert first != other


def test_recurrent_policy_and_ansi_frames(corridor_lstm, capsys):
    """An LSTM policy acts with its state carried through the episode; ANSI frames are printed."""
    code, out, err = run_eval(capsys, corridor_lstm, "-n", "2", "--render", "ansi")
    assert code == 0, err
    assert out.count("step 0\n") == 2 and "A...G" in out
    for explore in ([], ["--explore"]):
        first = eval_json(capsys, corridor_lstm, "-n", "3", *explore)
        assert first == eval_json(capsys, corridor_lstm, "-n", "3", *explore)
        assert all(1 <= e["length"] <= 20 for e in first["per_episode"])


def test_connector_state_is_restored(filtered_run, capsys):
    """A policy trained on filtered observations is evaluated with the filter's training state."""
    from rlplat.policy.restore import Policy

    checkpoint = Path(filtered_run.trials[0].last_checkpoint)
    policy = Policy.from_checkpoint(checkpoint)
    [state] = [
        c.get_state()
        for c in policy.env_to_module.connectors
        if type(c).__name__ == "MeanStdFilter"
    ]
    pushes = [s["num_pushes"] for agent in state.values() for s in agent["running_stats"]]
    assert pushes and min(pushes) >= 400, "the running statistics of training, not a new filter"
    first = eval_json(capsys, checkpoint, "-n", "3")
    assert first == eval_json(capsys, checkpoint, "-n", "3")


@pytest.mark.parametrize(
    "name", ["cartpole_dqn", "pendulum_sac", "pendulum_td3", "pendulum_crossq"]
)
def test_off_policy_checkpoints_evaluate(name, off_policy_runs, capsys):
    summary = off_policy_runs(name)
    for explore in ([], ["--explore"]):
        report = eval_json(capsys, summary.run_dir, "-n", "1", *explore)
        assert report["episodes"] == 1 and report["per_episode"][0]["length"] > 0
        assert np.isfinite(report["returns"]["mean"])


def _copy_checkpoint(tiny_run, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(tiny_run.trials[0].last_checkpoint, target)
    return target


def _plain_directory(path: Path) -> None:
    shutil.rmtree(path)
    path.mkdir()
    (path / "notes.txt").write_text("not a checkpoint")


def _break_weights(path: Path) -> None:
    state = path / "learner_group/learner/rl_module/default_policy/module_state.pkl"
    state.write_bytes(state.read_bytes()[:100])


def _unknown_env(path: Path) -> None:
    experiment = path / "experiment.yaml"
    text = experiment.read_text().replace("id: CartPole-v1", "id: null")
    experiment.write_text(text.replace("factory: null", "factory: envs.gone:Env"))


BAD_CHECKPOINTS = {
    "missing": (lambda p: shutil.rmtree(p), [], "does not exist"),
    "not a checkpoint": (_plain_directory, [], "no checkpoint found"),
    "a file": (lambda p: None, ["FILE"], "is a file, not a checkpoint"),
    "incomplete": (
        lambda p: shutil.rmtree(p / "env_runner/module_to_env_connector"),
        [],
        "is incomplete: its module-to-env connectors",
    ),
    "corrupt": (_break_weights, [], "cannot load the policy weights"),
    "no experiment": (lambda p: (p / "experiment.yaml").unlink(), [], "no experiment.yaml"),
    "env not rebuildable": (_unknown_env, [], "cannot rebuild the environment 'envs.gone:Env'"),
    "render mode": (
        lambda p: None,
        ["--render", "ansi"],
        "supports only: human, rgb_array. Use --render gif or mp4",
    ),
    "render choice": (lambda p: None, ["--render", "gifs"], "Did you mean 'gif'?"),
    "episodes": (lambda p: None, ["--episodes", "0"], "--episodes must be at least 1"),
}


@pytest.mark.parametrize("case", BAD_CHECKPOINTS, ids=list(BAD_CHECKPOINTS))
def test_bad_input_exits_2_with_a_clear_message(case, tiny_run, tmp_path, capsys):
    damage, extra, message = BAD_CHECKPOINTS[case]
    checkpoint = _copy_checkpoint(tiny_run, tmp_path)
    damage(checkpoint)
    target = checkpoint / "rllib_checkpoint.json" if extra == ["FILE"] else checkpoint
    out = tmp_path / "videos"
    args = [a for a in extra if a != "FILE"]
    code, _, err = run_eval(capsys, target, *args, "--out", out)
    assert code == 2, err
    assert err.startswith("error: ") and message in err, err
    assert "Traceback" not in err
    assert not out.exists(), "nothing written"
