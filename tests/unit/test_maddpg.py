"""MADDPG and MASAC without training: the joint replay, and the envs they refuse before Ray
starts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import ParallelEnv

from rlplat.algorithms.maddpg.joint_replay import JointReplay, column
from tests.helpers import MADDPG_SPREAD, assert_rejected, replace


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
                t,
                "pettingzoo: mpe2.simple_spread_v3",
                "factory: tests.unit.test_maddpg:MixedActions",
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
    "MASAC on discrete actions": (
        lambda t: replace(
            replace(t, "algorithm: MADDPG", "algorithm: MASAC"),
            "continuous_actions: true",
            "continuous_actions: false",
        ),
        ["MASAC needs a continuous (Box) action space", "MADDPG (Gumbel-softmax), MAPPO or QMIX"],
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_maddpg_refuses_envs_it_cannot_train(case, write_yaml, tmp_path):
    edit, expected = BAD[case]
    path = write_yaml(edit(MADDPG_SPREAD.replace("OUTPUT", str(tmp_path / "out"))))
    assert_rejected(path, expected, tmp_path / "out")
