"""SAC: RLlib's SAC (loss, learner, training loop) with the critic of the SAC paper.

RLlib 2.60's continuous-action critic is a multi-stream network: an observation MLP and an action
MLP (each ``fcnet_hiddens``), whose outputs go through a densely connected tanh fusion network
(``fusionnet_hiddens``, 256x256 by default) into the Q head. With 256x256 layers one Q forward
pass multiplies about ten 256-wide matrices where the paper's critic (Haarnoja et al. 2018, as in
Stable-Baselines3 and CleanRL) multiplies one, so each update cost several times theirs.

Here a Box-action critic is the paper's: one MLP (``fcnet_hiddens``, ``fcnet_activation``) over
the concatenated observation and action, then RLlib's Q head (``head_fcnet_hiddens``). Discrete
SAC and observations that are not flat vectors keep RLlib's critics. The critics of Box actions
are fitted by the paper's loss, half the squared TD error (as Stable-Baselines3's; CleanRL's is
the squared error), where RLlib's uses the Huber loss with delta 1: at HalfCheetah's TD errors of
2-3 that caps most samples' gradients, and the critic fits the median of its targets instead of
their mean. An update steps the critics first and then evaluates the actor's loss with the
stepped critics, in the paper's order (Algorithm 1; Stable-Baselines3's and CleanRL's too); RLlib's
computes every loss from one forward pass, so its actor climbs the critics of before the update.
The rest of RLlib's SAC learner is kept, with ``InPlaceTargetUpdates``.

Exploring, the module acts uniformly at random for its first ``random_steps`` env steps (by
default until learning starts), as Stable-Baselines3's and CleanRL's SAC do before
``learning_starts``; RLlib's samples its untrained policy there. Greedy, it takes tanh of the
policy's mean (``SquashedGaussian``), as theirs do; RLlib's takes the mean clipped to the bounds.
"""

# No ``from __future__ import annotations``: rlplat checks YAML values against these signatures.
import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.sac.sac import SAC as RLlibSAC
from ray.rllib.algorithms.sac.sac import SACConfig as RLlibSACConfig
from ray.rllib.algorithms.sac.sac_catalog import SACCatalog
from ray.rllib.algorithms.sac.sac_learner import (
    LOGPS_KEY,
    QF_LOSS_KEY,
    QF_MAX_KEY,
    QF_MEAN_KEY,
    QF_MIN_KEY,
    QF_PREDS,
    QF_TARGET_NEXT,
    QF_TWIN_LOSS_KEY,
    QF_TWIN_PREDS,
    TD_ERROR_MEAN_KEY,
)
from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import (
    TorchDeterministic,
    TorchSquashedGaussian,
)
from ray.rllib.core.learner.learner import POLICY_LOSS_KEY
from ray.rllib.core.models.base import ENCODER_OUT, Encoder
from ray.rllib.core.models.configs import MLPEncoderConfig
from ray.rllib.core.models.torch.encoder import TorchMLPEncoder
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.utils.metrics import TD_ERROR_KEY
from ray.rllib.utils.typing import ModuleID, ParamDict

from rlplat.algorithms.base import (
    RandomWarmupConfig,
    WithoutModeSwitch,
)
from rlplat.algorithms.networks import OBSERVATION_NORM, RunningObservationNorm, SimbaCatalog
from rlplat.algorithms.transition_loop import InPlaceTargetUpdates, TransitionBatchLoop
from rlplat.engine.learner import optimizer_parameters, state_requested, step_if_finite
from rlplat.engine.optimizers import adam
from rlplat.seams.rllib_parts import CatalogHooks


class ObsActionMLPEncoder(TorchMLPEncoder):
    """An MLP over ``concat(observation, action)``: the critic's body in the SAC paper."""

    def _forward(self, inputs: dict, **kwargs: Any) -> dict:
        obs = inputs[Columns.OBS]
        features = torch.cat([obs.reshape(obs.shape[0], -1), inputs[Columns.ACTIONS]], dim=-1)
        return {ENCODER_OUT: self.net(features)}


@dataclass
class ObsActionMLPEncoderConfig(MLPEncoderConfig):
    """``MLPEncoderConfig`` whose input is the observation and the action side by side."""

    def build(self, framework: str = "torch") -> Encoder:
        # Its settings are the experiment's model_config, checked before Ray starts
        # (rlplat.rllib.build.check_model_config), and the catalog's input dimensions.
        return ObsActionMLPEncoder(self)


class SquashedGaussian(TorchSquashedGaussian):
    """RLlib's tanh-squashed Gaussian whose greedy action is the squashed mean, tanh(mean) in
    the action bounds: the policy's most likely action. RLlib 2.60's is the mean before the
    squash, which the env runner then clips to the bounds, so greedy episodes (evaluation,
    ``rlplat eval``, checkpoint scores, exports) played a bang-bang copy of the policy."""

    def to_deterministic(self) -> TorchDeterministic:
        squashed = self.low + (torch.tanh(self.loc) + 1.0) / 2.0 * (self.high - self.low)
        return TorchDeterministic(loc=torch.clamp(squashed, self.low, self.high))


class PaperCriticSACCatalog(CatalogHooks, SACCatalog):
    """SAC's catalog with the concatenating critic for Box actions over flat observations, and
    ``SquashedGaussian`` actions."""

    def get_action_dist_cls(self, framework: str) -> type:
        if isinstance(self.action_space, gym.spaces.Box):
            return SquashedGaussian
        return super().get_action_dist_cls(framework)

    def build_qf_encoder(self, framework: str) -> Encoder:
        obs_config = self.encoder_config
        flat = type(obs_config) is MLPEncoderConfig
        if not flat or not isinstance(self.action_space, gym.spaces.Box):
            return super().build_qf_encoder(framework)  # images, nested spaces: RLlib's critic
        settings = {f.name: getattr(obs_config, f.name) for f in fields(obs_config)}
        action_size = int(np.prod(self.action_space.shape))
        settings["input_dims"] = [int(obs_config.input_dims[0]) + action_size]
        self.qf_encoder_config = ObsActionMLPEncoderConfig(**settings)
        return self.qf_encoder_config.build(framework=framework)


class SimbaSACCatalog(SimbaCatalog, PaperCriticSACCatalog):
    """``PaperCriticSACCatalog`` whose encoders are SimBa's with ``model_config.simba``."""


NETWORK_OBS = "network_obs"  # a training batch's observations as SAC's networks saw them


class SACModule(WithoutModeSwitch, DefaultSACTorchRLModule):
    """RLlib's SAC module that explores uniformly at random for its first ``random_steps`` env
    steps (``model_config``; none in checkpoints from before the setting). It draws its exploring
    actions itself in both phases, so every step carries the same outputs: the policy's
    distribution inputs, the action and the action's log-probability under what drew it.

    With ``model_config.observation_norm`` (hindsight relabelling's ``normalize``, whose memory
    must keep raw observations), every network sees observations normalised by running
    statistics that each training batch updates (``RunningObservationNorm``)."""

    TAKES_OBSERVATION_NORM: ClassVar[bool] = True

    def setup(self) -> None:
        super().setup()
        norm = self.model_config.get(OBSERVATION_NORM)
        features = gym.spaces.flatdim(self.observation_space)
        self.observation_norm = RunningObservationNorm(features, **norm) if norm else None

    def normalized(self, batch: dict[str, Any]) -> dict[str, Any]:
        """``batch`` with its observations and next observations as the networks see them."""
        if self.observation_norm is None:
            return batch
        seen = dict(batch)
        for column in (Columns.OBS, Columns.NEXT_OBS):
            if column in batch:
                seen[column] = self.observation_norm(batch[column])
        return seen

    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return super()._forward_inference(self.normalized(batch))

    @torch.no_grad()
    def _forward_exploration(
        self, batch: dict[str, Any], t: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        out = self._forward_inference(batch)
        inputs = out[Columns.ACTION_DIST_INPUTS]
        if (t or 0) < int(self.model_config.get("random_steps", 0)):
            actions, logp = self.uniform_actions(len(inputs))
        else:
            dist = self.get_exploration_action_dist_cls().from_logits(inputs)
            actions = dist.sample()
            logp = dist.logp(actions)
        return out | {Columns.ACTIONS: actions, Columns.ACTION_LOGP: logp}

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """For Box actions, what ``SACLearner``'s losses read: both critics at the batch's
        actions and the policy's distribution inputs (with gradients), and without gradients the
        log-probability of an action resampled from the policy (the temperature's loss) and the
        target critics' value of a next action drawn from it. RLlib's also evaluates the critics
        at the resampled actions, for an actor loss that ``SACLearner`` computes after stepping
        the critics, and tracks gradients through the next-state policy and targets.
        ``NETWORK_OBS`` holds the observations as the networks saw them, for the actor's loss."""
        if self.observation_norm is not None:
            self.observation_norm.update(batch[Columns.OBS])
            batch = self.normalized(batch)
        if not isinstance(self.action_space, gym.spaces.Box):
            return super()._forward_train(batch, **kwargs)
        obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
        taken = {Columns.OBS: obs, Columns.ACTIONS: batch[Columns.ACTIONS]}
        out = {NETWORK_OBS: obs, QF_PREDS: critic_value(self.qf_encoder, self.qf, taken)}
        if self.twin_q:
            out[QF_TWIN_PREDS] = critic_value(self.qf_twin_encoder, self.qf_twin, taken)
        inputs = self.pi(self.pi_encoder({Columns.OBS: obs})[ENCODER_OUT])
        out[Columns.ACTION_DIST_INPUTS] = inputs
        dist_class = self.get_train_action_dist_cls()
        with torch.no_grad():
            _, out["logp_resampled"] = dist_class.from_logits(inputs).sample_and_logp()
            next_inputs = self.pi(self.pi_encoder({Columns.OBS: next_obs})[ENCODER_OUT])
            next_actions, out["logp_next_resampled"] = dist_class.from_logits(
                next_inputs
            ).sample_and_logp()
            next_batch = {Columns.OBS: next_obs, Columns.ACTIONS: next_actions}
            out[QF_TARGET_NEXT] = self.forward_target(next_batch)
        return out

    def uniform_actions(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` actions drawn uniformly (Box: in the squashed range [-1, 1] that
        ``normalize_actions`` scales to the bounds) and their log-density."""
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            actions = torch.randint(int(space.n), (n,))
            return actions, torch.full((n,), -math.log(space.n))
        shape = space.shape
        actions = torch.rand((n, *shape)) * 2.0 - 1.0
        return actions, torch.full((n,), -math.log(2.0) * math.prod(shape))


def critic_value(encoder: Encoder, head: torch.nn.Module, batch: dict[str, Any]) -> torch.Tensor:
    """Q(s, a) of a Box-action critic, one value per row (what RLlib's SAC module computes in
    its private ``_qf_forward_train_helper``)."""
    return head(encoder(batch)[ENCODER_OUT]).squeeze(-1)


TEMPERATURE_STATE = "rlplat_log_alpha"
# RLlib's SAC optimizer names, in the order they step.
CRITIC_OPTIMIZERS, ACTOR_OPTIMIZERS = ("qf", "qf_twin"), ("policy", "alpha")


class TemperatureState:
    """Learner mixin (before an RLlib SAC-family torch learner): its state includes each
    module's log temperature, which RLlib's leaves out (it is no module parameter), so a
    resumed run would start again from ``initial_alpha``."""

    curr_log_alpha: dict[ModuleID, torch.Tensor]

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        state = super().get_state(  # type: ignore[misc]
            components, not_components=not_components, **kwargs
        )
        if state_requested(TEMPERATURE_STATE, components, not_components):
            state[TEMPERATURE_STATE] = {
                module_id: log_alpha.detach().cpu().tolist()
                for module_id, log_alpha in self.curr_log_alpha.items()
            }
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)  # type: ignore[misc]
        with torch.no_grad():  # in place: the temperature's optimizer holds this tensor
            for module_id, value in state.get(TEMPERATURE_STATE, {}).items():
                log_alpha = self.curr_log_alpha[module_id]
                log_alpha.copy_(torch.tensor(value, dtype=log_alpha.dtype))


class FusedSACOptimizers:
    """Learner mixin (before RLlib's SAC or CQL torch learner): the optimizers RLlib's SAC
    learner sets up, each an Adam fused over its tensors (one kernel per step instead of one
    per tensor: SAC HalfCheetah's four steps 1.81 -> 0.63 ms, docs/performance.md)."""

    def configure_optimizers_for_module(
        self, module_id: ModuleID, config: RLlibSACConfig = None
    ) -> None:
        """RLlib's SAC optimizers (critic, twin critic, actor, temperature: Adam with eps 1e-7,
        each at its learning rate), fused (``rlplat.engine.optimizers.adam``)."""
        module = self.module[module_id]
        groups = [("qf", [module.qf_encoder, module.qf], config.critic_lr)]
        if config.twin_q:
            groups.append(("qf_twin", [module.qf_twin_encoder, module.qf_twin], config.critic_lr))
        groups.append(("policy", [module.pi_encoder, module.pi], config.actor_lr))
        for name, networks, lr in groups:
            params = [p for network in networks for p in self.get_parameters(network)]
            self.register_optimizer(
                module_id=module_id,
                optimizer_name=name,
                optimizer=adam(params, eps=1e-7),
                params=params,
                lr_or_lr_schedule=lr,
            )
        temperature = self.curr_log_alpha[module_id]
        self.register_optimizer(
            module_id=module_id,
            optimizer_name="alpha",
            optimizer=adam([temperature], eps=1e-7),
            params=[temperature],
            lr_or_lr_schedule=config.alpha_lr,
        )


class SACLearner(TemperatureState, FusedSACOptimizers, InPlaceTargetUpdates, SACTorchLearner):
    """RLlib's SAC torch learner with ``InPlaceTargetUpdates``, ``TemperatureState`` and, for
    Box actions, the paper's squared-error critic loss and update order (critics, then actor
    and temperature). Discrete-action modules keep RLlib's losses and gradients."""

    def build(self) -> None:
        super().build()
        self._actor_inputs: dict[ModuleID, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        # A Box-action module's losses of this update, by (module, optimizer name + "_loss"),
        # until ``compute_gradients`` differentiates them.
        self._box_losses: dict[tuple[ModuleID, str], torch.Tensor] = {}

    def compute_loss_for_module(
        self, *, module_id: ModuleID, config: RLlibSACConfig, batch: dict, fwd_out: dict
    ) -> torch.Tensor:
        if not isinstance(self.module[module_id].unwrapped().action_space, gym.spaces.Box):
            return super().compute_loss_for_module(
                module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
            )
        return self.continuous_loss(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )

    def continuous_loss(
        self, *, module_id: ModuleID, config: RLlibSACConfig, batch: dict, fwd_out: dict
    ) -> torch.Tensor:
        """The critic and temperature losses of SAC (Haarnoja et al. 2018, with a learned
        temperature): each critic fits r + gamma^n (1 - terminated) (min_i Q'_i(s', a') - alpha
        log pi(a'|s')), a' ~ pi(s'), by half the squared error; alpha moves the policy's entropy
        towards the target entropy. The actor's loss waits for the stepped critics
        (``compute_gradients``)."""
        log_alpha = self.curr_log_alpha[module_id]
        alpha = log_alpha.exp().detach()
        logp = fwd_out["logp_resampled"]
        with torch.no_grad():
            soft_next_value = fwd_out[QF_TARGET_NEXT] - alpha * fwd_out["logp_next_resampled"]
            alive = 1.0 - batch[Columns.TERMINATEDS].float()
            discount = config.gamma ** batch["n_step"]
            target = batch[Columns.REWARDS] + discount * alive * soft_next_value

        weights = batch["weights"]
        q = fwd_out[QF_PREDS]
        losses = {QF_LOSS_KEY: 0.5 * (weights * (q - target) ** 2).mean()}
        td_error = (q.detach() - target).abs()
        if config.twin_q:
            q_twin = fwd_out[QF_TWIN_PREDS]
            losses[QF_TWIN_LOSS_KEY] = 0.5 * (weights * (q_twin - target) ** 2).mean()
            td_error = 0.5 * (td_error + (q_twin.detach() - target).abs())
        entropy_gap = logp.detach() + self.target_entropy[module_id]
        losses["alpha_loss"] = -(log_alpha * entropy_gap).mean()
        for name, loss in losses.items():
            self._box_losses[(module_id, name)] = loss
        self._actor_inputs[module_id] = (
            fwd_out[NETWORK_OBS],
            fwd_out[Columns.ACTION_DIST_INPUTS],
            alpha,
        )

        # Per-sample TD errors: a prioritized replay buffer's new priorities.
        self.metrics.log_value((module_id, TD_ERROR_KEY), td_error, reduce="item_series")

        self.metrics.log_dict(
            {name: loss.detach() for name, loss in losses.items()}
            | {
                "alpha_value": alpha[0],
                "log_alpha_value": log_alpha.detach()[0],
                "target_entropy": self.target_entropy[module_id],
                LOGPS_KEY: logp.detach().mean(),
                TD_ERROR_MEAN_KEY: td_error.mean(),
            },
            key=module_id,
            window=1,
        )
        return sum(losses.values())

    def compute_gradients(
        self, loss_per_module: dict[ModuleID, torch.Tensor], **kwargs: Any
    ) -> ParamDict:
        """Each optimizer's gradient of its own loss. For a Box-action module the critics step
        here, and the actor's gradient is of its loss under the stepped critics; the other
        modules' gradients are RLlib's."""
        box_modules = set(loss_per_module) & set(self._actor_inputs)
        grads: ParamDict = super().compute_gradients(
            {key: loss for key, loss in loss_per_module.items() if key not in box_modules},
            **kwargs,
        )
        for module_id in box_modules:
            for _, optimizer in self.get_optimizers_for_module(module_id):
                optimizer.zero_grad(set_to_none=True)
            critics = self.postprocess_gradients(self._own_gradients(module_id, CRITIC_OPTIMIZERS))
            step_if_finite(self, critics, self._optimizers(module_id, CRITIC_OPTIMIZERS))
            for param in critics:  # a torch param is its own ref
                param.grad = None
            self._box_losses[(module_id, POLICY_LOSS_KEY)] = self._actor_loss(module_id)
            grads.update(self._own_gradients(module_id, ACTOR_OPTIMIZERS))
        assert not self._box_losses
        return grads

    def _actor_loss(self, module_id: ModuleID) -> torch.Tensor:
        """alpha log pi(a|s) - min_i Q_i(s, a), a ~ pi(s) reparameterised, under the current
        critics (their own parameters take no gradient from it)."""
        obs, dist_inputs, alpha = self._actor_inputs.pop(module_id)
        module = self.module[module_id].unwrapped()
        dist = module.get_train_action_dist_cls().from_logits(dist_inputs)
        actions, logp = dist.rsample_and_logp()
        q = module.compute_q_values({Columns.OBS: obs, Columns.ACTIONS: actions})
        loss = (alpha * logp - q).mean()
        value = q.detach()  # the critics' value of the policy's actions, as RLlib's q_curr
        self.metrics.log_dict(
            {
                POLICY_LOSS_KEY: loss.detach(),
                QF_MEAN_KEY: value.mean(),
                QF_MAX_KEY: value.max(),
                QF_MIN_KEY: value.min(),
            },
            key=module_id,
            window=1,
        )
        return loss

    def _optimizers(
        self, module_id: ModuleID, names: tuple[str, ...]
    ) -> list[torch.optim.Optimizer]:
        return [opt for name, opt in self.get_optimizers_for_module(module_id) if name in names]

    def _own_gradients(self, module_id: ModuleID, names: tuple[str, ...]) -> ParamDict:
        """The gradient of the losses of the module's optimizers ``names`` (consumed), each
        with respect to that optimizer's parameters only."""
        grads: ParamDict = {}
        for name, optimizer in self.get_optimizers_for_module(module_id):
            if name not in names:
                continue
            loss = self._box_losses.pop((module_id, f"{name}_loss"))
            params = optimizer_parameters(optimizer)
            values = torch.autograd.grad(loss, params, retain_graph=True)
            grads.update(zip(params, values, strict=True))
        return grads


class SACConfig(RandomWarmupConfig, RLlibSACConfig):
    """RLlib's ``SACConfig`` and ``random_steps``; its default module is ``SACModule`` with the
    paper's critic for Box actions, its learner ``SACLearner``."""

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or SAC)

    def get_default_learner_class(self) -> type:
        return SACLearner

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=SACModule, catalog_class=PaperCriticSACCatalog)


class SAC(TransitionBatchLoop, RLlibSAC):
    """RLlib's SAC with ``SACConfig``'s critic and ``TransitionBatchLoop``'s replayed batches."""

    @classmethod
    def get_default_config(cls) -> SACConfig:
        return SACConfig(cls)
