"""rlplat's CrossQ computes the same update as sb3-contrib's, its reference (docs/crossq.md).

Both sides are built at the same small sizes; every weight, batch-renorm statistic and pass count
and the log temperature of sb3-contrib's networks is copied into rlplat's module, by walking both
networks' layers in order (a structural difference fails there). Both then take the same batch of
transitions with the same Gaussian noise for the actor's reparameterised samples, sb3-contrib
through ``CrossQ.train`` and rlplat through its learner's update (no Ray). The losses, and after
the optimiser steps every parameter and running statistic, must agree to float tolerance: in
batch renormalisation's warm-up (plain batch norm) and after it (r/d corrected), for an update of
the critics alone and one where the actor and the temperature step too.

Why: the modes (train/eval per pass), the order of the steps and the formulas are what rlplat
takes from sb3-contrib; this pins them to the reference rather than to a restatement of them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
import sb3_contrib  # the dev extra's: this comparison is its only user
import torch
from ray.rllib.core.columns import Columns
from sb3_contrib.common.torch_layers import BatchRenorm as Sb3BatchRenorm
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.type_aliases import ReplayBufferSamples
from torch import nn

from rlplat.algorithms.crossq import CrossQConfig
from rlplat.algorithms.networks import BatchRenorm, BatchRenormSettings

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACTIONS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
HIDDENS = [32, 32]
BATCH = 16
MODULE = "default_policy"
LR, GAMMA, ALPHA = 1e-3, 0.99, 0.3
EPS = 0.001  # batch renormalisation's, on both sides
STEPS = 7  # each batch renormalisation's training passes before the tests' first update
WARMUP = 100_000  # sb3-contrib's and rlplat's default: every pass here is plain batch norm
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
MODES = pytest.mark.parametrize(
    "warmup", [WARMUP, 0], ids=["batch norm warm-up", "renormalised (r, d)"]
)


class SpacesOnly(gym.Env):
    """sb3-contrib builds its policy from an env's spaces; the tests never step it."""

    observation_space, action_space = OBS, ACTIONS

    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


# -- both sides ----------------------------------------------------------------------------------


def sb3_crossq(policy_delay: int, warmup: int):
    """sb3-contrib's CrossQ, its networks initialised under a fixed seed."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = sb3_contrib.CrossQ(
            "MlpPolicy",
            SpacesOnly(),
            learning_rate=LR,
            batch_size=BATCH,
            gamma=GAMMA,
            policy_delay=policy_delay,
            ent_coef=f"auto_{ALPHA}",
            buffer_size=BATCH,  # replaced: each update hands over its batch
            policy_kwargs={
                "net_arch": {"pi": HIDDENS, "qf": HIDDENS},
                "renorm_warmup_steps": warmup,
            },
            device="cpu",
        )
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def rlplat_crossq(policy_delay: int, warmup: int):
    config = CrossQConfig().environment(observation_space=OBS, action_space=ACTIONS)
    config.training(
        actor_hiddens=HIDDENS,
        critic_hiddens=HIDDENS,
        hidden_activation="relu",
        actor_lr=LR,
        critic_lr=LR,
        alpha_lr=LR,
        gamma=GAMMA,
        adam_beta1=0.5,
        initial_alpha=ALPHA,
        policy_delay=policy_delay,
        batch_renorm_warmup=warmup,
        batch_norm_momentum=0.01,
        train_batch_size_per_learner=BATCH,
    )
    return config.build_learner(spaces={MODULE: (OBS, ACTIONS)})


# -- the mapping between the two sides' tensors --------------------------------------------------


@dataclass
class Heads:
    """sb3-contrib's actor ends in two linear heads, mu and log_std; rlplat's in one linear layer
    whose output is the mean, then the log std: its rows are mu's, then log_std's."""

    mu: nn.Linear
    log_std: nn.Linear


def _kind(layer: object) -> str:
    if isinstance(layer, (BatchRenorm, Sb3BatchRenorm)):
        return "batch renorm"
    if isinstance(layer, (nn.Linear, Heads)):
        return "linear"
    return type(layer).__name__  # activations: ReLU on both sides


def _tensors(layer: object) -> dict[str, torch.Tensor]:
    """A layer's weights and statistics under common names (rlplat's)."""
    if isinstance(layer, Sb3BatchRenorm):
        return {
            "weight": layer.scale,
            "bias": layer.bias,
            "running_mean": layer.ra_mean,
            "running_var": layer.ra_var,
            "steps": layer.steps,
        }
    if isinstance(layer, BatchRenorm):
        names = ("weight", "bias", "running_mean", "running_var", "steps")
        return {name: getattr(layer, name) for name in names}
    if isinstance(layer, Heads):
        return {
            "weight": torch.cat([layer.mu.weight, layer.log_std.weight]),
            "bias": torch.cat([layer.mu.bias, layer.log_std.bias]),
        }
    if isinstance(layer, nn.Linear):
        return {"weight": layer.weight, "bias": layer.bias}
    assert not list(layer.parameters()) and not list(layer.buffers()), layer
    return {}


def _same_renorm_settings(sb3: Sb3BatchRenorm, ours: BatchRenorm) -> bool:
    s = ours.settings
    return (sb3.momentum, sb3.eps, sb3.rmax, sb3.dmax, sb3.warmup_steps, sb3.affine) == (
        s.momentum,
        s.eps,
        s.r_max,
        s.d_max,
        s.warmup_steps,
        True,
    )


def layer_pairs(model, learner) -> Iterator[tuple[str, object, object]]:
    """(name, sb3-contrib's layer, rlplat's layer), walking the actor and the two critics in
    order; asserts that both sides have the same layers, kinds and settings."""
    module = learner.module[MODULE].unwrapped()
    actor = model.actor
    networks = [("actor", [*actor.latent_pi, Heads(actor.mu, actor.log_std)], list(module.actor))]
    assert len(model.critic.q_networks) == len(module.critics) == 2
    for i, (theirs, ours) in enumerate(zip(model.critic.q_networks, module.critics, strict=True)):
        networks.append((f"critic {i}", list(theirs), list(ours)))
    for network, theirs, ours in networks:
        assert [_kind(layer) for layer in theirs] == [_kind(layer) for layer in ours], network
        for i, (sb3_layer, our_layer) in enumerate(zip(theirs, ours, strict=True)):
            if isinstance(our_layer, BatchRenorm):
                assert _same_renorm_settings(sb3_layer, our_layer), f"{network} layer {i}"
            yield f"{network}.{i}", sb3_layer, our_layer


def layer_tensor_pairs(
    name: str, sb3_layer: object, our_layer: object
) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, sb3-contrib's tensor, rlplat's) for a layer's weights and statistics; asserts
    that names, shapes and dtypes match."""
    theirs, ours = _tensors(sb3_layer), _tensors(our_layer)
    assert theirs.keys() == ours.keys(), name
    for key, tensor in theirs.items():
        assert tensor.shape == ours[key].shape, f"{name}.{key}"
        assert tensor.dtype == ours[key].dtype, f"{name}.{key}"
        yield f"{name}.{key}", tensor, ours[key]


def tensor_pairs(model, learner) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """The pairs of every layer of the actor and the critics, then the log temperature."""
    for name, sb3_layer, our_layer in layer_pairs(model, learner):
        yield from layer_tensor_pairs(name, sb3_layer, our_layer)
    log_alpha = learner.module[MODULE].unwrapped().log_alpha
    yield "log_alpha", model.log_ent_coef.reshape(()), log_alpha


@torch.no_grad()
def copy_tensors(pairs: Iterable[tuple[str, torch.Tensor, torch.Tensor]]) -> None:
    """sb3-contrib's values into rlplat's tensors."""
    for _, theirs, ours in pairs:
        ours.copy_(theirs)


def assert_same_tensors(pairs: Iterable[tuple[str, torch.Tensor, torch.Tensor]]) -> None:
    for name, theirs, ours in pairs:
        if theirs.dtype == torch.long:
            assert int(theirs) == int(ours), name
        else:
            torch.testing.assert_close(
                ours, theirs, msg=lambda message, name=name: f"{name}: {message}", **TOLERANCE
            )


def sb3_renorms(model) -> list[Sb3BatchRenorm]:
    return [layer for layer in model.policy.modules() if isinstance(layer, Sb3BatchRenorm)]


@torch.no_grad()
def calibrate_statistics(model, steps: int = STEPS) -> None:
    """sb3-contrib's running statistics those of another batch of the same transitions (as a run
    has them after its warm-up), its pass counts at ``steps`` and its affine weights away from 1
    and 0. Renormalisation then corrects each batch by r and d near 1 and 0, some r at its limit.

    Not statistics far from the batch's: units active over a whole batch would follow, and batch
    norm's invariance to shifts gives their biases a gradient that is zero in theory and about
    1e-9 in float; Adam's first step (about lr * sign(g)) would turn that rounding into
    differences of lr. The limits of r and d have a test of the layer alone below."""
    layers = sb3_renorms(model)
    for layer in layers:
        layer.momentum = 1.0  # one pass sets the running statistics to the batch's
    batch, other = transitions(seed=99), transitions(seed=98)
    model.policy.set_training_mode(True)
    model.critic(
        torch.cat([batch["obs"], batch["next_obs"]]),
        torch.cat([batch["actions"], other["actions"]]),
    )
    model.actor.get_action_dist_params(batch["obs"])
    model.policy.set_training_mode(False)
    generator = torch.Generator().manual_seed(1)
    for layer in layers:
        layer.momentum = 0.01
        layer.steps.fill_(steps)
        layer.scale.add_(0.1 * torch.randn(layer.num_features, generator=generator))
        layer.bias.add_(0.1 * torch.randn(layer.num_features, generator=generator))


def both_sides(policy_delay: int, warmup: int):
    model, learner = sb3_crossq(policy_delay, warmup), rlplat_crossq(policy_delay, warmup)
    calibrate_statistics(model)
    copy_tensors(tensor_pairs(model, learner))
    return model, learner


# -- one update on each side ---------------------------------------------------------------------


def transitions(seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    obs = torch.rand((BATCH, 3), generator=generator) * 2 - 1
    return {
        "obs": obs,
        "next_obs": (obs + 0.3 * torch.randn((BATCH, 3), generator=generator)).clamp(-1, 1),
        "actions": torch.rand((BATCH, 2), generator=generator) * 2 - 1,
        "rewards": torch.randn(BATCH, generator=generator),
        "terminated": (torch.arange(BATCH) % 4 == 3).float(),  # a quarter of episodes end
    }


def gaussian_noise(seed: int, draws: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn((BATCH, 2), generator=generator) for _ in range(draws)]


class FixedNoise:
    """``Normal.rsample`` of torch, which both sides draw their actions with (sb3-contrib through
    ``SquashedDiagGaussianDistribution``, rlplat through ``squashed_sample``), patched to
    ``loc + eps * scale`` (torch's own reparameterisation) with ``eps`` taken in turn from a given
    list: both sides see the same noise whatever else uses torch's generator, and the count of
    draws checks that both draw at the same points (a' ~ pi(s'), then a ~ pi(s))."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.queue: list[torch.Tensor] = []
        fixed = self

        def rsample(normal, sample_shape=()):
            eps = fixed.queue.pop(0)
            assert eps.shape == normal._extended_shape(torch.Size(sample_shape))
            return normal.loc + eps * normal.scale

        monkeypatch.setattr(torch.distributions.Normal, "rsample", rsample)

    def load(self, noise: list[torch.Tensor]) -> None:
        self.queue = [eps.clone() for eps in noise]


@dataclass
class Losses:
    critic: float
    actor: float | None = None
    alpha: float | None = None


@contextlib.contextmanager
def units_active_on_whole_batches(model) -> Iterator[list[str]]:
    """The hidden units of sb3-contrib's networks that are active (ReLU output above 0) on every
    row of a training-mode pass of the batch renormalisation after them, while in the block."""
    active: list[str] = []

    def check(name: str):
        def hook(layer: nn.Module, inputs: tuple[torch.Tensor]) -> None:
            if layer.training and (units := (inputs[0] > 0).all(dim=0)).any():
                active.append(f"{name} units {units.nonzero().flatten().tolist()}")

        return hook

    networks = [("actor", model.actor.latent_pi)]
    networks += [(f"critic {i}", q) for i, q in enumerate(model.critic.q_networks)]
    handles = [
        layer.register_forward_pre_hook(check(f"{network}.{i}"))
        for network, layers in networks
        for i, layer in enumerate(layers)
        if isinstance(layer, Sb3BatchRenorm) and i > 0  # the first normalises the input
    ]
    try:
        yield active
    finally:
        for handle in handles:
            handle.remove()


def sb3_update(model, batch: dict[str, torch.Tensor]) -> Losses:
    """One gradient step of ``CrossQ.train`` on ``batch`` (its replay buffer hands it over); the
    losses as its logger records them."""
    samples = ReplayBufferSamples(
        observations=batch["obs"],
        actions=batch["actions"],
        next_observations=batch["next_obs"],
        dones=batch["terminated"][:, None],
        rewards=batch["rewards"][:, None],
    )
    model.replay_buffer.sample = lambda batch_size, env=None: samples
    model.logger.name_to_value.clear()
    with units_active_on_whole_batches(model) as active:
        model.train(gradient_steps=1, batch_size=BATCH)
    assert not active, (
        f"hidden units active on every row of a training pass ({'; '.join(active)}): batch "
        "norm's invariance to shifts makes their biases' gradients zero in theory, float "
        "rounding in fact, and Adam's first step (about lr * sign(g)) turns that into "
        "differences of lr between the sides; the test needs other data"
    )
    logged = model.logger.name_to_value
    return Losses(
        logged["train/critic_loss"],
        logged.get("train/actor_loss"),
        logged.get("train/ent_coef_loss"),
    )


def rlplat_update(learner, batch: dict[str, torch.Tensor]) -> Losses:
    """The update RLlib's ``Learner.update`` makes per minibatch (``_update``: forward, losses,
    gradients, optimiser steps) on ``batch``; the actor's and the temperature's losses as the
    learner's ``_actor_losses`` returns them."""
    taken: list[tuple[torch.Tensor, torch.Tensor]] = []
    actor_losses = learner._actor_losses

    def spy(module_id, obs):
        taken.append(actor_losses(module_id, obs))
        return taken[-1]

    learner._actor_losses = spy
    try:
        module_batch = {
            Columns.OBS: batch["obs"],
            Columns.NEXT_OBS: batch["next_obs"],
            Columns.ACTIONS: batch["actions"],
            Columns.REWARDS: batch["rewards"],
            Columns.TERMINATEDS: batch["terminated"].bool(),
        }
        _, loss_per_module, _ = learner._update({MODULE: module_batch})
    finally:
        del learner._actor_losses
    losses = Losses(float(loss_per_module[MODULE].detach()))
    if taken:
        [(actor, alpha)] = taken
        losses.actor, losses.alpha = float(actor.detach()), float(alpha.detach())
    return losses


def update_both(model, learner, noise: FixedNoise, seed: int) -> tuple[Losses, Losses]:
    """The same transitions and the same noise through one update of each side."""
    batch, draws = transitions(seed), gaussian_noise(seed, draws=2)
    noise.load(draws)
    theirs = sb3_update(model, batch)
    sb3_draws = 2 - len(noise.queue)
    noise.load(draws)
    ours = rlplat_update(learner, batch)
    assert 2 - len(noise.queue) == sb3_draws, "both sides sample actions at the same points"
    return theirs, ours


def assert_same_losses(theirs: Losses, ours: Losses) -> None:
    for term in ("critic", "actor", "alpha"):
        expected, got = getattr(theirs, term), getattr(ours, term)
        assert (expected is None) == (got is None), f"{term} loss taken on one side only"
        if expected is not None:
            assert got == pytest.approx(expected, rel=TOLERANCE["rtol"], abs=TOLERANCE["atol"]), (
                f"{term} loss"
            )


# -- tests ---------------------------------------------------------------------------------------


@MODES
def test_both_sides_start_from_the_same_networks_statistics_and_temperature(warmup):
    model, learner = both_sides(policy_delay=2, warmup=warmup)
    assert_same_tensors(tensor_pairs(model, learner))
    module = learner.module[MODULE].unwrapped()
    assert float(module.log_alpha.detach().exp()) == pytest.approx(ALPHA)
    with torch.no_grad():  # and so the same function, in eval mode
        obs, actions = transitions(0)["obs"], transitions(0)["actions"]
        model.policy.set_training_mode(False)
        module.eval()
        mean, log_std, _ = model.actor.get_action_dist_params(obs)
        torch.testing.assert_close(module.dist_inputs(obs), torch.cat([mean, log_std], dim=-1))
        q_theirs = torch.cat(model.critic(obs, actions), dim=1).T
        torch.testing.assert_close(module.q_values(obs, actions), q_theirs)


def test_batch_renorm_matches_sb3_contrib_where_r_and_d_reach_their_limits():
    """One training pass after the warm-up, running statistics chosen so that r stops at 1/3 and
    3 and d at -5 and 5 (one feature within all limits): the same output, input and affine
    gradients and running statistics; then the same output in eval mode."""
    theirs = Sb3BatchRenorm(5, warmup_steps=0)
    ours = BatchRenorm(5, BatchRenormSettings(momentum=0.01, warmup_steps=0))
    generator = torch.Generator().manual_seed(2)
    x = torch.randn((BATCH, 5), generator=generator)  # batch means near 0, variances near 1
    with torch.no_grad():
        theirs.ra_mean.copy_(torch.tensor([0.0, 10.0, -10.0, 0.0, 0.2]))
        theirs.ra_var.copy_(torch.tensor([100.0, 1.0, 1.0, 0.01, 1.2]))
        theirs.steps.fill_(1)
        theirs.scale.copy_(1 + 0.2 * torch.randn(5, generator=generator))
        theirs.bias.copy_(0.2 * torch.randn(5, generator=generator))
        running_std = (theirs.ra_var + EPS).sqrt()
        r = (x.var(dim=0) + EPS).sqrt() / running_std
        d = (x.mean(dim=0) - theirs.ra_mean) / running_std
    assert r[0] < 1 / 3 and d[1] < -5 and d[2] > 5 and r[3] > 3, "each limit is reached"
    assert 1 / 3 < r[4] < 3 and abs(d[4]) < 5
    assert _same_renorm_settings(theirs, ours)
    copy_tensors(layer_tensor_pairs("renorm", theirs, ours))
    weights = torch.randn((BATCH, 5), generator=generator)
    outputs, grads = [], []
    for layer in (theirs, ours):
        inputs = x.clone().requires_grad_(True)
        outputs.append(layer(inputs))
        (outputs[-1] * weights).sum().backward()
        grads.append([inputs.grad, _tensors(layer)["weight"].grad, _tensors(layer)["bias"].grad])
    torch.testing.assert_close(outputs[1], outputs[0], **TOLERANCE)
    for ours_grad, theirs_grad in zip(grads[1], grads[0], strict=True):
        torch.testing.assert_close(ours_grad, theirs_grad, **TOLERANCE)
    assert_same_tensors(layer_tensor_pairs("renorm", theirs, ours))
    theirs.eval()
    ours.eval()
    torch.testing.assert_close(ours(x), theirs(x), **TOLERANCE)


def test_the_optimizers_have_the_same_settings():
    """Adam for the critics and the actor with beta1 0.5, for the log temperature with Adam's
    own betas; the same learning rate, eps and no weight decay."""
    model, learner = both_sides(policy_delay=2, warmup=WARMUP)
    optimizers = dict(learner.get_optimizers_for_module(MODULE))
    pairs = [
        (model.critic.optimizer, optimizers["critic"]),
        (model.actor.optimizer, optimizers["actor"]),
        (model.ent_coef_optimizer, optimizers["alpha"]),
    ]
    for theirs, ours in pairs:
        assert type(theirs) is type(ours) is torch.optim.Adam
        for key in ("lr", "betas", "eps", "weight_decay", "amsgrad"):
            assert theirs.param_groups[0][key] == ours.param_groups[0][key], key


@MODES
def test_one_critic_update_matches_sb3_contrib(warmup, monkeypatch):
    """policy_delay 2, first update: the critics alone step; the actor's weights and statistics
    stay (its one pass, for a' ~ pi(s'), is in eval mode)."""
    model, learner = both_sides(policy_delay=2, warmup=warmup)
    actor_before = [p.detach().clone() for p in model.actor.parameters()]
    theirs, ours = update_both(model, learner, FixedNoise(monkeypatch), seed=10)
    assert theirs.actor is None, "sb3-contrib's first of two updates is the critics' alone"
    assert_same_losses(theirs, ours)
    assert_same_tensors(tensor_pairs(model, learner))
    assert all(
        torch.equal(a, b) for a, b in zip(actor_before, model.actor.parameters(), strict=True)
    )
    actor_renorms = [layer for layer in model.actor.modules() if isinstance(layer, Sb3BatchRenorm)]
    assert [int(layer.steps) for layer in actor_renorms] == [STEPS] * 3


@MODES
def test_an_update_where_the_actor_and_temperature_step_matches_sb3_contrib(warmup, monkeypatch):
    """policy_delay 2: the first update steps the critics, the second the critics, then the actor
    under the stepped critics and the temperature; losses and every tensor agree after each."""
    model, learner = both_sides(policy_delay=2, warmup=warmup)
    noise = FixedNoise(monkeypatch)
    for seed, actor_steps in ((10, False), (11, True)):
        theirs, ours = update_both(model, learner, noise, seed=seed)
        assert (theirs.actor is not None) == actor_steps
        assert_same_losses(theirs, ours)
        assert_same_tensors(tensor_pairs(model, learner))
    alpha = float(learner.module[MODULE].unwrapped().log_alpha.detach().exp())
    assert alpha != pytest.approx(ALPHA, abs=1e-5), "the temperature stepped"
    assert math.isfinite(alpha)


def test_several_updates_stay_together_with_policy_delay_three(monkeypatch):
    """Six updates at sb3-contrib's default policy delay, renormalised after the first pass: the
    actor steps at updates 3 and 6 on both sides, and the two sides do not drift apart."""
    model, learner = both_sides(policy_delay=3, warmup=0)
    noise = FixedNoise(monkeypatch)
    for update in range(1, 7):
        theirs, ours = update_both(model, learner, noise, seed=20 + update)
        assert (ours.actor is not None) == (update % 3 == 0)
        assert_same_losses(theirs, ours)
        assert_same_tensors(tensor_pairs(model, learner))
