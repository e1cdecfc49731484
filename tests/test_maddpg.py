"""MADDPG: the joint replay, bad input, and short real runs (continuous and Gumbel-softmax
discrete) that checkpoint, evaluate (against a random side), export and resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import ParallelEnv

from rlplat.algorithms.maddpg.joint_replay import JointReplay, column
from tests.test_config_errors import assert_rejected, replace
from tests.test_eval import eval_json
from tests.test_train import read_results

TINY_SPREAD = """\
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
TINY_ADVERSARY = (
    TINY_SPREAD.replace("simple_spread_v3", "simple_adversary_v3")
    .replace("{N: 3, max_cycles: 25, continuous_actions: true}", "{N: 2, max_cycles: 25}")
    .replace(
        "policies: independent",
        'policies: {"adversary_*": adversary, "agent_*": good}\n  random: [adversary]',
    )
)


class MixedActions(ParallelEnv):
    """Two agents, one with discrete and one with continuous actions (for the bad-input test)."""

    metadata = {"name": "mixed_actions_v0", "render_modes": []}

    def __init__(self) -> None:
        self.possible_agents = ["agent_0", "agent_1"]
        self.agents: list[str] = []
        self._steps = 0

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-1.0, 1.0, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3) if agent == "agent_0" else spaces.Box(-1.0, 1.0, (2,), np.float32)

    def _obs(self) -> dict[str, np.ndarray]:
        return {agent: np.zeros(2, np.float32) for agent in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents, self._steps = list(self.possible_agents), 0
        return self._obs(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self._steps += 1
        done = self._steps >= 5
        observations = self._obs()
        rewards = {agent: 0.0 for agent in self.agents}
        terminated = {agent: False for agent in self.agents}
        truncated = {agent: done for agent in self.agents}
        infos = {agent: {} for agent in self.agents}
        if done:
            self.agents = []
        return observations, rewards, terminated, truncated, infos


def test_joint_replay_samples_every_agent_at_the_same_step_and_restores():
    replay = JointReplay(capacity=8, agents=["a", "b"], seed=0)
    steps = np.arange(12, dtype=np.float32)  # 12 steps into 8 rows: the ring wraps
    replay._write(
        {
            column("obs", 0): steps[:, None],
            column("obs", 1): -steps[:, None],
            column("rewards", 0): steps,
            column("rewards", 1): 10 * steps,
        }
    )
    assert len(replay) == 8
    rows = replay.sample(64)
    assert np.array_equal(rows[column("obs", 1)][:, 0], -rows[column("obs", 0)][:, 0])
    assert np.array_equal(rows[column("rewards", 1)], 10 * rows[column("rewards", 0)])
    assert rows[column("rewards", 0)].min() >= 4, "the four oldest steps were overwritten"

    restored = JointReplay(capacity=8, agents=["a", "b"], seed=123)
    restored.set_state(replay.get_state())
    assert all(
        np.array_equal(a, b)
        for a, b in zip(restored.sample(16).values(), replay.sample(16).values(), strict=True)
    )


BAD = {
    "single-agent env": (
        lambda t: replace(
            replace(t, "pettingzoo: mpe2.simple_spread_v3", "id: Pendulum-v1"),
            "  kwargs: {N: 3, max_cycles: 25, continuous_actions: true}\n",
            "",
        ).replace("multi_agent:\n  policies: independent\n", ""),
        ["'algorithm'", "'Pendulum-v1' is a single-agent environment", "TD3"],
    ),
    "turn-based env": (
        lambda t: replace(
            replace(t, "mpe2.simple_spread_v3", "pettingzoo.classic.connect_four_v3"),
            "  kwargs: {N: 3, max_cycles: 25, continuous_actions: true}\n",
            "",
        ),
        ["'algorithm'", "turn-based (PettingZoo's AEC API", "parallel env"],
    ),
    "mixed action kinds in one shared policy": (
        lambda t: replace(
            replace(
                t, "pettingzoo: mpe2.simple_spread_v3", "factory: tests.test_maddpg:MixedActions"
            ),
            "  kwargs: {N: 3, max_cycles: 25, continuous_actions: true}\n",
            "",
        ).replace("policies: independent", "policies: shared"),
        [
            "'algorithm'",
            "policy 'shared'",
            "discrete actions (agent_0)",
            "continuous ones (agent_1)",
        ],
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_maddpg_refuses_envs_it_cannot_train(case, write_yaml, tmp_path, capsys):
    edit, expected = BAD[case]
    path = write_yaml(edit(TINY_SPREAD.replace("OUTPUT", str(tmp_path / "out"))))
    assert_rejected(path, expected, capsys, tmp_path / "out")


@pytest.fixture(scope="module")
def maddpg_runs(ray_session, tmp_path_factory):
    """Two short MADDPG runs: continuous simple_spread, and discrete simple_adversary with a
    random adversary."""
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    runs = {}
    for name, text in (("spread", TINY_SPREAD), ("adversary", TINY_ADVERSARY)):
        tmp = tmp_path_factory.mktemp(name)
        path = tmp / "exp.yaml"
        path.write_text(text.replace("OUTPUT", str(tmp / "out")))
        runs[name] = train(load_experiment(path), console=Console(quiet=True))
    return runs


@pytest.mark.parametrize("name", ["spread", "adversary"])
def test_maddpg_trains_every_policy_from_aligned_joint_steps(name, maddpg_runs):
    [trial] = maddpg_runs[name].trials
    assert trial.error is None and trial.iterations == 2
    last = read_results(Path(trial.path))[-1]
    replay = last["replay_buffer"]
    assert replay["steps_stored"] >= 600 and replay["steps_not_aligned"] == 0
    trained = {"spread": ["agent_0", "agent_1", "agent_2"], "adversary": ["good"]}[name]
    learners = last["learners"]
    for policy in trained:
        assert np.isfinite(learners[policy]["qf_loss"]) and np.isfinite(
            learners[policy]["policy_loss"]
        )
    assert "adversary" not in learners, "a random policy is never trained"


def test_maddpg_checkpoint_evaluates_with_a_side_swapped_for_random(maddpg_runs, capsys):
    run_dir = maddpg_runs["adversary"].run_dir
    trained = eval_json(capsys, run_dir, "-n", "2")
    assert set(trained["policy_returns"]) == {"adversary", "good"}
    swapped = eval_json(capsys, run_dir, "-n", "2", "--random", "good")
    assert swapped["random"] == ["good"]
    assert swapped["per_episode"] != trained["per_episode"], "the good agents acted otherwise"


def test_maddpg_export_passes_parity(maddpg_runs, tmp_path, capsys):
    from tests.test_export import export_json

    report = export_json(capsys, maddpg_runs["spread"].run_dir, "--out", tmp_path / "x", "-n", "2")
    assert report["parity"]["passed"] and report["parity"]["compared_actions"] > 0
    manifest = json.loads((Path(report["directory"]) / "policy.json").read_text())
    assert set(manifest["policies"]) == {"agent_0", "agent_1", "agent_2"}
