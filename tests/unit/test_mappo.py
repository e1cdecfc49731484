"""MAPPO without training: what its critic reads (the env's state or the agents' observations,
with the agent's place), how that lines up with each agent step of a learner batch, and the envs
it refuses before Ray starts."""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from pettingzoo import ParallelEnv
from ray.rllib.connectors.learner import (
    AddObservationsFromEpisodesToBatch,
    AddOneTsToEpisodesAndTruncate,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

from rlplat.algorithms.mappo.connectors import CriticStateToBatch
from rlplat.algorithms.mappo.rl_module import CRITIC_STATE_SIZE, MAPPOModule
from rlplat.environments.critic_state import CriticStateEnv
from rlplat.environments.global_state import CRITIC_STATE, GlobalStateError
from rlplat.environments.pettingzoo import to_multi_agent_env
from tests.helpers import EXPERIMENTS, assert_rejected


class Counters(ParallelEnv):
    """Two agents; agent i observes [i, t] at step t; the state is [10 t]. ``agent_1`` leaves
    after ``leaves_at`` steps (if given); the episode lasts 3 steps."""

    metadata = {"name": "counters_v0", "render_modes": []}
    state_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def __init__(self, leaves_at: int | None = None) -> None:
        self.possible_agents = ["agent_0", "agent_1"]
        self.agents: list[str] = []
        self.leaves_at = leaves_at
        self.t = 0

    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def state(self) -> np.ndarray:
        return np.array([10.0 * self.t], np.float32)

    def _obs(self) -> dict[str, np.ndarray]:
        return {
            agent: np.array([self.possible_agents.index(agent), self.t], np.float32)
            for agent in self.agents
        }

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents, self.t = list(self.possible_agents), 0
        return self._obs(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        leaving = self.t == self.leaves_at
        done = self.t >= 3
        agents = list(self.agents)
        observations = self._obs()
        rewards = {agent: 1.0 for agent in agents}
        terminated = {a: done or (leaving and a == "agent_1") for a in agents}
        truncated = {agent: False for agent in agents}
        self.agents = [a for a in agents if not terminated[a]]
        return observations, rewards, terminated, truncated, {agent: {} for agent in agents}


def _critic_states(env: CriticStateEnv, steps: int) -> list[dict[str, np.ndarray]]:
    _, infos = env.reset(seed=0)
    seen = [{agent: info[CRITIC_STATE] for agent, info in infos.items()}]
    for _ in range(steps):
        _, _, _, _, infos = env.step({agent: 0 for agent in env.env.agents})
        seen.append({agent: info[CRITIC_STATE] for agent, info in infos.items()})
    return seen


def test_the_critic_reads_the_envs_state_and_the_agents_place():
    env = CriticStateEnv(to_multi_agent_env(Counters()), "auto")
    assert env.source == "env" and env.size == 1 + 2
    states = _critic_states(env, 2)
    np.testing.assert_array_equal(states[2]["agent_0"], [20.0, 1.0, 0.0])
    np.testing.assert_array_equal(states[2]["agent_1"], [20.0, 0.0, 1.0])


def test_without_a_state_the_critic_reads_every_observation_zeros_for_a_gone_agent():
    env = CriticStateEnv(to_multi_agent_env(Counters(leaves_at=1)), "observations")
    assert env.source == "observations" and env.size == 2 + 2 + 2
    states = _critic_states(env, 2)
    # step 1: both observe; step 2: agent_1 has left, its slots are zeros
    np.testing.assert_array_equal(states[1]["agent_1"], [0, 1, 1, 1, 0, 1])
    assert list(states[2]) == ["agent_0"]
    np.testing.assert_array_equal(states[2]["agent_0"], [0, 2, 0, 0, 1, 0])


def test_asking_for_the_envs_state_where_there_is_none_is_refused():
    class Stateless(Counters):
        state_space = None

    with pytest.raises(GlobalStateError, match="defines no state"):
        CriticStateEnv(to_multi_agent_env(Stateless()), "env")


def test_each_agent_steps_critic_state_lines_up_with_its_observation_in_the_learner_batch():
    env = CriticStateEnv(to_multi_agent_env(Counters()), "observations")
    observations, infos = env.reset(seed=0)
    episode = MultiAgentEpisode(agent_module_ids={a: "shared" for a in env.possible_agents})
    episode.add_env_reset(observations=observations, infos=infos)
    for _ in range(3):
        actions = {agent: 0 for agent in observations}
        observations, rewards, terminated, truncated, infos = env.step(actions)
        episode.add_env_step(
            observations, actions, rewards, infos, terminateds=terminated, truncateds=truncated
        )
    batch: dict = {}
    for piece in (
        AddOneTsToEpisodesAndTruncate(),
        AddObservationsFromEpisodesToBatch(as_learner_connector=True),
        CriticStateToBatch(),
    ):
        batch = piece(rl_module=None, batch=batch, episodes=[episode], shared_data={})
    for key, rows in batch[Columns.OBS].items():
        agent = key[1]
        place = env.possible_agents.index(agent)
        states = np.stack(batch[CRITIC_STATE][key])
        assert len(states) == len(rows) == 3 + 1  # the bootstrap step included
        np.testing.assert_array_equal(states[:, 2 * place : 2 * place + 2], np.stack(rows))
        np.testing.assert_array_equal(states[:, 4 + place], 1.0)


def test_the_value_follows_the_critic_state_and_ignores_the_observation():
    model_config = dataclasses.asdict(DefaultModelConfig()) | {CRITIC_STATE_SIZE: 5}
    torch.manual_seed(0)
    module = MAPPOModule(
        observation_space=gym.spaces.Box(-1, 1, (3,), np.float32),
        action_space=gym.spaces.Discrete(2),
        model_config=model_config,
    )
    state = torch.randn(4, 5)
    values = module.compute_values({Columns.OBS: torch.randn(4, 3), CRITIC_STATE: state})
    same_state = module.compute_values({Columns.OBS: torch.randn(4, 3), CRITIC_STATE: state})
    other_state = module.compute_values({Columns.OBS: torch.randn(4, 3), CRITIC_STATE: -state})
    torch.testing.assert_close(values, same_state)
    assert not torch.allclose(values, other_state)
    assert not hasattr(module.encoder, "critic_encoder"), "the observation feeds the actor only"


@pytest.mark.parametrize(
    ("path", "overrides", "expected"),
    [
        ("cartpole_ppo.yaml", [], ["single-agent environment", "PPO for a single agent"]),
        ("connect_four_ppo.yaml", ["multi_agent=null"], ["turn-based", "parallel env"]),
        (
            "marl/lbf_ppo.yaml",
            ["training.global_state=env"],
            ["training.global_state", "defines no state()", "'observations'"],
        ),
    ],
)
def test_mappo_refuses_envs_without_a_team_state(path, overrides, expected, tmp_path):
    assert_rejected(
        EXPERIMENTS / path,
        expected,
        tmp_path / "out",
        "algorithm=MAPPO",
        f"output_dir={tmp_path / 'out'}",
        *overrides,
    )
