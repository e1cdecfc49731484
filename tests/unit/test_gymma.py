"""Gymnasium multi-agent envs (Level-Based Foraging, Multi-Robot Warehouse) as PettingZoo
parallel envs: env.gymma."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from rlplat.environments.gymma import GymMultiAgentEnv, make_gymma

LBF = "lbforaging:Foraging-8x8-2p-2f-coop-v3"


class Countdown(gym.Env):
    """Two agents; the team is done after ``length`` steps; one reward for the whole team."""

    observation_space = gym.spaces.Tuple([gym.spaces.Box(0, 100, (1,), np.float32)] * 2)
    action_space = gym.spaces.Tuple([gym.spaces.Discrete(2)] * 2)

    def __init__(self, length: int = 3, observations: int = 2):
        self.length = length
        self.observations = observations

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(), {}

    def step(self, actions):
        self.t += 1
        return self._obs(), 1.5, self.t >= self.length, False, {}

    def _obs(self):
        return tuple(np.array([self.t], np.float32) for _ in range(self.observations))


def play(env: GymMultiAgentEnv, seed: int = 0) -> tuple[int, dict, dict, dict]:
    """One episode of random actions: its length and the last step's rewards, terminations
    and truncations."""
    env.reset(seed=seed)
    steps = 0
    while env.agents:
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        _, rewards, terminations, truncations, _ = env.step(actions)
        steps += 1
    return steps, rewards, terminations, truncations


def test_level_based_foraging_keeps_pettingzoos_parallel_api():
    env = make_gymma(LBF, time_limit=50)
    assert env.possible_agents == ["agent_0", "agent_1"]
    assert env.action_space("agent_1") == gym.spaces.Discrete(6)
    parallel_api_test(env, num_cycles=120)


def test_the_time_limit_cuts_an_episode_off_as_a_truncation():
    steps, _, terminations, truncations = play(make_gymma(LBF, time_limit=7))
    assert steps == 7
    assert truncations == {"agent_0": True, "agent_1": True}
    assert not any(terminations.values())


def test_the_envs_own_end_before_the_limit_is_a_termination():
    steps, rewards, terminations, truncations = play(GymMultiAgentEnv(Countdown(3), 10))
    assert steps == 3
    assert all(terminations.values()) and not any(truncations.values())
    assert rewards == {"agent_0": 1.5, "agent_1": 1.5}, "a team reward is every agent's"


def test_a_seed_fixes_the_first_observations():
    # A fresh env per seed: LBF 2.0 places agents away from where the last episode left them.
    def first(seed):
        return np.concatenate(list(make_gymma(LBF).reset(seed=seed)[0].values()))

    assert np.array_equal(first(3), first(3))
    assert not all(np.array_equal(first(3), first(seed)) for seed in range(4, 8))


def test_an_env_returning_observations_for_fewer_agents_is_refused():
    env = GymMultiAgentEnv(Countdown(observations=1))
    with pytest.raises(ValueError, match="returned 1 observations for 2 agents"):
        env.reset(seed=0)



def test_a_vmas_scenario_plays_through_its_gymnasium_wrapper():
    from rlplat.environments.gymma import vmas_scenario

    env = vmas_scenario("balance", max_steps=5, n_agents=3)
    assert env.possible_agents == ["agent_0", "agent_1", "agent_2"]
    assert env.action_space("agent_2").shape == (2,)
    env.reset(seed=0)
    *_, infos = env.step({a: env.action_space(a).sample() for a in env.agents})
    assert set(infos["agent_1"]) == {"pos_rew", "ground_rew"}, "each agent its own info"
    steps, rewards, _, truncations = play(env)
    assert steps == 5 and all(truncations.values())
    assert len(set(rewards.values())) == 1, "balance rewards the team as one"
