"""QMIX / VDN / IQL without training: mixers, module, targets, episode store, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlplat.algorithms.qmix.episode_store import EpisodeStore
from rlplat.algorithms.qmix.learner import LEARNER_COUNTERS, RunningMeanStd, lambda_returns
from rlplat.algorithms.qmix.qmix import QMIXConfig
from rlplat.algorithms.qmix.rl_module import (
    Q_TOTAL,
    Q_VALUES,
    NoMixer,
    QMixer,
    QMIXModule,
    SumMixer,
)
from rlplat.environments.make import EnvCreator
from rlplat.environments.team import TeamEnvCreator
from rlplat.experiment.schema import EnvSpec
from tests.helpers import EXPERIMENTS, assert_rejected, replace

SPREAD_SPEC = EnvSpec(pettingzoo="mpe2.simple_spread_v3", kwargs={"N": 3, "max_cycles": 25})


def spread_team_env():
    return TeamEnvCreator(EnvCreator(SPREAD_SPEC))()


def make_module(env, **training) -> QMIXModule:
    config = QMIXConfig().training(**training)
    return QMIXModule(
        observation_space=env.observation_space,
        action_space=env.action_space,
        model_config=config.model_config,
    )


def play_random_episodes(env, count: int, seed: int = 0) -> list[dict]:
    """Episodes as the episode store keeps them, played with random actions."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    rng = np.random.default_rng(seed)
    episodes = []
    for index in range(count):
        episode = SingleAgentEpisode(
            observation_space=env.observation_space, action_space=env.action_space
        )
        observation, info = env.reset(seed=seed + index)
        episode.add_env_reset(observation=observation, infos=info)
        while not episode.is_done:
            action = rng.integers(env.n_actions, size=len(env.members))
            observation, reward, terminated, truncated, info = env.step(action)
            episode.add_env_step(
                observation, action, reward, infos=info, terminated=terminated, truncated=truncated
            )
        episodes.append(episode.to_numpy())
    return episodes


# --- mixers -------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_qmix_mixer_is_monotonic_in_every_agent_q(seed):
    torch.manual_seed(seed)
    mixer = QMixer(n_agents=4, state_dim=7, embed_dim=8, hyper_dim=16, layers=2)
    q = torch.randn(256, 4, requires_grad=True) * 5
    q.retain_grad()
    states = torch.randn(256, 7) * 3
    mixer(q, states).sum().backward()
    assert (q.grad >= 0).all(), "dQ_tot/dQ_a must never be negative"
    assert (q.grad > 0).float().mean() > 0.5, "the mixer should depend on the agents' Qs"
    # ...while the state enters non-monotonically (it only sets the weights).
    one = torch.randn(1, 4)
    values = [mixer(one, torch.randn(1, 7)).item() for _ in range(10)]
    assert np.std(values) > 0


def test_vdn_is_the_sum_and_iql_keeps_each_agent():
    q = torch.randn(3, 5, 4)
    state = torch.randn(3, 5, 9)
    assert torch.allclose(SumMixer()(q, state), q.sum(-1, keepdim=True))
    assert torch.equal(NoMixer()(q, state), q)


# --- module -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mixer", "k"), [("qmix", 1), ("vdn", 1), ("none", 3)])
@pytest.mark.parametrize("recurrent", [True, False])
def test_training_forward_shapes(mixer, k, recurrent):
    env = spread_team_env()
    module = make_module(env, mixer=mixer, recurrent=recurrent)
    store = EpisodeStore(capacity=10, seed=0)
    store.add(play_random_episodes(env, 4))
    batch = {key: torch.as_tensor(value) for key, value in store.sample(3).items()}
    out = module.forward_train(batch)
    assert out[Q_VALUES].shape == (3, 26, 3, 5)  # 25 steps + the final observation
    assert out[Q_TOTAL].shape == (3, 25, k)
    module.make_target_networks()
    assert module.forward_target(batch)[Q_VALUES].shape == (3, 26, 3, 5)


def test_acting_never_picks_a_masked_action():
    env = spread_team_env()
    module = make_module(env)
    observation, _ = env.reset(seed=0)
    batch_obs = {
        k: torch.as_tensor(np.repeat(v[None, None], 64, 0)) for k, v in observation.items()
    }
    mask = torch.zeros(64, 1, 3, 5)
    mask[..., 0, 2] = 1.0  # agent 0 may only take action 2
    mask[..., 1, 3:] = 1.0  # agent 1: actions 3 and 4
    mask[..., 2, :] = 1.0
    batch_obs["action_mask"] = mask
    state = {"h": torch.zeros(64, 3, 64)}
    for epsilon_t in (0, 10**9):  # fully random (t=0: epsilon 1), then epsilon at its floor
        with torch.no_grad():
            out = module.forward_exploration({"obs": batch_obs, "state_in": state}, t=epsilon_t)
        actions = out["actions"][:, 0]
        assert (actions[:, 0] == 2).all()
        assert (actions[:, 1] >= 3).all()


def test_random_actions_are_uniform_over_the_allowed_ones():
    """At epsilon 1 every agent acts at random, evenly over the actions its mask allows; at
    epsilon 0.5 half of them do (a random pick is the greedy one a fifth of the time)."""
    env = spread_team_env()
    module = make_module(env, recurrent=False)
    observation, _ = env.reset(seed=0)
    batch_obs = {k: torch.as_tensor(np.repeat(v[None], 3000, 0)) for k, v in observation.items()}
    batch_obs["action_mask"] = torch.ones(3000, 3, 5)
    batch_obs["action_mask"][:, 1, :3] = 0.0  # agent 1: actions 3 and 4 only
    torch.manual_seed(0)
    with torch.no_grad():
        actions = module.forward_exploration({"obs": batch_obs}, t=0)["actions"]
    counts = [torch.bincount(actions[:, agent], minlength=5).float() / 3000 for agent in (0, 1)]
    assert torch.allclose(counts[0], torch.full((5,), 0.2), atol=0.03)
    assert torch.allclose(counts[1], torch.tensor([0.0, 0.0, 0.0, 0.5, 0.5]), atol=0.03)
    half = next(t for t in range(10**6) if module.epsilon(t) <= 0.5)
    with torch.no_grad():
        greedy = module.forward_inference({"obs": batch_obs})["actions"][:, 0]
        actions = module.forward_exploration({"obs": batch_obs}, t=half)["actions"][:, 0]
    assert abs(float((actions == greedy).float().mean()) - 0.6) < 0.03


def test_target_max_ignores_masked_actions():
    from rlplat.algorithms.qmix.rl_module import masked_argmax

    q = torch.tensor([[5.0, 1.0, 3.0]])
    assert masked_argmax(q, torch.tensor([[0.0, 1.0, 1.0]])).item() == 2
    assert masked_argmax(q, torch.tensor([[1.0, 1.0, 1.0]])).item() == 0


def test_hidden_state_starts_from_zero_at_every_episode_start():
    """Acting: the env runners' connectors give the initial state to a new episode and the last
    state to a running one. Training: an episode's Q-values do not depend on its batch-mates."""
    from ray.rllib.core.columns import Columns
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    env = spread_team_env()
    module = make_module(env)
    config = QMIXConfig().environment(
        observation_space=env.observation_space, action_space=env.action_space
    )
    to_module = config.build_env_to_module_connector(
        spaces={
            "__env__": (env.observation_space, env.action_space),
            "__env_single__": (env.observation_space, env.action_space),
        }
    )

    def state_in(episode):
        batch = to_module(
            rl_module=module, batch={}, episodes=[episode], explore=False, shared_data={}
        )
        return batch, batch[Columns.STATE_IN]["h"]

    episode = SingleAgentEpisode(
        observation_space=env.observation_space, action_space=env.action_space
    )
    observation, _ = env.reset(seed=0)
    episode.add_env_reset(observation=observation)
    batch, hidden = state_in(episode)
    assert torch.count_nonzero(hidden) == 0
    with torch.no_grad():
        out = module.forward_inference(batch)
    assert torch.count_nonzero(out[Columns.STATE_OUT]["h"]) > 0
    action = out[Columns.ACTIONS][0, 0].numpy()
    observation, reward, terminated, truncated, _ = env.step(action)
    episode.add_env_step(
        observation,
        action,
        reward,
        terminated=terminated,
        truncated=truncated,
        extra_model_outputs={Columns.STATE_OUT: {"h": out[Columns.STATE_OUT]["h"][0].numpy()}},
    )
    _, carried = state_in(episode)
    assert torch.allclose(carried, out[Columns.STATE_OUT]["h"])
    fresh = SingleAgentEpisode(
        observation_space=env.observation_space, action_space=env.action_space
    )
    fresh.add_env_reset(observation=env.reset(seed=1)[0])
    assert torch.count_nonzero(state_in(fresh)[1]) == 0

    store = EpisodeStore(capacity=10, seed=0)
    store.add(play_random_episodes(env, 3))
    alone = {k: torch.as_tensor(v[:1]) for k, v in store.sample(3).items()}
    together = {k: torch.cat([alone[k], torch.as_tensor(v)]) for k, v in store.sample(3).items()}
    assert torch.allclose(
        module.unroll(module.agent, together)[:1], module.unroll(module.agent, alone), atol=1e-6
    )


@pytest.mark.parametrize("recurrent", [True, False])
def test_team_connectors_match_rllibs_default_pipelines(recurrent):
    """QMIX's one-piece connectors hand the module the same batch, and the env the same actions
    and per-episode states, as RLlib's default pipelines, for a new and a running episode."""
    import tree
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.rllib.core.columns import Columns
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    env = spread_team_env()
    torch.manual_seed(0)
    module = make_module(env, recurrent=recurrent)
    config = QMIXConfig().environment(
        observation_space=env.observation_space, action_space=env.action_space
    )
    spaces = {
        "__env__": (env.observation_space, env.action_space),
        "__env_single__": (env.observation_space, env.action_space),
    }
    pipelines = {
        "team": (
            config.build_env_to_module_connector(spaces=spaces),
            config.build_module_to_env_connector(spaces=spaces),
        ),
        "rllib": (
            AlgorithmConfig.build_env_to_module_connector(config, spaces=spaces),
            AlgorithmConfig.build_module_to_env_connector(config, spaces=spaces),
        ),
    }
    assert len(pipelines["team"][0]) == len(pipelines["team"][1]) == 1

    running, fresh = (
        SingleAgentEpisode(observation_space=env.observation_space, action_space=env.action_space)
        for _ in range(2)
    )
    running.add_env_reset(observation=env.reset(seed=0)[0])
    fresh.add_env_reset(observation=env.reset(seed=1)[0])
    for step in range(3):
        episodes = [running, fresh] if step == 2 else [running]
        outputs = {}
        for name, (to_module, to_env) in pipelines.items():
            common = {"episodes": episodes, "explore": False, "shared_data": {}}
            batch = to_module(rl_module=module, batch={}, **common)
            out = to_env(rl_module=module, batch=module.forward_inference(batch), **common)
            outputs[name] = (batch, out)
        (team_batch, team_out), (rllib_batch, rllib_out) = outputs["team"], outputs["rllib"]
        tree.assert_same_structure(team_batch, rllib_batch)
        for mine, theirs in zip(tree.flatten(team_batch), tree.flatten(rllib_batch), strict=True):
            assert mine.dtype == theirs.dtype and torch.equal(mine, theirs)
        np.testing.assert_array_equal(team_out[Columns.ACTIONS], rllib_out[Columns.ACTIONS])
        assert team_out[Columns.ACTIONS].dtype == rllib_out[Columns.ACTIONS].dtype
        if recurrent:
            for mine, theirs in zip(
                team_out[Columns.STATE_OUT], rllib_out[Columns.STATE_OUT], strict=True
            ):
                np.testing.assert_array_equal(mine["h"], theirs["h"])
        else:
            assert Columns.STATE_OUT not in team_out
        action = team_out[Columns.ACTIONS][0]
        observation, reward, terminated, truncated, _ = env.step(action)
        extra = {Columns.STATE_OUT: team_out[Columns.STATE_OUT][0]} if recurrent else {}
        running.add_env_step(
            observation,
            action,
            reward,
            terminated=terminated,
            truncated=truncated,
            extra_model_outputs=extra,
        )


# --- targets and episode store ------------------------------------------------------------------


def test_lambda_returns_one_step_and_monte_carlo():
    rewards = torch.tensor([[1.0, 2.0, 3.0, 0.0]])[..., None]
    terminated = torch.tensor([[0.0, 0.0, 1.0, 0.0]])[..., None]
    filled = torch.tensor([[1.0, 1.0, 1.0, 0.0]])[..., None]  # 3 real steps, 1 padding
    next_values = torch.tensor([[10.0, 20.0, 30.0, 40.0]])[..., None]
    one_step = lambda_returns(rewards, terminated, filled, next_values, 0.5, 0.0)
    assert one_step[0, :3, 0].tolist() == [1 + 0.5 * 10, 2 + 0.5 * 20, 3.0]
    monte_carlo = lambda_returns(rewards, terminated, filled, next_values, 0.5, 1.0)
    assert monte_carlo[0, :3, 0].tolist() == [1 + 0.5 * (2 + 0.5 * 3), 2 + 0.5 * 3, 3.0]
    # A cut-off (truncated) episode bootstraps from the value after its last step.
    cut = lambda_returns(rewards, torch.zeros_like(terminated), filled, next_values, 0.5, 1.0)
    assert cut[0, 2, 0].item() == 3 + 0.5 * 30


def test_episode_store_pads_and_evicts():
    env = TeamEnvCreator(EnvCreator(EnvSpec(factory="envs.two_step:parallel_env")))()
    store = EpisodeStore(capacity=3, seed=0)
    store.add(play_random_episodes(env, 5))
    assert len(store) == 3 and store.env_steps == 6
    batch = store.sample(3)
    assert batch["obs"].shape == (3, 3, 2, 3) and batch["actions"].shape == (3, 2, 2)
    assert batch["filled"].tolist() == [[1.0, 1.0]] * 3
    assert batch["terminated"][:, -1].tolist() == [1.0] * 3
    assert set(np.unique(batch["rewards"][:, 0])) == {0.0}


# --- bad input ----------------------------------------------------------------------------------

TWO_STEP = (EXPERIMENTS / "two_step_qmix.yaml").read_text()

ERROR_CASES = {
    "single-agent env": (
        lambda t: replace(t, "factory: envs.two_step:parallel_env", "id: CartPole-v1"),
        ["key 'algorithm'", "single-agent environment", "DQN"],
    ),
    "policy mapping": (
        lambda t: t + "multi_agent: {policies: independent}\n",
        ["key 'multi_agent'", "shares one agent network"],
    ),
    "turn-based env": (
        lambda t: replace(
            t,
            "factory: envs.two_step:parallel_env",
            "pettingzoo: pettingzoo.classic.connect_four_v3",
        ),
        ["key 'env'", "turn-based", "parallel"],
    ),
    "unknown mixer": (
        lambda t: replace(t, "mixer: qmix", "mixer: qmx"),
        ["training.mixer", "'qmix', 'vdn' or 'none'"],
    ),
    "env state that the env does not have": (
        lambda t: replace(
            replace(t, "team_reward: common", "team_reward: common\n  global_state: env"),
            "factory: envs.two_step:parallel_env",
            "factory: tests.unit.test_qmix:stateless_two_step",
        ),
        ["key 'training.global_state'", "defines no state()", "'observations'"],
    ),
    "epsilon upside down": (
        lambda t: replace(t, "epsilon_finish: 1.0", "epsilon_finish: 1.5"),
        ["epsilon_finish <= epsilon_start <= 1"],
    ),
}


@pytest.mark.parametrize("case", list(ERROR_CASES), ids=list(ERROR_CASES))
def test_bad_qmix_input_exits_2(case, tmp_path):
    edit, expected = ERROR_CASES[case]
    path = tmp_path / "exp.yaml"
    path.write_text(edit(TWO_STEP) + f"output_dir: {tmp_path / 'out'}\n")
    assert_rejected(path, expected, tmp_path / "out")


def stateless_two_step(**kwargs):
    """The two-step game without a state(): the mixer must fall back to the observations."""
    from envs.two_step import TwoStepGame

    env = TwoStepGame(**kwargs)
    del env.state_space
    return env


def test_auto_global_state_is_the_envs_state_else_the_observations():
    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare

    loaded = prepare(
        load_experiment(
            EXPERIMENTS / "two_step_qmix.yaml",
            ["env.factory=tests.unit.test_qmix:stateless_two_step"],
        )
    )
    assert loaded.experiment.training["global_state"] == "observations"
    assert (
        prepare(load_experiment(EXPERIMENTS / "two_step_qmix.yaml")).experiment.training[
            "global_state"
        ]
        == "env"
    )


@pytest.mark.parametrize("optimizer", ["adam", "rmsprop"])
def test_qmix_optimizer_setting_is_accepted(optimizer):
    from tests.helpers import check_before_ray

    run = check_before_ray(EXPERIMENTS / "two_step_qmix.yaml", f"training.optimizer={optimizer}")
    assert run.algo_config.optimizer == optimizer


def test_learner_state_carries_the_reward_statistics_and_update_count():
    """A resumed QMIX run standardises rewards with the statistics it had and keeps its
    target networks' cadence: both are in the learner's checkpoint state."""
    env = spread_team_env()
    config = QMIXConfig().training(standardise_rewards=True)
    spaces = {"default_policy": (env.observation_space, env.action_space)}
    learner = config.build_learner(spaces=spaces)
    stats = learner._reward_stats.setdefault("default_policy", RunningMeanStd())
    stats.update(torch.tensor([0.0, 0.0, 7.0, 1.0]))
    learner._updates["default_policy"] = 123

    restored = config.build_learner(spaces=spaces)
    restored.set_state(learner.get_state())
    again = restored._reward_stats["default_policy"]
    assert (again.mean, again.var, again.count) == (stats.mean, stats.var, stats.count)
    assert again.mean == pytest.approx(2.0, rel=1e-3)
    assert restored._updates == {"default_policy": 123}
    assert LEARNER_COUNTERS not in learner.get_state(not_components=LEARNER_COUNTERS)
