"""VMAS's batched worlds as RLlib's vector of multi-agent envs (``env.backend: vmas``): the
single-world env's agents and spaces, and each world's episode ending and starting again on its
own."""

from __future__ import annotations

import numpy as np
import pytest

from rlplat.environments.gymma import vmas_scenario
from rlplat.environments.vmas_worlds import VmasWorlds

BALANCE = {"scenario": "balance", "max_steps": 4, "n_agents": 3}


def _ended(terminated: list[dict], truncated: list[dict]) -> list[bool]:
    return [t["__all__"] or c["__all__"] for t, c in zip(terminated, truncated, strict=True)]


def _step(worlds: VmasWorlds):
    actions = [
        {agent: worlds.single_action_spaces[agent].sample() for agent in worlds.possible_agents}
        for _ in range(worlds.num_envs)
    ]
    return worlds.step(actions)


def test_every_world_is_the_single_world_env_rlplat_evaluates():
    worlds = VmasWorlds(num_envs=2, **BALANCE)
    single = vmas_scenario(**BALANCE)
    assert worlds.possible_agents == single.possible_agents == ["agent_0", "agent_1", "agent_2"]
    assert worlds.single_observation_spaces == single.observation_spaces
    assert worlds.single_action_spaces == single.action_spaces
    assert worlds.envs[1].unwrapped.get_action_space("agent_2") == single.action_spaces["agent_2"]


def test_each_world_ends_its_episode_and_starts_the_next_on_its_own():
    worlds = VmasWorlds(num_envs=3, **BALANCE)
    worlds.reset(seed=[0, 1, 2])
    for _ in range(2):
        _step(worlds)
    worlds.world.reset_at(1)  # world 1's episode starts two steps after the others'
    ends = []
    for _ in range(2):
        observations, rewards, terminated, truncated, _ = _step(worlds)
        ends.append(_ended(terminated, truncated))
    assert ends[-1] == [True, False, True], "max_steps cut off worlds 0 and 2, not world 1"
    assert truncated[0] == {"agent_0": True, "agent_1": True, "agent_2": True, "__all__": True}
    last = observations

    observations, rewards, terminated, truncated, _ = _step(worlds)
    # Worlds 0 and 2 start again: their first observations, no reward; world 1 goes on.
    assert rewards[0] == dict.fromkeys(worlds.possible_agents, 0.0) == rewards[2]
    assert any(value != 0.0 for value in rewards[1].values())
    assert not np.allclose(observations[0]["agent_0"], last[0]["agent_0"])
    assert not any(_ended(terminated, truncated))

    _, _, terminated, truncated, _ = _step(worlds)
    assert _ended(terminated, truncated) == [False, True, False], "world 1 ends two steps later"


def test_a_batch_of_one_world_plays_the_single_world_envs_episode():
    """Same seed, same actions: the batch's world and the env rlplat evaluates on observe, are
    rewarded and end alike, step for step."""
    from rlplat.environments.pettingzoo import to_multi_agent_env

    kwargs = {**BALANCE, "max_steps": 100}
    worlds = VmasWorlds(num_envs=1, **kwargs)
    single = to_multi_agent_env(vmas_scenario(**kwargs))
    batch_obs, _ = worlds.reset(seed=[5])
    single_obs, _ = single.reset(seed=5)
    rng = np.random.default_rng(0)
    for _ in range(100):
        np.testing.assert_allclose(batch_obs[0]["agent_1"], single_obs["agent_1"], atol=1e-5)
        actions = {a: rng.uniform(-1, 1, 2).astype(np.float32) for a in worlds.possible_agents}
        batch_obs, batch_rewards, terminated, truncated, _ = worlds.step([actions])
        single_obs, single_rewards, single_terminated, single_truncated, _ = single.step(actions)
        assert batch_rewards[0] == pytest.approx(single_rewards, abs=1e-5)
        assert terminated[0]["__all__"] == single_terminated["__all__"]
        assert truncated[0]["__all__"] == single_truncated["__all__"]
        if single_terminated["__all__"] or single_truncated["__all__"]:
            break
