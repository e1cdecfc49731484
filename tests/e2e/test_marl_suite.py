"""The multi-agent suite's Gymnasium multi-agent envs (env.gymma): a tiny QMIX run on Level-Based
Foraging trains, evaluates per agent, renders a GIF headless and exports with a passing
certificate; the Multi-Robot Warehouse renders headless too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from tests.e2e.helpers import eval_json, train_yaml
from tests.helpers import EXPERIMENTS, read_results

TIME_LIMIT = 12


def test_lbf_qmix_trains_evaluates_renders_and_exports(ray_session, tmp_path, capsys, monkeypatch):
    text = (EXPERIMENTS / "marl/lbf_qmix.yaml").read_text() + (
        "export: {at_end: true, episodes: 2}\noutput_dir: OUTPUT\n"
    )
    summary = train_yaml(
        text,
        tmp_path,
        f"env.time_limit={TIME_LIMIT}",
        "stop.iterations=1",
        "training.batch_episodes=4",
        "training.learning_starts_episodes=4",
    )
    export = summary.export
    assert export is not None and export.get("passed"), export

    monkeypatch.delenv("DISPLAY", raising=False)
    report = eval_json(capsys, summary.run_dir, "-n", "1", "--render", "gif", "--out", tmp_path)
    assert list(report["agent_returns"]) == ["agent_0", "agent_1"]
    [gif] = tmp_path.glob("*.gif")
    with Image.open(gif) as image:
        frames = image.n_frames
        pixels = image.convert("RGB").getcolors(maxcolors=1 << 16)
    assert 1 < frames <= TIME_LIMIT + 1
    assert pixels is None or len(pixels) > 3, "the grid, agents and food are drawn"


def test_warehouse_renders_frames_without_a_display(monkeypatch):
    from rlplat.environments.gymma import make_gymma

    monkeypatch.delenv("DISPLAY", raising=False)
    env = make_gymma("rware:rware-tiny-2ag-v2", time_limit=500, render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.ndim == 3 and frame.shape[2] == 3
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) > 3, "shelves, robots and floor drawn"


def test_vmas_worlds_of_one_batch_are_separate_episodes_and_the_policy_plays_one(
    ray_session, tmp_path, capsys
):
    """env.backend vmas: the env runner's 8 envs are one VMAS batch; RLlib still counts 8 worlds'
    episodes of max_steps each, and the checkpoint plays (and exports) on a single world."""
    text = (EXPERIMENTS / "marl/vmas_balance_ppo.yaml").read_text() + "output_dir: OUTPUT\n"
    summary = train_yaml(
        text,
        tmp_path,
        "env.backend=vmas",
        "env.kwargs={scenario: balance, max_steps: 10, n_agents: 3}",
        "resources.env_runners.envs=8",
        "training.train_batch_size_per_learner=160",
        "training.minibatch_size=80",
        "training.num_epochs=1",
        "stop.iterations=1",
        "stop.env_steps=null",
    )
    [trial] = summary.trials
    runners = read_results(Path(trial.path))[-1]["env_runners"]
    assert runners["num_episodes"] == 8 * 2, "two 10-step episodes in each of the 8 worlds"
    assert runners["episode_len_mean"] == 10
    report = eval_json(capsys, summary.run_dir, "-n", "1")
    assert report["per_episode"][0]["length"] == 10
    assert list(report["agent_returns"]) == ["agent_0", "agent_1", "agent_2"]
