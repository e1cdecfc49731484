"""Stacked seeds (rlplat/engine/stacked.py): N networks along a leading axis learn as N separate
ones would. A seed's loss moves only its own parameters, clipping is by each seed's own norm, a
seed whose loss is NaN stops alone, and one seed cut out of the stack is the plain network it
stands for, initialised as it would be alone."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from torch import nn

from rlplat.algorithms.stacked.ppo import (
    ADVANTAGES,
    StackedPPOConfig,
    StackedPPOModule,
    seed_advantages,
)
from rlplat.algorithms.stacked.runner import STACKED_SEEDS, StackedEnvRunner, StackedRollout
from rlplat.algorithms.stacked.sac import StackedSACConfig
from rlplat.algorithms.stacked.td3 import StackedTD3Config
from rlplat.engine.stacked import (
    SeedStops,
    clip_grad_norm_per_seed_,
    seed_generators,
    seed_state,
    stacked_mlp,
)
from rlplat.policy.restore import Policy

SEEDS, IN, HIDDEN, OUT = 4, 5, 16, 3


def _stack(seeds: tuple[int, ...] = (10, 11, 12, 13)) -> nn.Sequential:
    return stacked_mlp(len(seeds), IN, [HIDDEN, HIDDEN], OUT, "tanh", seed_generators(seeds))


def _plain(state: dict[str, torch.Tensor]) -> nn.Sequential:
    net = nn.Sequential(
        nn.Linear(IN, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, HIDDEN),
        nn.Tanh(),
        nn.Linear(HIDDEN, OUT),
    )
    net.load_state_dict(state)
    return net


def test_one_seed_cut_from_the_stack_is_its_plain_network_and_starts_as_it_would_alone():
    stack = _stack()
    x = torch.randn(SEEDS, 7, IN)
    out = stack(x)
    for seed in range(SEEDS):
        plain = _plain(seed_state(stack.state_dict(), seed))
        torch.testing.assert_close(plain(x[seed]), out[seed])
    # Seed 12 alone starts with the weights it has as the third of four.
    alone = _stack((12,))
    torch.testing.assert_close(alone[0].weight[0], stack[0].weight[2])


def test_a_seeds_loss_moves_only_that_seeds_parameters():
    stack = _stack()
    before = {name: p.detach().clone() for name, p in stack.named_parameters()}
    optimizer = torch.optim.Adam(stack.parameters(), lr=0.01)
    for _ in range(3):
        optimizer.zero_grad()
        stack(torch.randn(SEEDS, 8, IN))[1].square().mean().backward()  # seed 1's loss only
        optimizer.step()
    for name, p in stack.named_parameters():
        moved = (p.detach() - before[name]).reshape(SEEDS, -1).abs().amax(1)
        assert moved[1] > 0, name
        assert torch.all(moved[[0, 2, 3]] == 0), name


def test_gradients_are_clipped_by_each_seeds_own_norm():
    stack = _stack()
    x = torch.randn(SEEDS, 8, IN)
    scales = torch.tensor([1000.0, 1e-3, 1.0, 1e-3]).reshape(SEEDS, 1, 1)
    (stack(x) * scales).sum().backward()
    params = list(stack.parameters())
    small_before = [p.grad[1].clone() for p in params]
    norms = clip_grad_norm_per_seed_(params, max_norm=1.0)
    assert norms[0] > 1.0 > norms[1]
    after = torch.stack(
        [torch.stack([p.grad[s].square().sum() for p in params]).sum().sqrt() for s in range(SEEDS)]
    )
    torch.testing.assert_close(after[0], torch.tensor(1.0), rtol=1e-4, atol=0)
    for p, grad in zip(
        params, small_before, strict=True
    ):  # a small seed keeps its gradient as it was
        torch.testing.assert_close(p.grad[1], grad)


def test_a_seed_whose_loss_is_nan_stops_alone_and_stays_where_it_was():
    stack = _stack()
    params = list(stack.parameters())
    optimizer = torch.optim.Adam(params, lr=0.01)
    stops = SeedStops(SEEDS)
    snapshot = None
    for step in range(4):
        optimizer.zero_grad()
        losses = stack(torch.randn(SEEDS, 8, IN)).square().mean((1, 2))
        if step == 2:
            losses = losses * torch.tensor([1.0, 1.0, float("nan"), 1.0])
            snapshot = [p.detach()[2].clone() for p in params]
        losses.sum().backward()
        newly = stops.check(losses, params, optimizer)
        assert newly == ([2] if step == 2 else [])
        optimizer.step()
    assert stops.stopped == [2]
    for p, kept in zip(params, snapshot, strict=True):
        assert torch.isfinite(p).all()
        torch.testing.assert_close(p.detach()[2], kept)  # frozen at its last finite values


# CleanRL's MuJoCo PPO networks (experiments/mujoco/*_ppo.yaml): orthogonal hidden layers with
# gain sqrt(2), zero biases, a state-independent log std.
CLEANRL_NETWORKS = {
    "fcnet_kernel_initializer": "orthogonal_",
    "fcnet_kernel_initializer_kwargs": {"gain": 2**0.5},
    "fcnet_bias_initializer": "zeros_",
    "free_log_std": True,
}


@pytest.mark.parametrize(
    ("action_space", "networks"),
    [
        (gym.spaces.Discrete(3), {}),
        (gym.spaces.Box(-1.0, 1.0, (2,)), {}),
        (gym.spaces.Box(-1.0, 1.0, (2,)), CLEANRL_NETWORKS),
    ],
    ids=["Discrete", "Box", "Box-cleanrl-networks"],
)
def test_a_seed_of_stacked_ppo_is_rllibs_own_ppo_module_once_cut_out(action_space, networks):
    """Each seed of a stacked PPO module acts and values as RLlib's PPO module loaded with its
    slice: one seed of a stacked run is evaluated, exported and served as a plain policy. With
    RLlib's initializer settings each seed's hidden layers start as they say (orthogonal
    columns of norm ``gain``, zero biases), each seed its own draw."""
    model_config = {"fcnet_hiddens": [32, 32], "vf_share_layers": False, **networks}
    obs_space = gym.spaces.Box(-1.0, 1.0, (4,))
    stacked = RLModuleSpec(
        module_class=StackedPPOModule,
        observation_space=obs_space,
        action_space=action_space,
        model_config={**model_config, STACKED_SEEDS: [3, 4, 5]},
    ).build()
    single = RLModuleSpec(
        module_class=DefaultPPOTorchRLModule,
        catalog_class=PPOCatalog,
        observation_space=obs_space,
        action_space=action_space,
        model_config=model_config,
    ).build()
    obs = torch.randn(3 * 5, 4)  # seed-major: 5 rows per seed
    assert set(stacked.seed_module_state(0)) <= set(single.state_dict())
    inputs = stacked.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
    values = stacked.compute_values({Columns.OBS: obs})
    for index in range(3):
        single.load_state_dict(single.state_dict() | stacked.seed_module_state(index), strict=True)
        rows = obs[5 * index : 5 * (index + 1)]
        torch.testing.assert_close(
            single.forward_inference({Columns.OBS: rows})[Columns.ACTION_DIST_INPUTS],
            inputs[5 * index : 5 * (index + 1)],
        )
        torch.testing.assert_close(
            single.compute_values({Columns.OBS: rows}), values[5 * index : 5 * (index + 1)]
        )
    if networks:
        first = [stacked.seed_module_state(i)["encoder.actor_encoder.net.mlp.0.weight"]
                 for i in range(2)]  # fmt: skip
        for weight in first:  # (32, 4): four orthogonal columns of norm sqrt(2)
            torch.testing.assert_close(weight.T @ weight, 2.0 * torch.eye(4), atol=1e-5, rtol=0)
        assert not torch.allclose(first[0], first[1])
        bias = stacked.seed_module_state(1)["encoder.critic_encoder.net.mlp.2.bias"]
        assert not bias.any()


def _gae_reference(rewards, values, next_values, terminated, ended, gamma, lambda_):
    """GAE of one env's steps, written out step by step."""
    advantages, running = np.zeros(len(rewards)), 0.0
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * (1 - terminated[t]) * next_values[t] - values[t]
        running = delta + gamma * lambda_ * (1 - ended[t]) * running
        advantages[t] = running
    return advantages


def _bootstrap_rows(advantages, values, next_values, ended, gamma, lambda_):
    """The advantage of the step RLlib appends to each of one env's episode chunks (the chunk's
    last observation again, reward 0, followed in the batch by the env's next chunk)."""
    out = []
    for t in range(len(advantages)):
        if ended[t] or t == len(advantages) - 1:
            following = (values[t + 1], advantages[t + 1]) if t + 1 < len(advantages) else (0, 0)
            out.append(gamma * following[0] + gamma * lambda_ * following[1] - next_values[t])
    return out


def test_each_seeds_advantages_are_gae_over_its_own_envs_standardised_on_its_own():
    """Each seed's GAE over its own envs, standardised over its own rows and the bootstrap rows
    RLlib's PPO adds to each episode chunk (as a run of that seed alone standardises)."""
    seeds, steps, envs = 3, 40, 2
    rng = np.random.default_rng(0)
    module = RLModuleSpec(
        module_class=StackedPPOModule,
        observation_space=gym.spaces.Box(-1.0, 1.0, (4,)),
        action_space=gym.spaces.Discrete(2),
        model_config={"fcnet_hiddens": [8], STACKED_SEEDS: [0, 1, 2]},
    ).build()
    terminated = rng.random((seeds, steps, envs)) < 0.05
    truncated = ~terminated & (rng.random((seeds, steps, envs)) < 0.05)
    columns = {
        Columns.OBS: torch.randn(seeds, steps, envs, 4),
        Columns.NEXT_OBS: torch.randn(seeds, steps, envs, 4),
        Columns.ACTIONS: torch.randint(2, (seeds, steps, envs)),
        Columns.ACTION_LOGP: torch.randn(seeds, steps, envs),
        "rewards": torch.rand(seeds, steps, envs) * torch.tensor([1.0, 10.0, 100.0])[:, None, None],
        "terminateds": torch.from_numpy(terminated),
        "truncateds": torch.from_numpy(truncated),
    }
    data = seed_advantages(module, columns, gamma=0.9, lambda_=0.8)

    def value(obs: torch.Tensor, seed: int) -> np.ndarray:
        # Seed s's critic alone: its rows sit at block s of a seed-major batch.
        stacked = torch.zeros(seeds, *obs.shape)
        stacked[seed] = obs
        with torch.no_grad():
            out = module.compute_values({Columns.OBS: stacked.reshape(-1, 4)})
        return out.reshape(seeds, -1)[seed].numpy()

    for seed in range(seeds):
        per_env, extra = [], []
        for env in range(envs):
            values = value(columns[Columns.OBS][seed, :, env], seed)
            next_values = value(columns[Columns.NEXT_OBS][seed, :, env], seed)
            ended = terminated[seed, :, env] | truncated[seed, :, env]
            gae = _gae_reference(columns["rewards"][seed, :, env].numpy(), values, next_values,
                                 terminated[seed, :, env], ended, 0.9, 0.8)  # fmt: skip
            per_env.append(gae)
            extra += _bootstrap_rows(gae, values, next_values, ended, 0.9, 0.8)
        raw = np.stack(per_env, axis=1).reshape(-1)  # (steps x envs), as the learner flattens
        every = np.concatenate([raw, extra])
        expected = (raw - every.mean()) / max(every.std(), 1e-4)
        np.testing.assert_allclose(data[ADVANTAGES][seed].numpy(), expected, rtol=1e-4, atol=1e-4)


def cartpole_stack(seeds: list[int], steps_per_env: int) -> StackedPPOConfig:
    """A small stacked PPO on CartPole: two envs per seed, ``steps_per_env`` steps each per
    sample, one hidden layer of 16."""
    return (
        StackedPPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=2)
        .training(train_batch_size_per_learner=2 * steps_per_env)
        .rl_module(model_config={"fcnet_hiddens": [16], "vf_share_layers": False})
        .debugging(seed=0)
        .stacked(seeds=seeds)
    )


def test_one_seed_saved_from_the_stack_is_a_policy_that_rlplat_restores(tmp_path):
    """``save_seed`` writes what ``rlplat eval``, ``export`` and ``serve`` restore (RLlib's PPO
    module and pipelines): the restored policy acts as that seed of the stack does."""
    config = cartpole_stack([7, 8, 9], steps_per_env=10)
    runner = StackedEnvRunner(config=config)
    [rollout] = runner.sample()
    assert rollout.columns["rewards"].shape == (3, 10, 2)  # seeds, steps, envs per seed
    runner.save_seed(1, tmp_path / "seed_1")
    policy = Policy.from_checkpoint(tmp_path / "seed_1")
    obs = torch.randn(6, 4)  # seed-major: rows 2 and 3 are seed 1's
    torch.testing.assert_close(
        policy.module.forward_inference({Columns.OBS: obs[2:4]})[Columns.ACTION_DIST_INPUTS],
        runner.module.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS][2:4],
    )
    assert policy.env_steps_trained == 20
    runner.stop()


def test_saving_a_seed_draws_nothing_from_the_stacks_random_stream(tmp_path):
    """A checkpoint in the middle of a run leaves its actions as they would be without it."""
    config = cartpole_stack([7, 8], steps_per_env=10)
    saved, unsaved = StackedEnvRunner(config=config), StackedEnvRunner(config=config)
    actions = []
    for runner in (saved, unsaved):
        torch.manual_seed(1)
        runner.sample()
        if runner is saved:
            runner.save_seed(0, tmp_path / "seed_0")
        actions.append(runner.sample()[0].columns[Columns.ACTIONS])
        runner.stop()
    torch.testing.assert_close(actions[0], actions[1])


def test_each_seeds_result_is_its_own_episodes_and_losses_under_rllibs_names():
    """``seed_result`` gives a seed's trial what a separate run of it reports: its own episodes
    (RLlib's ``env_runners`` names, rlplat's ``window`` and health counts), its own losses under
    ``learners/default_policy``; a resumed runner keeps each seed's window."""
    from rlplat.run.seed_results import seed_result

    config = cartpole_stack([3, 4], steps_per_env=50)
    runner = StackedEnvRunner(config=config)
    runner.sample()
    metrics = runner.metrics.reduce(compile=True)  # the values the algorithm's result holds
    learners = {"default_policy": {"policy_loss": 0.5}, "seeds": {"1": {"policy_loss": -1.0}}}
    result = {"env_runners": metrics, "learners": learners, "window": {"num_episodes": 99}}
    one = seed_result(result, 1)
    episodes = list(runner.recent[1])
    assert episodes and one["env_runners"]["num_episodes"] == len(episodes)
    assert one["env_runners"]["episode_return_mean"] == pytest.approx(
        np.mean([ret for ret, _, _ in episodes])
    )
    assert one["env_runners"]["health"]["episodes_ended"] == len(episodes)
    assert one["window"]["num_episodes"] == len(episodes)
    assert one["window"]["episodes_before_learning"] == len(episodes)  # the first call's
    assert one["learners"]["default_policy"]["policy_loss"] == -1.0
    assert "seeds" not in one["env_runners"] and "seeds" not in one["learners"]
    resumed = StackedEnvRunner(config=config)
    resumed.set_state(runner.get_state())
    assert [list(recent) for recent in resumed.recent] == [list(r) for r in runner.recent]
    runner.stop()
    resumed.stop()


def pendulum_sac_stack(seeds: list[int], **training) -> StackedSACConfig:
    """A small stacked SAC on Pendulum: one hidden layer of 16, batches of 8."""
    return (
        StackedSACConfig()
        .environment("Pendulum-v1")
        .training(train_batch_size_per_learner=8, **training)
        .rl_module(model_config={"fcnet_hiddens": [16], "fcnet_activation": "relu"})
        .debugging(seed=0)
        .stacked(seeds=seeds)
    )


def pendulum_td3_stack(seeds: list[int], **training) -> StackedTD3Config:
    """A small stacked TD3 on Pendulum: hidden layers of 16, batches of 8."""
    return (
        StackedTD3Config()
        .environment("Pendulum-v1")
        .training(
            actor_hiddens=[16], critic_hiddens=[16], train_batch_size_per_learner=8, **training
        )
        .debugging(seed=0)
        .stacked(seeds=seeds)
    )


def pendulum_crossq_stack(seeds: list[int], **training) -> Any:
    """A small stacked CrossQ on Pendulum: hidden layers of 16, batches of 8."""
    from rlplat.algorithms.stacked.crossq import StackedCrossQConfig

    return (
        StackedCrossQConfig()
        .environment("Pendulum-v1")
        .training(
            actor_hiddens=[16], critic_hiddens=[16], train_batch_size_per_learner=8, **training
        )
        .debugging(seed=0)
        .stacked(seeds=seeds)
    )


OFF_POLICY_STACKS = {
    "SAC": pendulum_sac_stack,
    "TD3": pendulum_td3_stack,
    "CrossQ": pendulum_crossq_stack,
}


@pytest.mark.parametrize("algorithm", OFF_POLICY_STACKS)
def test_a_seed_saved_from_an_off_policy_stack_is_rlplats_own_policy(algorithm, tmp_path):
    """One seed of a SAC, TD3 or CrossQ stack restores as rlplat's own policy of that algorithm
    and acts greedily as that seed of the stack does (in the action bounds)."""
    stack = OFF_POLICY_STACKS[algorithm]
    config = stack([5, 6, 7], num_steps_sampled_before_learning_starts=0)
    runner = StackedEnvRunner(config=config)
    [rollout] = runner.sample()
    assert rollout.columns[Columns.ACTIONS].shape == (3, 1, 1, 1)  # seeds, steps, envs, action
    runner.save_seed(2, tmp_path / "seed_2")
    policy = Policy.from_checkpoint(tmp_path / "seed_2")
    obs = torch.randn(6, 3)  # seed-major: rows 4 and 5 are seed 2's
    torch.testing.assert_close(
        policy.module.forward_inference({Columns.OBS: obs[4:6]})[Columns.ACTION_DIST_INPUTS],
        runner.module.forward_inference({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS][4:6],
    )
    runner.stop()


def _pendulum_rollout(rewards: torch.Tensor, steps: int = 16) -> StackedRollout:
    """``steps`` transitions per seed, the same for every seed but their ``rewards`` (seeds,)."""
    generator = torch.Generator().manual_seed(3)
    seeds = len(rewards)
    obs = torch.randn(1, steps, 1, 3, generator=generator).expand(seeds, -1, -1, -1)
    actions = torch.rand(1, steps, 1, 1, generator=generator).expand(seeds, -1, -1, -1)
    return StackedRollout(
        {
            Columns.OBS: obs,
            Columns.NEXT_OBS: obs.flip(1),
            Columns.ACTIONS: actions,
            "rewards": rewards.reshape(seeds, 1, 1).expand(-1, steps, 1),
            "terminateds": torch.zeros(seeds, steps, 1, dtype=torch.bool),
            "truncateds": torch.zeros(seeds, steps, 1, dtype=torch.bool),
        }
    )


@pytest.mark.parametrize(("algorithm", "actor"), [("SAC", "pi_encoder"), ("TD3", "actor")])
def test_an_off_policy_seed_learns_from_its_own_replay_only_and_a_nan_stops_it_alone(
    algorithm, actor
):
    """The same updates with seed 1's rewards NaN: seed 0's networks (and SAC's temperature)
    end exactly where they end beside a healthy seed 1, and seed 1 stays where it was, and
    stopped in a learner restored from this one's state (--resume)."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.core.learner.training_data import TrainingData

    env = gym.make("Pendulum-v1")
    spaces = {DEFAULT_MODULE_ID: (env.observation_space, env.action_space)}
    after = []
    for rewards in (torch.tensor([-1.0, -2.0]), torch.tensor([-1.0, float("nan")])):
        torch.manual_seed(0)
        config = OFF_POLICY_STACKS[algorithm]([0, 1], num_steps_sampled_before_learning_starts=0)
        learner = config.build_learner(spaces=spaces)
        module = learner.module[DEFAULT_MODULE_ID].unwrapped()
        before = {k: v.clone() for k, v in module.state_dict().items()}
        for _ in range(3):
            learner.update(
                training_data=TrainingData(episodes=[_pendulum_rollout(rewards)]),
                timesteps={"num_env_steps_sampled_lifetime": 16},
            )
        state = module.state_dict()
        changed = [k for k in state if not torch.equal(state[k][0], before[k][0])]
        assert any(k.startswith(actor) for k in changed)
        assert algorithm != "SAC" or "log_alpha" in changed
        after.append((state, before, learner.stops.stopped))
    (healthy, _, healthy_stops), (poisoned, before, stops) = after
    assert healthy_stops == [] and stops == [1]
    resumed = OFF_POLICY_STACKS[algorithm]([0, 1]).build_learner(spaces=spaces)
    resumed.set_state(learner.get_state())  # a checkpoint's learner: seed 1 stays stopped
    assert resumed.stops.stopped == [1]
    for name, tensor in poisoned.items():
        torch.testing.assert_close(tensor[0], healthy[name][0], rtol=0, atol=0)
        if not name.startswith("target_"):  # targets move towards the frozen critics
            torch.testing.assert_close(tensor[1], before[name][1], rtol=0, atol=0)


def test_one_stacked_td3_update_is_rlplats_td3_update_of_each_seed():
    """Without target noise a TD3 update is deterministic: three updates of a stack of two seeds
    on a batch move seed 1's actor, critics and targets exactly as rlplat's own TD3 learner
    moves the same networks on seed 1's rows (its actor climbing the critics of before the
    step, then the targets moving after the actor)."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    from rlplat.algorithms.td3 import TD3Config

    env = gym.make("Pendulum-v1")
    spaces = {DEFAULT_MODULE_ID: (env.observation_space, env.action_space)}
    settings = {  # large steps: the critics' step changes the actor's gradient visibly
        "target_noise": 0.0,
        "policy_delay": 1,
        "num_steps_sampled_before_learning_starts": 0,
        "actor_lr": 0.05,
        "critic_lr": 0.05,
    }
    stack = pendulum_td3_stack([3, 4], **settings).build_learner(spaces=spaces)
    stacked = stack.module[DEFAULT_MODULE_ID].unwrapped()
    single = (
        TD3Config()
        .environment("Pendulum-v1")
        .training(
            actor_hiddens=[16], critic_hiddens=[16], train_batch_size_per_learner=8, **settings
        )
        .build_learner(spaces=spaces)
    )
    alone = single.module[DEFAULT_MODULE_ID].unwrapped()
    start = stacked.seed_module_state(1)
    alone.load_state_dict(alone.state_dict() | start | {f"target_{k}": v for k, v in start.items()})
    generator = torch.Generator().manual_seed(0)
    batch = {
        Columns.OBS: torch.randn(2, 8, 3, generator=generator),
        Columns.ACTIONS: torch.rand(2, 8, 1, generator=generator) * 2 - 1,
        "rewards": -torch.rand(2, 8, generator=generator),
        "terminateds": torch.zeros(2, 8),
        Columns.NEXT_OBS: torch.randn(2, 8, 3, generator=generator),
    }
    optimizers = dict(stack.get_optimizers_for_module(DEFAULT_MODULE_ID))
    for _ in range(3):  # (Adam's first step is about lr x the gradient's sign, whatever its size)
        stack.update_once(stacked, optimizers, batch)
    columns = {
        "obs": batch[Columns.OBS][1].numpy(),
        "new_obs": batch[Columns.NEXT_OBS][1].numpy(),
        "actions": batch[Columns.ACTIONS][1].numpy(),
        "rewards": batch["rewards"][1].numpy(),
        "terminateds": np.zeros(8, dtype=bool),
        "truncateds": np.zeros(8, dtype=bool),
    }
    for _ in range(3):
        single.update(
            batch=MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=8),
            timesteps={"num_env_steps_sampled_lifetime": 8},
        )
    moved = alone.state_dict()
    after = stacked.seed_module_state(1)
    targets = {k: v for k, v in stacked.state_dict().items() if k.startswith("target_")}
    after |= {k: v for k, v in seed_state(targets, 1).items()}
    assert not torch.equal(after["actor.0.weight"], start["actor.0.weight"])
    for name, tensor in after.items():
        # (Adam turns a gradient near zero into a step of about lr: float rounding shows as
        # 1e-5 here, a different update as lr = 0.05.)
        torch.testing.assert_close(tensor, moved[name], rtol=1e-4, atol=1e-4, msg=name)


def test_an_n_step_transition_sums_its_own_envs_rewards_to_the_episode_end_or_newest_step():
    """Two envs, five vector steps, env 0's episode ending at step 2: a 3-step transition from
    (step t, env e) sums e's own discounted rewards of t, t+1, t+2 (never the other env's),
    stops after an episode's last step and at the newest stored step, and bootstraps from the
    observation after its last step, terminated only where that step ended the episode."""
    from rlplat.algorithms.stacked.offpolicy import StackedReplay

    steps, envs, gamma = 5, 2, 0.5
    step = torch.arange(steps).reshape(1, steps, 1).expand(1, steps, envs).float()
    env = torch.arange(envs).reshape(1, 1, envs).expand(1, steps, envs).float()
    code = 10 * step + env  # an observation says its step and env
    terminated = (step == 2) & (env == 0)
    replay = StackedReplay(capacity=64, seed=0)
    for start in (0, 3):  # two sampling calls, as a run adds them
        part = slice(start, min(start + 3, steps))
        replay.add(StackedRollout({
            Columns.OBS: code[:, part].unsqueeze(-1),
            Columns.NEXT_OBS: (code[:, part] + 10).unsqueeze(-1),
            Columns.ACTIONS: env[:, part],
            "rewards": code[:, part] + 1,
            "terminateds": terminated[:, part],
            "truncateds": torch.zeros_like(terminated[:, part]),
        }))  # fmt: skip
    batch = replay.sample(256, n_step=3, gamma=gamma)
    seen = set()
    for row in range(256):
        t, e = divmod(int(batch[Columns.OBS][0, row, 0]), 10)
        seen.add((t, e))
        last = min(t + 2, steps - 1, 2 if (e == 0 and t <= 2) else steps)
        expected = sum(gamma ** (k - t) * (10 * k + e + 1) for k in range(t, last + 1))
        assert batch["rewards"][0, row] == pytest.approx(expected), (t, e)
        assert batch["n_step"][0, row] == last - t + 1
        assert batch[Columns.NEXT_OBS][0, row, 0] == 10 * (last + 1) + e
        assert batch["terminateds"][0, row] == float(e == 0 and last == 2)
    assert len(seen) == steps * envs
    restored = StackedReplay(capacity=64, seed=0)
    restored.set_state(replay.get_state())  # a resumed run's replay: its n-step rows the same
    again, original = restored.sample(64, 3, gamma), replay.sample(64, 3, gamma)
    for name, column in original.items():
        torch.testing.assert_close(again[name], column, msg=name)


def cartpole_dqn_stack(seeds: list[int], **training) -> Any:
    """A small stacked DQN on CartPole: dueling heads over one hidden layer of 16, batches
    of 8, 3-step returns, double Q."""
    from rlplat.algorithms.stacked.dqn import StackedDQNConfig

    return (
        StackedDQNConfig()
        .environment("CartPole-v1")
        .training(train_batch_size_per_learner=8, n_step=3, double_q=True, dueling=True,
                  **training)  # fmt: skip
        .rl_module(model_config={"fcnet_hiddens": [16], "head_fcnet_hiddens": [8]})
        .debugging(seed=0)
        .stacked(seeds=seeds)
    )


def test_a_seed_saved_from_a_dqn_stack_is_rllibs_dqn_module_with_its_q_values(tmp_path):
    """One seed of a DQN stack restores as RLlib's DQN module (rlplat's policy) whose Q-values
    are that seed's in the stack, and which acts greedily on them."""
    runner = StackedEnvRunner(config=cartpole_dqn_stack([5, 6, 7]))
    [rollout] = runner.sample()
    assert rollout.columns[Columns.ACTIONS].shape[::2] == (3, 1)  # seeds, (steps,) envs
    runner.save_seed(2, tmp_path / "seed_2")
    policy = Policy.from_checkpoint(tmp_path / "seed_2")
    obs = torch.randn(6, 4)  # seed-major: rows 4 and 5 are seed 2's
    single = policy.module.compute_q_values({Columns.OBS: obs[4:6]})["qf_preds"]
    stacked = runner.module.q_values(runner.module.by_seed(obs))[2]
    torch.testing.assert_close(single, stacked)
    greedy = policy.module.forward_inference({Columns.OBS: obs[4:6]})[Columns.ACTIONS]
    assert greedy.tolist() == stacked.argmax(-1).tolist()
    runner.stop()


def test_one_stacked_dqn_update_is_rlplats_dqn_update_of_each_seed():
    """Three DQN updates (double Q, dueling, 3-step returns, Huber, the target another network
    until it is copied after the third) of a stack of two seeds move seed 1's networks and
    target exactly as rlplat's DQN learner (RLlib's loss) moves the same networks on seed 1's
    rows."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    from rlplat.algorithms.transition_loop import DQNConfig

    env = gym.make("CartPole-v1")
    spaces = {DEFAULT_MODULE_ID: (env.observation_space, env.action_space)}
    settings = {"lr": 0.05, "target_network_update_freq": 8, "tau": 1.0}
    stack = cartpole_dqn_stack([3, 4], **settings).build_learner(spaces=spaces)
    stacked = stack.module[DEFAULT_MODULE_ID].unwrapped()
    single = (
        DQNConfig()
        .environment("CartPole-v1")
        .training(train_batch_size_per_learner=8, n_step=3, double_q=True, dueling=True,
                  **settings)  # fmt: skip
        .rl_module(model_config={"fcnet_hiddens": [16], "head_fcnet_hiddens": [8]})
        .build_learner(spaces=spaces)
    )
    alone = single.module[DEFAULT_MODULE_ID].unwrapped()
    with torch.no_grad():  # seed 1's target starts as seed 0's networks
        for name, tensor in stacked.state_dict().items():
            if name.startswith("target_"):
                tensor[1] = tensor[0]
    start = stacked.seed_module_state(1)
    targets = {f"_target_{k}": v for k, v in stacked.seed_module_state(0).items()}
    alone.load_state_dict(alone.state_dict() | start | targets)
    generator = torch.Generator().manual_seed(0)
    batch = {
        Columns.OBS: torch.randn(2, 8, 4, generator=generator),
        Columns.ACTIONS: torch.randint(2, (2, 8), generator=generator).float(),
        "rewards": torch.rand(2, 8, generator=generator) * 3,
        "terminateds": (torch.rand(2, 8, generator=generator) < 0.3).float(),
        Columns.NEXT_OBS: torch.randn(2, 8, 4, generator=generator),
        "n_step": torch.randint(1, 4, (2, 8), generator=generator).float(),
    }
    optimizers = dict(stack.get_optimizers_for_module(DEFAULT_MODULE_ID))
    sampled = (0, 0, 8)  # env steps sampled by each update: the target is due at the third
    for stack.sampled in sampled:
        stack.update_once(stacked, optimizers, batch)
    columns = {
        "obs": batch[Columns.OBS][1].numpy(),
        "new_obs": batch[Columns.NEXT_OBS][1].numpy(),
        "actions": batch[Columns.ACTIONS][1].long().numpy(),
        "rewards": batch["rewards"][1].numpy(),
        "terminateds": batch["terminateds"][1].bool().numpy(),
        "truncateds": np.zeros(8, dtype=bool),
        "n_step": batch["n_step"][1].long().numpy(),
        "weights": np.ones(8, dtype=np.float32),
    }
    for steps in sampled:
        single.update(
            batch=MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=8),
            timesteps={"num_env_steps_sampled_lifetime": steps},
        )
    moved = alone.state_dict()
    after = stacked.seed_module_state(1)
    targets = {k[len("target_"):]: v for k, v in stacked.state_dict().items()
               if k.startswith("target_")}  # fmt: skip
    after |= {f"_target_{k}": v for k, v in seed_state(targets, 1).items()}
    assert not torch.equal(after["encoder.net.mlp.0.weight"], start["encoder.net.mlp.0.weight"])
    assert not torch.equal(after["_target_af.net.mlp.0.weight"], start["af.net.mlp.0.weight"])
    for name, tensor in after.items():
        # (Adam turns a gradient near zero into a step of about lr: float rounding shows as
        # 1e-5 here, a different update as lr = 0.05.)
        torch.testing.assert_close(tensor, moved[name], rtol=1e-4, atol=1e-4, msg=name)


@pytest.mark.parametrize(
    ("experiment", "override"),
    [
        ("cartpole_dqn.yaml", "training.num_atoms=51"),  # distributional DQN
        ("cartpole_dqn.yaml", "training.noisy=true"),
        ("cartpole_dqn.yaml", "training.n_step=[1, 3]"),  # RLlib draws n per batch
        ("pendulum_sac.yaml", "training.n_step=3"),  # n-step returns are DQN's alone
        ("cartpole_pqn.yaml", "evaluation.evaluation_num_env_runners=1"),  # runs in-process
        ("cartpole_pqn.yaml", "evaluation.evaluation_config={explore: true}"),  # plays greedily
    ],
)
def test_a_stack_refuses_settings_its_seeds_would_not_train_with(experiment, override):
    """Before Ray, naming the key: what a stacked seed would leave out of its training or
    evaluation."""
    from pathlib import Path

    from rlplat.errors import ConfigError
    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare

    path = Path(__file__).parents[2] / "experiments" / experiment
    loaded = load_experiment(path, ["seeds=2", "stacked=true", override])
    with pytest.raises(ConfigError, match="stacked seeds do not carry|it does not carry") as no:
        prepare(loaded, step_env=False)
    key = override.split("=")[0]
    assert no.value.key == (key + ".explore" if key.endswith("evaluation_config") else key)


def test_each_seeds_observation_filter_is_rllibs_filter_over_its_own_observations_only():
    """Two seeds' observations of very different scales pushed a vector step at a time (some
    rows only normalised, as a new episode's reset pushes alone): each seed's statistics and
    normalised observations are those of RLlib's MeanStdFilter fed that seed's rows one by
    one, never the other seed's."""
    from ray.rllib.connectors.env_to_module.mean_std_filter import MeanStdFilter
    from ray.rllib.utils.filter import MeanStdFilter as RLlibFilter

    from rlplat.algorithms.stacked.filters import SeedFilters

    rng = np.random.default_rng(0)
    filters = SeedFilters(2, 3, MeanStdFilter(clip_by_value=5.0))
    alone = [RLlibFilter((3,), clip=5.0) for _ in range(2)]
    for step in range(6):
        obs = rng.normal(size=(2, 4, 3)) * np.array([1.0, 100.0]).reshape(2, 1, 1) + step
        obs = obs.astype(np.float32)
        new = rng.random((2, 4)) < 0.5 if step % 2 else None
        out = filters(obs.reshape(8, 3), None if new is None else new.reshape(8)).reshape(2, 4, 3)
        for seed, reference in enumerate(alone):
            pushed = [row for k, row in enumerate(obs[seed]) if new is None or new[seed, k]]
            for row in pushed:
                reference(row)
            expected = np.stack([reference(row, update=False) for row in obs[seed]])
            np.testing.assert_allclose(out[seed], expected, rtol=1e-5, atol=1e-5)
    for seed, reference in enumerate(alone):
        np.testing.assert_allclose(filters.mean[seed], reference.running_stats.mean)
        np.testing.assert_allclose(filters.std()[seed], reference.running_stats.std, rtol=1e-6)


def test_a_seed_saved_with_an_observation_filter_normalises_as_it_did_in_the_stack(tmp_path):
    """With mean_std_filter each seed's envs pass through its own filter; the seed's checkpoint
    holds that filter's statistics (rlplat eval normalises as the stack did), and a resumed
    runner goes on from the same statistics."""
    from ray.rllib.connectors.env_to_module.mean_std_filter import MeanStdFilter
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    config = cartpole_stack([3, 4], steps_per_env=30)
    config.env_runners(env_to_module_connector=lambda *_: [MeanStdFilter()])
    runner = StackedEnvRunner(config=config)
    [rollout] = runner.sample()
    assert (runner.filters.count >= 2 * 31).all()  # every env's reset and steps, and resets
    assert not np.allclose(runner.filters.mean[0], runner.filters.mean[1])  # envs apart
    seed_obs = rollout.columns[Columns.OBS][1].reshape(-1, 4)
    assert seed_obs.abs().max() <= 10.0 and seed_obs.std(0).mean() == pytest.approx(1, abs=0.35)
    runner.save_seed(1, tmp_path / "seed_1")
    policy = Policy.from_checkpoint(tmp_path / "seed_1")
    raw = np.array([[0.1, 0.5, -0.05, -0.8], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    episode = SingleAgentEpisode(observations=[raw[0]])
    batch = policy.env_to_module(
        rl_module=policy.module, episodes=[episode], batch={}, explore=False, shared_data={}
    )
    in_stack = runner.filters(np.repeat(raw[:1], 2, axis=0), np.zeros(2, dtype=bool))
    np.testing.assert_allclose(np.asarray(batch[Columns.OBS])[0], in_stack[1], rtol=1e-5)
    resumed = StackedEnvRunner(config=config)
    resumed.set_state(runner.get_state())
    np.testing.assert_array_equal(resumed.filters.mean, runner.filters.mean)
    runner.stop()
    resumed.stop()


def test_each_seeds_rewards_are_scaled_as_rlplats_reward_scaling_scales_that_seed_alone():
    """Two batches of 2 seeds x 2 envs, seed 1's rewards 100 times larger, episodes ending
    inside batches (terminated, truncated): each seed's scaled rewards are those rlplat's
    ``RewardScaling`` piece gives that seed's episode chunks alone, so seed 0's scale never
    sees seed 1's rewards."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from rlplat.algorithms.stacked.rewards import SeedRewardScaling
    from rlplat.environments.reward_scaling import RewardScaling

    rng = np.random.default_rng(1)
    steps, envs = 6, 2
    ends = {(0, 0, 0, 2): "terminated", (1, 1, 1, 4): "truncated"}  # (batch, seed, env, step)
    stacked = SeedRewardScaling(2, envs, RewardScaling(gamma=0.9))
    alone = [RewardScaling(gamma=0.9) for _ in range(2)]
    episode = {(seed, env): [0, 0] for seed in range(2) for env in range(envs)}  # [number, t]
    for batch in range(2):
        rewards = rng.normal(size=(2, steps, envs)) * np.array([1.0, 100.0]).reshape(2, 1, 1)
        ended = np.zeros((2, steps, envs), dtype=bool)
        for (b, seed, env, step), _ in ends.items():
            ended[seed, step, env] = b == batch
        out = stacked(torch.tensor(rewards, dtype=torch.float32), torch.tensor(ended))
        for seed in range(2):
            chunks, columns = [], []
            for env in range(envs):
                start = 0
                for step in [*np.flatnonzero(ended[seed, :, env]), steps - 1]:
                    if step < start:
                        continue
                    number, t = episode[seed, env]
                    kind = ends.get((batch, seed, env, step)) if ended[seed, step, env] else None
                    n = step + 1 - start
                    chunks.append(SingleAgentEpisode(
                        id_=f"{seed}-{env}-{number}", observations=list(range(n + 1)),
                        actions=[0] * n, rewards=list(rewards[seed, start : step + 1, env]),
                        t_started=t, len_lookback_buffer=0,
                        terminated=kind == "terminated", truncated=kind == "truncated",
                    ))  # fmt: skip
                    columns.append(out[seed, start : step + 1, env].numpy())
                    episode[seed, env] = [number + 1, 0] if kind else [number, t + n]
                    start = step + 1
            scaled = alone[seed](rl_module=None, batch={}, episodes=chunks, shared_data={})
            for chunk, column in zip(chunks, columns, strict=True):
                expected = np.asarray(scaled[Columns.REWARDS][(chunk.id_,)])
                np.testing.assert_allclose(column, expected, rtol=1e-5, atol=1e-6)
    assert stacked.var[1] / stacked.var[0] > 1000  # each seed its own scale


def test_a_stacked_ppo_learner_scales_rewards_per_seed_and_keeps_the_scales_for_resume():
    """With the experiment's reward_scaling the stacked PPO learner learns from each seed's
    scaled rewards and its state (a checkpoint's) carries every seed's scale."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.core.learner.training_data import TrainingData

    from rlplat.environments.reward_scaling import RewardScaling

    config = cartpole_stack([3, 4], steps_per_env=20)
    config.training(learner_connector=lambda *_: [RewardScaling(gamma=0.9)])
    runner = StackedEnvRunner(config=config)
    env = gym.make("CartPole-v1")
    spaces = {DEFAULT_MODULE_ID: (env.observation_space, env.action_space)}
    learner = config.build_learner(spaces=spaces)
    learner.update(training_data=TrainingData(episodes=runner.sample()), timesteps={})
    scaling = learner.reward_scaling
    assert scaling.count.tolist() == [40.0, 40.0] and (scaling.var != 1.0).all()
    resumed = config.build_learner(spaces=spaces)
    resumed.set_state(learner.get_state())
    for name, value in scaling.get_state().items():
        torch.testing.assert_close(getattr(resumed.reward_scaling, name), value)
    runner.stop()



def cartpole_pqn_stack(seeds: list[int], **training) -> Any:
    """A small stacked PQN on CartPole: layer-normed hidden layers of 16 and 8, one env per
    seed, rollouts of 64 steps."""
    from rlplat.algorithms.stacked.pqn import StackedPQNConfig

    settings = {"hiddens": [16, 8], "train_batch_size_per_learner": 64, "minibatch_size": 64,
                "num_epochs": 1, "lr": 0.01, "grad_clip": None, "q_lambda": 0.65,
                "epsilon_start": 0.5, **training}  # fmt: skip
    return (
        StackedPQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=1)
        .training(**settings)
        .debugging(seed=0)
        .stacked(seeds=seeds)
    )


def test_a_seed_saved_from_a_pqn_stack_is_rlplats_pqn_module_with_its_q_values(tmp_path):
    """One seed of a PQN stack restores as rlplat's PQN module (layer norms included) whose
    Q-values are that seed's in the stack; each seed starts from its own orthogonal draw."""
    runner = StackedEnvRunner(config=cartpole_pqn_stack([5, 6, 7]))
    runner.save_seed(1, tmp_path / "seed_1")
    policy = Policy.from_checkpoint(tmp_path / "seed_1")
    obs = torch.randn(3, 2, 4)
    stacked = runner.module.q_values(obs)
    torch.testing.assert_close(policy.module.q(obs[1]), stacked[1])
    assert not torch.allclose(stacked[0], stacked[1])
    first = runner.module.q_network[0].weight[1]  # seed 6's nn.Linear weight (16, 4) transposed
    torch.testing.assert_close(first @ first.T, 2.0 * torch.eye(4), atol=1e-5, rtol=0)
    runner.stop()


def test_one_stacked_pqn_update_is_rlplats_pqn_update_on_the_seeds_episodes():
    """One full-batch PQN update of a stacked CartPole seed (episodes ending inside the
    rollout, the last one cut by it) moves every parameter as rlplat's PQN learner (RLlib's
    lambda-returns over max_a Q with its bootstrap rows) moves the same network on that seed's
    episodes."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.core.learner.training_data import TrainingData
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from rlplat.algorithms.pqn import PQNConfig

    steps, seed = 64, 1
    sgd = {"optimizer": {"type": "sgd"}, "lr": 0.1}  # Adam's first step reads only signs
    config = cartpole_pqn_stack([3, 4], **sgd)
    runner = StackedEnvRunner(config=config)
    [rollout] = runner.sample()
    env = gym.make("CartPole-v1")
    spaces = {DEFAULT_MODULE_ID: (env.observation_space, env.action_space)}
    stack = config.build_learner(spaces=spaces)
    stack.module[DEFAULT_MODULE_ID].unwrapped().load_state_dict(runner.module.state_dict())
    single = (
        PQNConfig()
        .environment("CartPole-v1")
        .training(hiddens=[16, 8], grad_clip=None, q_lambda=0.65, **sgd)
        .build_learner(spaces=spaces)
    )
    alone = single.module[DEFAULT_MODULE_ID].unwrapped()
    start = runner.module.seed_module_state(seed)
    alone.load_state_dict(start)
    columns = {name: column[seed, :, 0] for name, column in rollout.columns.items()}
    ends = torch.nonzero(columns["terminateds"] | columns["truncateds"]).flatten().tolist()
    assert ends and ends[-1] != steps - 1, "episodes end inside the rollout and one is cut"
    episodes, begin = [], 0
    for end in [*ends, steps - 1]:
        rows, last = slice(begin, end + 1), columns[Columns.NEXT_OBS][end].numpy()
        episodes.append(SingleAgentEpisode(
            observations=[*columns[Columns.OBS][rows].numpy(), last],
            actions=list(columns[Columns.ACTIONS][rows].numpy()),
            rewards=list(columns["rewards"][rows].numpy()),
            terminated=bool(columns["terminateds"][end]),
            truncated=bool(columns["truncateds"][end]),
            observation_space=env.observation_space, action_space=env.action_space,
            len_lookback_buffer=0,
        ))  # fmt: skip
        begin = end + 1
    timesteps = {"num_env_steps_sampled_lifetime": steps}
    single.update(episodes=episodes, timesteps=timesteps, num_epochs=1, minibatch_size=None)
    stack.update(training_data=TrainingData(episodes=[rollout]), timesteps=timesteps,
                 num_epochs=1, minibatch_size=steps)  # fmt: skip
    after = stack.module[DEFAULT_MODULE_ID].unwrapped().seed_module_state(seed)
    moved = alone.state_dict()
    for name, tensor in after.items():
        assert not torch.equal(tensor, start[name]), name
        torch.testing.assert_close(tensor, moved[name], rtol=0, atol=1e-5, msg=name)
    runner.stop()


def test_a_stacks_evaluation_runner_plays_each_seeds_greedy_episodes_as_its_policy_alone(
    tmp_path,
):
    """As RLlib's evaluation runner (the evaluation config), a stacked env runner plays each
    seed's greedy episodes on envs seeded as that seed's run alone seeds its evaluation
    runner's: each seed's logged return is what its own saved policy plays greedily from
    those seeds."""
    from rlplat.environments.seeding import runner_seeds
    from rlplat.run.seed_results import seed_result

    seeds, episodes = [3, 4], 2
    config = (
        StackedPPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_envs_per_env_runner=1)
        .training(train_batch_size_per_learner=32)
        .rl_module(model_config={"fcnet_hiddens": [8], "vf_share_layers": False})
        .evaluation(evaluation_config={"explore": False})
        .debugging(seed=0)
        .stacked(seeds=seeds)
    )
    evaluation = StackedEnvRunner(config=config.get_evaluation_config_object())
    assert evaluation.sample(num_episodes=episodes) == []  # nothing to learn from
    result = {"evaluation": {"env_runners": evaluation.metrics.reduce(compile=True)}}
    for index, seed in enumerate(seeds):
        evaluation.save_seed(index, tmp_path / str(index))
        module = Policy.from_checkpoint(tmp_path / str(index)).module
        returns, env = [], gym.make("CartPole-v1")
        [env_seed] = runner_seeds(seed, 0, True, 1)[1]
        for episode in range(episodes):  # its one env seeded at the first episode only
            obs, _ = env.reset(seed=env_seed if episode == 0 else None)
            total, done = 0.0, False
            while not done:
                inputs = module.forward_inference({Columns.OBS: torch.tensor(obs)[None]})
                action = int(inputs[Columns.ACTION_DIST_INPUTS].argmax())
                obs, reward, terminated, truncated, _ = env.step(action)
                total, done = total + reward, terminated or truncated
            returns.append(total)
        mine = seed_result(result, index)["evaluation"]["env_runners"]  # its trial's result
        assert mine["num_episodes"] == episodes
        assert mine["episode_return_mean"] == pytest.approx(np.mean(returns))
        assert "seeds" not in mine
    assert result["evaluation"]["env_runners"]["num_episodes"] == len(seeds) * episodes
    evaluation.stop()


def test_each_seeds_batch_renormalisation_is_crossqs_over_that_seeds_rows_only():
    """A stacked batch renormalisation normalises each seed's rows by that seed's batch
    statistics, corrected by its own running ones once warmed up, and moves each seed's
    running statistics as CrossQ's layer does over that seed's rows alone."""
    from rlplat.algorithms.networks import BatchRenorm, BatchRenormSettings
    from rlplat.algorithms.stacked.crossq import StackedBatchRenorm

    settings = BatchRenormSettings(momentum=0.3, warmup_steps=2)
    stacked = StackedBatchRenorm(3, 4, settings)
    with torch.no_grad():
        stacked.weight.copy_(torch.rand(3, 4) + 0.5)
        stacked.bias.copy_(torch.randn(3, 4))
    singles = []
    for seed in range(3):
        single = BatchRenorm(4, settings)
        single.load_state_dict({k: v[seed] for k, v in stacked.state_dict().items()})
        singles.append(single)
    generator = torch.Generator().manual_seed(0)
    scales = torch.tensor([1.0, 3.0, 0.2]).reshape(3, 1, 1)
    for step in range(5):  # warm-up, then renormalised (r and d clipped on the shifted seed)
        x = torch.randn(3, 16, 4, generator=generator) * scales
        x[2] += 4.0 * step
        out = stacked(x)
        for seed, single in enumerate(singles):
            torch.testing.assert_close(out[seed], single(x[seed]))
    stacked.eval()
    x = torch.randn(3, 5, 4, generator=generator)
    for seed, single in enumerate(singles):
        single.eval()
        torch.testing.assert_close(stacked(x)[seed], single(x[seed]))
        torch.testing.assert_close(stacked.running_var[seed], single.running_var)


def test_one_seed_stack_of_crossq_updates_as_rlplats_crossq_learner():
    """Three updates of a one-seed CrossQ stack (critics over current and next transitions in
    training mode, the actor every second update in training mode under the stepped critics,
    the temperature beside it) move every parameter and running statistic as rlplat's
    CrossQ learner moves the same networks on the same rows, from the same random stream."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    from rlplat.algorithms.crossq import CrossQConfig

    env = gym.make("Pendulum-v1")
    spaces = {DEFAULT_MODULE_ID: (env.observation_space, env.action_space)}
    settings = {"policy_delay": 2, "num_steps_sampled_before_learning_starts": 0,
                "actor_lr": 0.05, "critic_lr": 0.05, "alpha_lr": 0.05,
                "batch_renorm_warmup": 1}  # fmt: skip
    stack = pendulum_crossq_stack([3], **settings).build_learner(spaces=spaces)
    stacked = stack.module[DEFAULT_MODULE_ID].unwrapped()
    single = (
        CrossQConfig()
        .environment("Pendulum-v1")
        .training(
            actor_hiddens=[16], critic_hiddens=[16], train_batch_size_per_learner=8, **settings
        )
        .build_learner(spaces=spaces)
    )
    alone = single.module[DEFAULT_MODULE_ID].unwrapped()
    start = stacked.seed_module_state(0)
    alone.load_state_dict(alone.state_dict() | start)
    generator = torch.Generator().manual_seed(0)
    batch = {
        Columns.OBS: torch.randn(1, 8, 3, generator=generator),
        Columns.ACTIONS: torch.rand(1, 8, 1, generator=generator) * 2 - 1,
        "rewards": -torch.rand(1, 8, generator=generator),
        "terminateds": torch.zeros(1, 8),
        Columns.NEXT_OBS: torch.randn(1, 8, 3, generator=generator),
        "n_step": torch.ones(1, 8),
    }
    optimizers = dict(stack.get_optimizers_for_module(DEFAULT_MODULE_ID))
    torch.manual_seed(7)
    for _ in range(3):
        stack.update_once(stacked, optimizers, batch)
        stack.updates += 1
    columns = {
        "obs": batch[Columns.OBS][0].numpy(),
        "new_obs": batch[Columns.NEXT_OBS][0].numpy(),
        "actions": batch[Columns.ACTIONS][0].numpy(),
        "rewards": batch["rewards"][0].numpy(),
        "terminateds": np.zeros(8, dtype=bool),
        "truncateds": np.zeros(8, dtype=bool),
    }
    torch.manual_seed(7)
    for _ in range(3):
        single.update(
            batch=MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=8),
            timesteps={"num_env_steps_sampled_lifetime": 8},
        )
    moved = alone.state_dict()
    after = stacked.seed_module_state(0)
    assert not torch.equal(after["actor.1.weight"], start["actor.1.weight"])
    assert not torch.equal(after["log_alpha"], start["log_alpha"])
    for name, tensor in after.items():
        torch.testing.assert_close(tensor, moved[name], rtol=1e-4, atol=1e-4, msg=name)


def test_a_resumed_off_policy_stack_goes_on_where_its_policy_delay_and_targets_stood():
    """An off-policy stack's learner state keeps its count of updates (TD3's and CrossQ's
    policy delay) and the env steps of its last target update (DQN's and SAC's cadence)."""
    from ray.rllib.core import DEFAULT_MODULE_ID

    env = gym.make("Pendulum-v1")
    spaces = {DEFAULT_MODULE_ID: (env.observation_space, env.action_space)}
    config = pendulum_td3_stack([3, 4], policy_delay=2)
    learner = config.build_learner(spaces=spaces)
    learner.updates, learner.last_target_update = 7, 320
    resumed = config.build_learner(spaces=spaces)
    resumed.set_state(learner.get_state())
    assert (resumed.updates, resumed.last_target_update) == (7, 320)
