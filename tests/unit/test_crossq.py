"""CrossQ without training: batch renormalisation's statistics, and one learner update's losses,
modes and order on hand-made batches."""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from rlplat.algorithms.actor_critic import squashed_sample
from rlplat.algorithms.crossq import CrossQConfig
from rlplat.algorithms.networks import BatchRenorm, BatchRenormSettings

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
MODULE = "default_policy"
EPS = 0.001


def test_batch_renorm_is_batch_norm_in_its_warmup_and_moves_its_running_statistics():
    layer = BatchRenorm(1, BatchRenormSettings(momentum=0.01, warmup_steps=5))
    x = torch.tensor([[1.0], [3.0]])  # mean 2, unbiased variance 2
    out = layer(x)
    assert out[:, 0].tolist() == pytest.approx([-1 / math.sqrt(2 + EPS), 1 / math.sqrt(2 + EPS)])
    assert float(layer.running_mean) == pytest.approx(0.02)  # 0 + 0.01 * (2 - 0)
    assert float(layer.running_var) == pytest.approx(1.01)  # 1 + 0.01 * (2 - 1)
    assert int(layer.steps) == 1
    layer.eval()
    acting = layer(torch.tensor([[1.0]]))
    assert float(acting.detach()) == pytest.approx((1.0 - 0.02) / math.sqrt(1.01 + EPS))
    assert int(layer.steps) == 1, "acting moves no statistics"


def test_after_its_warmup_batch_renorm_corrects_towards_the_running_statistics_within_limits():
    """sb3-contrib's form: the batch statistics corrected by r and d (clipped to r_max, d_max)
    normalise the input, mean' = mean - d sqrt(var) / r and var' = var / r^2."""
    layer = BatchRenorm(1, BatchRenormSettings(momentum=0.5, warmup_steps=0))
    layer.steps.fill_(1)
    layer.running_mean.fill_(1.0)
    layer.running_var.fill_(0.25)
    x = torch.tensor([[2.0], [4.0]])  # mean 3, unbiased variance 2

    def expected(r: float, d: float) -> list[float]:
        mean, var = 3.0 - d * math.sqrt(2.0) / r, 2.0 / r**2
        return [(value - mean) / math.sqrt(var + EPS) for value in (2.0, 4.0)]

    running_std = math.sqrt(0.25 + EPS)
    r = math.sqrt(2 + EPS) / running_std  # 2.83: within r_max
    d = (3.0 - 1.0) / running_std  # 3.99: within d_max
    assert layer(x)[:, 0].tolist() == pytest.approx(expected(r, d), rel=1e-5)

    layer.running_var.fill_(0.01)  # the batch's spread 14x the running one: r stops at 3
    layer.running_mean.fill_(-100.0)  # and d at 5
    assert layer(x)[:, 0].tolist() == pytest.approx(expected(3.0, 5.0), rel=1e-5)


def crossq_learner(**training: object):
    config = CrossQConfig().environment(observation_space=OBS, action_space=BOX)
    config.training(actor_hiddens=[8], critic_hiddens=[16], **training)
    return config, config.build_learner(spaces={MODULE: (OBS, BOX)})


def transitions(n: int = 6, terminated: float = 1.0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {
        Columns.OBS: torch.rand((n, 3), generator=generator),
        Columns.NEXT_OBS: torch.rand((n, 3), generator=generator) + 5.0,
        Columns.ACTIONS: torch.rand((n, 2), generator=generator) * 2 - 1,
        Columns.REWARDS: torch.full((n,), 10.0),
        Columns.TERMINATEDS: torch.full((n,), terminated),
        "n_step": torch.ones(n),
        "weights": torch.ones(n),
    }


def critic_loss(learner, config, batch):
    module = learner.module[MODULE]
    fwd_out = module.forward_train(batch)
    return learner.compute_loss_for_module(
        module_id=MODULE, config=config, batch=batch, fwd_out=fwd_out
    )


@pytest.mark.parametrize("terminated", [1.0, 0.0], ids=["episode ends", "episode goes on"])
def test_the_critics_see_current_and_next_transitions_in_one_pass_and_fit_the_soft_target(
    terminated,
):
    """No target networks: the critics normalise the current transitions with statistics of the
    current and the next ones together (the next observations here lie 5 higher); each critic
    fits r + gamma (1 - terminated) (min_i Q_i(s', a') - alpha log pi(a'|s')) from the next half
    of that pass by half the squared error."""
    config, learner = crossq_learner()
    module = learner.module[MODULE].unwrapped()
    assert not [name for name, _ in module.named_children() if "target" in name]
    batch = transitions(terminated=terminated)
    torch.manual_seed(3)
    loss = critic_loss(learner, config, batch)

    first_renorm = _renorms(module.critics[0])[0]
    joint_obs = torch.cat([batch[Columns.OBS], batch[Columns.NEXT_OBS]])
    # running mean after one pass: 0.01 * the joint batch's mean (observation features)
    assert first_renorm.running_mean[:3].tolist() == pytest.approx(
        (0.01 * joint_obs.mean(dim=0)).tolist(), rel=1e-5
    )
    # The same pass again, from fresh statistics, and the target by hand (alpha starts at 1).
    for layer in _renorms(module.critics):
        layer.running_mean.zero_()
        layer.running_var.fill_(1.0)
        layer.steps.zero_()
    torch.manual_seed(3)  # the same a' ~ pi(s'), the actor in eval mode
    next_actions, next_logp = squashed_sample(module.dist_inputs(batch[Columns.NEXT_OBS]))
    module.critics.train()
    q_both = module.q_values(joint_obs, torch.cat([batch[Columns.ACTIONS], next_actions]))
    module.critics.eval()
    q, q_next = q_both[:, :6], q_both[:, 6:]
    soft_next = q_next.min(dim=0).values - 1.0 * next_logp
    target = 10.0 + 0.99 * (1.0 - terminated) * soft_next
    expected = 0.5 * ((q - target) ** 2).mean(dim=1).sum()
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    alone = module.q_values(batch[Columns.OBS], batch[Columns.ACTIONS])  # eval mode
    assert not torch.allclose(alone, q), "the running statistics would give other values"


def test_the_actor_climbs_the_critics_after_their_step():
    """alpha log pi(a|s) - min_i Q_i(s, a), a ~ pi(s) drawn in training mode, under the critics
    as they are after this update's step, not before it."""
    config, learner = crossq_learner(policy_delay=1)
    module = learner.module[MODULE].unwrapped()
    batch = transitions(terminated=0.0)
    before = copy.deepcopy(module)
    loss = critic_loss(learner, config, batch)
    torch.manual_seed(7)
    grads = learner.compute_gradients({MODULE: loss})
    actor = learner.filter_param_dict_for_optimizer(
        learner._params, learner._optimizer(MODULE, "actor")
    )

    def actor_gradient(network: torch.nn.Module) -> list[torch.Tensor]:
        torch.manual_seed(7)
        network.actor.train()
        actions, logp = squashed_sample(network.dist_inputs(batch[Columns.OBS]))
        network.actor.eval()
        network.critics.eval()
        q = network.q_values(batch[Columns.OBS], actions).min(dim=0).values
        return torch.autograd.grad((logp - q).mean(), list(network.actor.parameters()))

    got = [grads[ref] for ref in actor]
    assert all(
        torch.allclose(g, e, atol=1e-6) for g, e in zip(got, actor_gradient(module), strict=True)
    )
    assert not all(
        torch.allclose(g, e, atol=1e-6) for g, e in zip(got, actor_gradient(before), strict=True)
    )


def _renorms(network: torch.nn.Module) -> list[BatchRenorm]:
    return [layer for layer in network.modules() if isinstance(layer, BatchRenorm)]


def test_the_actor_and_temperature_step_every_policy_delay_updates_after_the_critics():
    config, learner = crossq_learner(policy_delay=2)
    module = learner.module[MODULE].unwrapped()
    actor_ids = {id(p) for p in module.actor.parameters()}
    batch = transitions(terminated=0.0)

    def update() -> set[int]:
        loss = critic_loss(learner, config, batch)
        grads = learner.compute_gradients({MODULE: loss})
        return {id(learner._params[ref]) for ref, grad in grads.items() if grad is not None}

    first = update()
    assert not first & actor_ids and id(module.log_alpha) not in first, "critics only"
    critics = [p.detach().clone() for p in module.critics.parameters()]
    actor_renorm = _renorms(module.actor)[0]
    second = update()
    assert actor_ids <= second and id(module.log_alpha) in second
    stepped = zip(critics, module.critics.parameters(), strict=True)
    assert not any(torch.equal(a, b) for a, b in stepped), "the critics stepped before the actor"
    assert int(actor_renorm.steps) == 1, "the actor's pass for its loss is its only training pass"


def test_acting_uses_running_statistics_and_checkpoints_carry_them():
    config, learner = crossq_learner()
    module = learner.module[MODULE]
    critic_loss(learner, config, transitions())
    learner.compute_gradients({MODULE: critic_loss(learner, config, transitions())})
    learner.compute_gradients({MODULE: critic_loss(learner, config, transitions())})
    state = module.get_state()
    assert {"actor.0.running_mean", "actor.0.steps", "log_alpha"} <= set(state)
    one = {Columns.OBS: torch.rand((1, 3))}
    acted = module.forward_inference(one)[Columns.ACTION_DIST_INPUTS]
    restored = CrossQConfig().environment(observation_space=OBS, action_space=BOX)
    restored.training(actor_hiddens=[8], critic_hiddens=[16])
    fresh = restored.build_learner(spaces={MODULE: (OBS, BOX)}).module[MODULE]
    fresh.set_state(state)
    assert torch.equal(fresh.forward_inference(one)[Columns.ACTION_DIST_INPUTS], acted)
    assert torch.isfinite(acted).all(), "one observation: no batch statistics needed"


def test_a_restored_learner_keeps_the_actors_delay_where_it_stood():
    config, learner = crossq_learner(policy_delay=2)
    batch = transitions()
    learner.compute_gradients({MODULE: critic_loss(learner, config, batch)})  # update 1: critics
    _, restored = crossq_learner(policy_delay=2)
    restored.set_state(learner.get_state())
    module = restored.module[MODULE].unwrapped()
    loss = critic_loss(restored, config, batch)
    grads = restored.compute_gradients({MODULE: loss})
    stepped = {id(restored._params[ref]) for ref in grads}
    assert id(module.log_alpha) in stepped, "update 2 of the run is the actor's"
