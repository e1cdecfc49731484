"""SAC acts uniformly at random for its first ``random_steps`` env steps, then from its policy."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.utils.metrics import TD_ERROR_KEY

from rlplat.algorithms.cql import CQLConfig
from rlplat.algorithms.sac import SACConfig

OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (3,), np.float32)


def sac_module(action_space: gym.Space, **training: object) -> torch.nn.Module:
    config = SACConfig().environment(observation_space=OBS, action_space=action_space)
    config.training(**training)
    spaces = {"default_policy": (OBS, action_space)}
    return config.get_rl_module_spec(env=None, spaces=spaces).build()


def explore(module: torch.nn.Module, t: int, n: int = 2000) -> dict:
    batch = {Columns.OBS: torch.zeros((n, *OBS.shape))}
    return module.forward_exploration(batch, t=t)


def confident_policy(module: torch.nn.Module, mean: float) -> None:
    """Make the policy put (nearly) all its mass on tanh(``mean``) in every dimension."""
    [head] = [layer for layer in module.pi.modules() if isinstance(layer, torch.nn.Linear)]
    with torch.no_grad():
        head.weight.zero_()
        size = head.bias.shape[0] // 2
        head.bias[:size] = mean  # the Gaussian's means
        head.bias[size:] = -10.0  # its log stds


def test_box_actions_are_uniform_until_random_steps_then_the_policys():
    module = sac_module(BOX, random_steps=100)
    confident_policy(module, mean=3.0)  # tanh(3) = 0.995

    warmup = explore(module, t=99)
    actions = warmup[Columns.ACTIONS].numpy()
    assert actions.shape == (2000, 3)
    assert actions.min() >= -1.0 and actions.max() <= 1.0
    assert 0.4 < (actions < 0).mean() < 0.6, "warm-up actions ignore the policy"
    assert np.allclose(warmup[Columns.ACTION_LOGP].numpy(), -3 * np.log(2.0))

    acting = explore(module, t=100)[Columns.ACTIONS].numpy()
    assert np.allclose(acting, np.tanh(3.0), atol=1e-3), "after the warm-up the policy acts"
    # Both phases give the same outputs, so an episode that spans them is stored as one.
    assert explore(module, t=0).keys() == explore(module, t=100).keys()


def test_the_warmup_lasts_until_learning_starts_by_default():
    module = sac_module(BOX, num_steps_sampled_before_learning_starts=300)
    assert module.model_config["random_steps"] == 300
    confident_policy(module, mean=-3.0)
    assert (explore(module, t=299)[Columns.ACTIONS].numpy() > 0).mean() > 0.4
    assert (explore(module, t=300)[Columns.ACTIONS].numpy() < -0.99).all()


def test_discrete_actions_are_drawn_uniformly_during_the_warmup():
    module = sac_module(gym.spaces.Discrete(4), random_steps=10)
    actions = explore(module, t=0)[Columns.ACTIONS].numpy()
    counts = np.bincount(actions, minlength=4)
    assert counts.min() > 400, counts


def test_a_negative_warmup_is_refused():
    config = SACConfig().environment(observation_space=OBS, action_space=BOX)
    with pytest.raises(ValueError, match="training.random_steps must not be negative"):
        config.training(random_steps=-1).validate()


def test_the_greedy_action_is_the_squashed_mean_in_the_bounds():
    """Greedy (evaluation, rlplat eval, export): tanh of the policy's mean, scaled to the
    bounds; RLlib's own squashed Gaussian would give the mean itself, clipped."""
    module = sac_module(BOX)
    confident_policy(module, mean=0.5)
    with torch.no_grad():
        inputs = module.forward_inference({Columns.OBS: torch.zeros((3, *OBS.shape))})
    dist = module.get_inference_action_dist_cls().from_logits(
        inputs[Columns.ACTION_DIST_INPUTS], low=BOX.low[0], high=BOX.high[0]
    )
    greedy = dist.to_deterministic().sample().numpy()
    assert np.allclose(greedy, 2.0 * np.tanh(0.5)), greedy  # 0.92, not 0.5 (nor 1.0 clipped)


def terminal_batch(n: int = 8) -> dict[str, torch.Tensor]:
    """``n`` transitions that end their episodes with a reward of 100 each."""
    return {
        Columns.OBS: torch.zeros((n, *OBS.shape)),
        Columns.NEXT_OBS: torch.zeros((n, *OBS.shape)),
        Columns.ACTIONS: torch.zeros((n, *BOX.shape)),
        Columns.REWARDS: torch.full((n,), 100.0),
        Columns.TERMINATEDS: torch.ones(n),  # the target is the reward alone
        "n_step": torch.ones(n),
        "weights": torch.ones(n),
    }


def sac_learner() -> tuple[SACConfig, object]:
    config = SACConfig().environment(observation_space=OBS, action_space=BOX)
    return config, config.build_learner(spaces={"default_policy": (OBS, BOX)})


def test_box_critics_fit_their_targets_by_half_the_squared_error():
    """A TD error of 100 costs 5,000 per critic, not the 99.5 of RLlib's Huber loss, whose
    gradient stops growing at an error of 1; each sample's TD error is logged for prioritized
    replay's priorities."""
    config, learner = sac_learner()
    n = 8
    batch = terminal_batch(n)
    fwd_out = learner.module["default_policy"].forward_train(batch)
    learner.compute_loss_for_module(
        module_id="default_policy", config=config, batch=batch, fwd_out=fwd_out
    )
    for critic, preds in (("qf_loss", "qf_preds"), ("qf_twin_loss", "qf_twin_preds")):
        expected = 0.5 * ((fwd_out[preds].detach() - 100.0) ** 2).mean()
        logged = learner.metrics.peek(("default_policy", critic))
        assert float(logged) == pytest.approx(float(expected), rel=1e-5)
        assert float(expected) > 4000
    # Prioritized replay's new priorities: one TD error per sample.
    [td_errors] = learner.metrics.peek(("default_policy", TD_ERROR_KEY))
    assert td_errors == pytest.approx([100.0] * n, abs=1.0)


@pytest.mark.parametrize("config_class", [SACConfig, CQLConfig], ids=["SAC", "CQL"])
def test_the_learned_temperature_is_restored_with_the_learner(config_class):
    """RLlib keeps SAC's (and CQL's) temperature outside the module: without it in the state, a
    resumed run would explore with alpha = 1 again after it had tuned alpha down to 0.02."""
    config = config_class().environment(observation_space=OBS, action_space=BOX)
    learner = config.build_learner(spaces={"default_policy": (OBS, BOX)})
    with torch.no_grad():
        learner.curr_log_alpha["default_policy"].fill_(-3.9)
    state = learner.get_state()
    restored = config.build_learner(spaces={"default_policy": (OBS, BOX)})
    restored.set_state(state)
    log_alpha = restored.curr_log_alpha["default_policy"]
    assert float(log_alpha[0]) == pytest.approx(-3.9)
    [temperature_optimizer] = [
        o for name, o in restored.get_optimizers_for_module("default_policy") if name == "alpha"
    ]
    assert temperature_optimizer.param_groups[0]["params"][0] is log_alpha, "its optimizer steps it"


def test_the_actor_climbs_the_critics_after_their_step():
    """The SAC paper's order: the critics step on their loss first, and the actor's gradient is
    that of alpha log pi(a|s) - min_i Q_i(s, a) under the stepped critics, not the old ones."""
    config, learner = sac_learner()
    module = learner.module["default_policy"]
    batch = terminal_batch()
    old_module = copy.deepcopy(module)
    fwd_out = module.forward_train(batch)
    losses = learner.compute_losses(
        fwd_out={"default_policy": fwd_out}, batch={"default_policy": batch}
    )
    torch.manual_seed(7)
    grads = learner.compute_gradients(losses)

    critic_params = list(module.qf.parameters())
    assert not all(
        torch.equal(new, old)
        for new, old in zip(critic_params, old_module.qf.parameters(), strict=True)
    ), "the critic has not stepped"
    [actor_optimizer] = [
        o for name, o in learner.get_optimizers_for_module("default_policy") if name == "policy"
    ]
    actor_refs = learner.filter_param_dict_for_optimizer(learner._params, actor_optimizer)

    def actor_gradient(critics: torch.nn.Module) -> list[torch.Tensor]:
        torch.manual_seed(7)
        dist = module.get_train_action_dist_cls().from_logits(fwd_out[Columns.ACTION_DIST_INPUTS])
        actions, logp = dist.rsample_and_logp()
        q = critics.compute_q_values({Columns.OBS: batch[Columns.OBS], Columns.ACTIONS: actions})
        loss = (learner.curr_log_alpha["default_policy"].exp().detach() * logp - q).mean()
        return torch.autograd.grad(loss, list(actor_refs.values()), retain_graph=True)

    got = [grads[ref] for ref in actor_refs]
    assert all(
        torch.allclose(g, e, atol=1e-6) for g, e in zip(got, actor_gradient(module), strict=True)
    )
    assert not all(
        torch.allclose(g, e, atol=1e-6)
        for g, e in zip(got, actor_gradient(old_module), strict=True)
    )
