"""Multi-agent runs: PettingZoo envs, SuperSuit chains, policy mapping, masks, metrics, eval."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from tests.e2e.helpers import eval_json, export_report, train_yaml
from tests.helpers import (
    CONNECT_FOUR,
    EXPERIMENTS,
    MULTI_AGENT_ADVERSARY,
    SPREAD,
    TINY_PPO,
    read_results,
    read_scalars,
    replace,
)

# --- training and evaluation -------------------------------------------------------------------


def test_shared_policy_eval_reports_every_agent(spread_run, tmp_path, capsys):
    report = eval_json(capsys, spread_run.run_dir, "-n", "3", "--render", "gif", "--out", tmp_path)
    assert list(report["agent_returns"]) == ["agent_0", "agent_1", "agent_2"]
    assert list(report["policy_returns"]) == ["shared"]
    for episode in report["per_episode"]:
        agents = episode["agent_returns"]
        assert episode["return"] == pytest.approx(sum(agents.values()))
        assert episode["length"] == 25
    from PIL import Image

    gif = Image.open(report["videos"][0])
    assert gif.n_frames == 25, "one frame of the shared render per env step"


def test_sampled_episodes_are_the_same_in_every_process(spread_run):
    """RLlib orders agents by string hashes; rlplat fixes the hash seed, so a seed is a seed."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    command = [sys.executable, "-m", "rlplat.cli", "eval", spread_run.run_dir, "-n", "3",
               "--explore", "--json"]
    runs = [
        json.loads(subprocess.run(command, env=env, capture_output=True, check=True).stdout)
        for _ in range(2)
    ]
    assert runs[0]["per_episode"] == runs[1]["per_episode"]


def test_two_policies_each_get_metrics_and_only_trained_ones_learn(ray_session, tmp_path):
    import torch

    summary = train_yaml(MULTI_AGENT_ADVERSARY, tmp_path)
    trial = Path(summary.trials[0].path)
    scalars = read_scalars(trial)
    for tag in ("policy_return/adversary", "policy_return/good", "agent_return/adversary_0",
                "agent_return/agent_0", "agent_return/agent_1", "episode/return_mean"):
        assert tag in scalars, sorted(scalars)
    # The team return is the sum of the policies' returns (over the same window).
    team = dict(scalars["episode/return_mean"])
    for step, good in scalars["policy_return/good"]:
        adversary = dict(scalars["policy_return/adversary"])[step]
        assert team[step] == pytest.approx(good + adversary, rel=1e-4)
    # Per-policy learning rate override reached RLlib.
    assert [lr for _, lr in scalars["train/lr/good"]] == pytest.approx([0.001, 0.001])
    assert summary.trials[0].policy_returns.keys() == {"adversary", "good"}

    def weights(checkpoint: Path, policy: str) -> dict:
        from ray.rllib.core.rl_module.rl_module import RLModule

        module = RLModule.from_checkpoint(
            checkpoint / "learner_group/learner/rl_module" / policy
        )
        return {k: v.clone() for k, v in module.state_dict().items()}

    first, second = sorted(trial.glob("checkpoint_*"))
    frozen = [weights(c, "adversary") for c in (first, second)]
    learning = [weights(c, "good") for c in (first, second)]
    assert all(torch.equal(frozen[0][k], frozen[1][k]) for k in frozen[0]), "not in train:"
    assert not all(torch.equal(learning[0][k], learning[1][k]) for k in learning[0])


@pytest.fixture(scope="module")
def connect_four_run(ray_session, tmp_path_factory):
    return train_yaml(CONNECT_FOUR, tmp_path_factory.mktemp("connect-four"))


def test_connect_four_never_plays_an_illegal_move(connect_four_run):
    """Both the masked learner (sampling, then greedy) and the random opponent, many moves."""
    from rlplat.experiment.load import load_experiment
    from rlplat.policy.restore import Policy
    from rlplat.policy.rollout import run_episode
    from rlplat.rllib.env_creator import rebuild_env
    from rlplat.rllib.multi_agent import mapping_for

    [checkpoint] = Path(connect_four_run.trials[0].path).glob("checkpoint_*")
    experiment = load_experiment(checkpoint / "experiment.yaml").experiment
    env = rebuild_env(experiment, None, checkpoint)
    policy = Policy.from_checkpoint(checkpoint, mapping_for(experiment, env))

    moves = {"learner": 0, "opponent": 0}
    original_act = policy.act

    def checked_act(episode, explore, shared_data):
        env_action, action, extra = original_act(episode, explore, shared_data)
        for agent, move in env_action.items():
            mask = episode.get_observations(-1)[agent]["action_mask"]
            assert mask[move] == 1, f"{agent} played column {move}, mask {mask}"
            moves[policy.mapping(agent)] += 1
        return env_action, action, extra

    policy.act = checked_act
    results = [
        run_episode(policy.actor(), env, seed=seed, explore=seed % 4 != 0) for seed in range(120)
    ]
    env.close()
    assert min(moves.values()) >= 1000, moves
    # An illegal move would end a game at once with -1 for the mover; every game here ends by
    # four in a row or a full board, so one player wins exactly what the other loses.
    for result in results:
        assert sorted(result.agent_returns.values()) in ([-1.0, 1.0], [0.0, 0.0])


def test_pixels_through_a_supersuit_chain_train_and_render(ray_session, tmp_path, capsys):
    """Pistonball (4 pistons, 20-step episodes) through the shipped chain, CNN, GIF in eval."""
    from rlplat.experiment.load import load_experiment

    shipped = EXPERIMENTS / "pistonball_ppo.yaml"
    overrides = [
        f"output_dir={tmp_path / 'out'}",
        "env.kwargs={n_pistons: 4, continuous: true, max_cycles: 20}",
        "training.train_batch_size_per_learner=40",
        "training.minibatch_size=20",
        "training.num_epochs=1",
        "stop={iterations: 1}",
    ]
    from rlplat.run.launch import train

    summary = train(load_experiment(shipped, overrides), console=Console(quiet=True))
    assert summary.trials[0].status == "finished", summary.trials[0].error
    resolved = (Path(summary.run_dir) / "experiment.yaml").read_text()
    assert "resize_v1" in resolved and "frame_stack_v1" in resolved
    report = eval_json(capsys, summary.run_dir, "-n", "1", "--render", "gif", "--out", tmp_path)
    assert report["lengths"]["mean"] == 20
    assert list(report["agent_returns"]) == ["piston_0", "piston_1", "piston_2", "piston_3"]
    from PIL import Image

    assert Image.open(report["videos"][0]).n_frames == 20


def test_gymnasium_wrapper_chain_applies_in_training_and_eval(ray_session, tmp_path, capsys):
    wrapped = "id: CartPole-v1\n  wrappers:\n    - TimeLimit: {max_episode_steps: 30}"
    text = replace(TINY_PPO, "id: CartPole-v1", wrapped)
    summary = train_yaml(text, tmp_path, "stop.iterations=1")
    [result] = read_results(Path(summary.trials[0].path))
    assert result["env_runners"]["episode_len_max"] <= 30
    report = eval_json(capsys, summary.run_dir, "-n", "5")
    assert report["lengths"]["max"] <= 30


# --- ONNX export (rlplat export) ----------------------------------------------------------------


def test_shared_policy_exports_one_graph_for_every_agent(spread_run, tmp_path, capsys):
    report, manifest = export_report(capsys, spread_run.run_dir, tmp_path / "spread")
    assert report["parity"]["passed"] and report["parity"]["agreement"] == 1.0
    # Every agent's action at every step: 5 episodes x 25 steps x 3 agents, twice.
    assert report["parity"]["compared_actions"] == 2 * 5 * 25 * 3
    assert "shared.onnx" in report["files"]
    assert manifest["agents"] == dict.fromkeys(["agent_0", "agent_1", "agent_2"], "shared")
    from rlplat.runtime import load

    policy = load(report["directory"])
    assert policy.agents == ["agent_0", "agent_1", "agent_2"]
    assert policy.policy_for("agent_1").network is policy.policy_for("agent_2").network


def test_masked_export_plays_only_legal_moves(connect_four_run, tmp_path, capsys):
    """The action mask is an input of the graph; the random opponent is not a graph."""
    report, manifest = export_report(capsys, connect_four_run.run_dir, tmp_path / "c4")
    parity = report["parity"]
    assert parity["passed"] and parity["agreement"] == 1.0 and parity["compared_actions"] > 0
    assert parity["not_compared"] == ["opponent (random)"]
    assert sorted(report["files"]) == [
        "experiment.yaml", "learner.onnx", "parity.json", "policy.json"
    ]
    learner = manifest["policies"]["learner"]
    assert [i["name"] for i in learner["inputs"]] == ["obs", "action_mask"]
    assert manifest["policies"]["opponent"]["kind"] == "random"
    from rlplat.runtime import load

    policy = load(report["directory"])
    board = np.zeros((6, 7, 2), np.int8)
    for column in range(7):
        mask = np.eye(7, dtype=np.int8)[column]  # only this column is legal
        obs = {"observation": board, "action_mask": mask}
        assert policy.policy_for("player_0").act(obs) == column  # the learner's graph
        assert policy.policy_for("player_1").act(obs) == column  # the runtime's random draw


# --- MAPPO ----------------------------------------------------------------------------------------


def test_mappo_critics_read_the_team_state_and_the_actors_export(ray_session, tmp_path, capsys):
    """Per-agent MAPPO actors on simple_spread: each critic's input is mpe2's state() (the three
    agents' 18 numbers) and the agent's one-hot place; the actors export with a passing parity."""
    import pickle

    summary = train_yaml(
        replace(replace(SPREAD, "algorithm: PPO", "algorithm: MAPPO"), "shared", "independent"),
        tmp_path,
    )
    [trial] = summary.trials
    learners = read_results(Path(trial.path))[-1]["learners"]
    assert all(np.isfinite(learners[a]["vf_loss"]) for a in ("agent_0", "agent_1", "agent_2"))
    resolved = (Path(summary.run_dir) / "experiment.yaml").read_text()
    assert "global_state: env" in resolved, "auto resolved to mpe2's own state()"
    modules = "checkpoint_*/learner_group/learner/rl_module"
    [state] = Path(trial.path).glob(f"{modules}/agent_1/module_state.pkl")
    weights = pickle.loads(state.read_bytes())
    assert weights["critic_encoder.net.mlp.0.weight"].shape[1] == 3 * 18 + 3
    assert weights["encoder.encoder.net.mlp.0.weight"].shape[1] == 18

    report, manifest = export_report(capsys, summary.run_dir, tmp_path / "export")
    assert report["parity"]["passed"], report["parity"]
    assert sorted(manifest["agents"].values()) == ["agent_0", "agent_1", "agent_2"]
