"""Random Network Distillation (Burda et al. 2019, "Exploration by Random Network Distillation")
for PPO: ``exploration.rnd`` in an experiment.

A fixed, randomly initialised target network maps each observation to an embedding; a predictor
network learns to reproduce it. Observations the agent has seen often are predicted well, new
ones are not, so the prediction error is an exploration bonus. As the paper and CleanRL's
``ppo_rnd_envpool.py`` do it:

- the networks read observations normalised by a running mean and standard deviation and
  clipped to [-clip, clip]; the intrinsic reward of a transition is the predictor's squared
  error on the observation it reaches, divided by a running standard deviation of the
  discounted intrinsic return (so its scale does not drift as the predictor improves, and a
  constant factor on the error, such as CleanRL's 1/2, changes nothing);
- a second value head (on the critic's encoder) estimates the intrinsic return, with its own
  discount, and treats it as non-episodic: an episode's end does not end the intrinsic return
  (its last observation's intrinsic value bootstraps it), so the agent is not taught that ending
  an episode forfeits novelty;
- the advantages are ``extrinsic_coeff * A_ext + coeff * A_int``, each from its own GAE, then
  standardised as PPO's are; the loss adds the intrinsic value head's squared error (weighted
  by ``vf_loss_coeff``) and the predictor's error on a random ``update_proportion`` of the rows.

Everything RND keeps is in the module (``RndPPOModule.rnd``: the networks and both running
statistics, as buffers), so checkpoints, ``--resume`` and ``--from`` carry it; none of it is on
the acting path, so env runners, exported graphs and served policies hold PPO's policy only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.connectors.learner import GeneralAdvantageEstimation
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import CRITIC, ENCODER_OUT
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.postprocessing.value_predictions import compute_value_targets
from torch import nn

from rlplat.algorithms.rllib_learners import PPOLearner
from rlplat.seams.rllib_learner import learner_connector

RND = "rnd"  # the rl_module.model_config key rlplat fills from exploration.rnd
INTRINSIC_REWARDS = "intrinsic_rewards"
INTRINSIC_VALUE_TARGETS = "intrinsic_value_targets"


@dataclass(frozen=True)
class RndSettings:
    """``exploration.rnd`` (the schema's ``RndSpec`` says what each is); defaults are CleanRL's
    ``ppo_rnd_envpool.py`` where they carry over to vector observations."""

    coeff: float = 1.0
    extrinsic_coeff: float = 2.0
    gamma: float = 0.99
    update_proportion: float = 0.25
    hiddens: tuple[int, ...] = (128, 128)
    embedding_size: int = 64
    observation_clip: float = 5.0

    @classmethod
    def of(cls, model_config: Any) -> RndSettings | None:
        """The settings in a module's ``model_config`` (None: no RND)."""
        value = (model_config or {}).get(RND) if hasattr(model_config, "get") else None
        if value is None:
            return None
        return cls(**{**value, "hiddens": tuple(value.get("hiddens", cls.hiddens))})

    def as_model_config(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "hiddens": list(self.hiddens)}


class RunningMeanStd(nn.Module):
    """Mean and variance of everything ``update`` was given (Chan et al.'s parallel update),
    kept as buffers so they are part of the module's state."""

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.tensor(1e-4))  # CleanRL's start: no division by 0

    @torch.no_grad()
    def update(self, values: torch.Tensor) -> None:
        count = values.shape[0]
        if count == 0:
            return
        mean, var = values.mean(0), values.var(0, unbiased=False)
        delta, total = mean - self.mean, self.count + count
        self.var.copy_(
            (self.var * self.count + var * count + delta.square() * self.count * count / total)
            / total
        )
        self.mean.add_(delta * count / total)
        self.count.copy_(total)


def _mlp(inputs: int, hiddens: tuple[int, ...], outputs: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for width in hiddens:
        layers += [nn.Linear(inputs, width), nn.ReLU()]
        inputs = width
    return nn.Sequential(*layers, nn.Linear(inputs, outputs))


class RandomNetworkDistillation(nn.Module):
    """The fixed target, the trained predictor (one hidden layer more, as in the paper, so it
    can fit the target), and the running statistics of observations and intrinsic returns."""

    def __init__(self, observation_size: int, settings: RndSettings):
        super().__init__()
        self.clip = settings.observation_clip
        self.target = _mlp(observation_size, settings.hiddens, settings.embedding_size)
        self.target.requires_grad_(False)
        widest = settings.hiddens[-1] if settings.hiddens else settings.embedding_size
        self.predictor = _mlp(
            observation_size, (*settings.hiddens, widest), settings.embedding_size
        )
        self.observations = RunningMeanStd((observation_size,))
        self.returns = RunningMeanStd(())

    def observe(self, observations: torch.Tensor) -> None:
        """Add ``observations`` to the running statistics that normalise the networks' input."""
        self.observations.update(observations.reshape(observations.shape[0], -1).float())

    def normalised(self, observations: torch.Tensor) -> torch.Tensor:
        flat = observations.reshape(observations.shape[0], -1).float()
        scale = (self.observations.var + 1e-8).sqrt()
        return ((flat - self.observations.mean) / scale).clamp(-self.clip, self.clip)

    def errors(self, observations: torch.Tensor) -> torch.Tensor:
        """Each row's squared prediction error, summed over the embedding."""
        inputs = self.normalised(observations)
        return (self.predictor(inputs) - self.target(inputs)).square().sum(-1)


class RndPPOModule(DefaultPPOTorchRLModule):
    """PPO's module with an intrinsic value head beside its value head (both on the critic's
    encoder) and RND's networks (``model_config["rnd"]``); it acts as PPO's does."""

    def setup(self) -> None:
        super().setup()
        settings = RndSettings.of(self.model_config)
        if self.inference_only or settings is None:
            return
        self.intrinsic_vf = self.catalog.build_vf_head(framework="torch")
        size = int(np.prod(self.observation_space.shape))
        self.rnd = RandomNetworkDistillation(size, settings)

    def get_non_inference_attributes(self) -> list[str]:
        return [*super().get_non_inference_attributes(), "intrinsic_vf", "rnd"]

    def critic_embeddings(self, batch: dict[str, Any]) -> torch.Tensor:
        if hasattr(self.encoder, "critic_encoder"):
            return self.encoder.critic_encoder(batch)[ENCODER_OUT]
        return self.encoder(batch)[ENCODER_OUT][CRITIC]

    def intrinsic_values(self, embeddings: torch.Tensor) -> torch.Tensor:
        return self.intrinsic_vf(embeddings).squeeze(-1)


class RndAdvantages(ConnectorV2):
    """The learner piece that replaces RLlib's ``GeneralAdvantageEstimation`` for RND: both
    value heads in one critic pass, the intrinsic rewards, both GAEs, their weighted sum as the
    advantages (see the module's docstring). Like RLlib's, it reads episodes elongated by one
    artificial step (``AddOneTsToEpisodesAndTruncate``), whose rows the loss mask leaves out."""

    def __init__(self, input_observation_space=None, input_action_space=None, *, gamma, lambda_):
        super().__init__(input_observation_space, input_action_space)
        self.gamma, self.lambda_ = gamma, lambda_

    def __call__(self, *, rl_module: Any, batch: dict, episodes: list, **kwargs: Any) -> dict:
        chunks = list(self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False))
        for module_id, rows in batch.items():
            module = rl_module[module_id].unwrapped()  # a data-parallel learner wraps it
            settings = RndSettings.of(module.model_config)
            lengths = [len(e) for e in chunks if e.module_id in (None, module_id)]
            with torch.no_grad():
                embeddings = module.critic_embeddings(rows)
                values = module.vf(embeddings).squeeze(-1)
                intrinsic_values = module.intrinsic_values(embeddings)
                module.rnd.observe(rows[Columns.OBS])
                novelty = module.rnd.errors(rows[Columns.OBS]).cpu().numpy()
            device = values.device
            values, intrinsic_values = values.cpu().numpy(), intrinsic_values.cpu().numpy()
            terminateds = rows[Columns.TERMINATEDS].cpu().numpy().astype(np.float32)
            truncateds = rows[Columns.TRUNCATEDS].cpu().numpy().astype(np.float32)
            ends = np.cumsum(lengths) - 1  # each chunk's artificial last row
            # A transition's bonus is the novelty of the observation it reaches: the next row's.
            rewards = np.append(novelty[1:], 0.0).astype(np.float32)
            rewards[ends] = 0.0
            discounted = _discounted_sums(rewards, ends, settings.gamma)
            module.rnd.returns.update(torch.as_tensor(discounted, device=device))
            rewards /= float((module.rnd.returns.var + 1e-8).sqrt())
            targets = compute_value_targets(
                values=values,
                rewards=rows[Columns.REWARDS].cpu().numpy(),
                terminateds=terminateds,
                truncateds=truncateds,
                gamma=self.gamma,
                lambda_=self.lambda_,
            )
            intrinsic_targets = compute_value_targets(
                values=intrinsic_values,
                rewards=rewards,
                terminateds=np.zeros_like(terminateds),  # non-episodic
                truncateds=np.maximum(terminateds, truncateds),  # no GAE across episodes
                gamma=settings.gamma,
                lambda_=self.lambda_,
            )
            advantages = settings.extrinsic_coeff * (targets - values) + settings.coeff * (
                intrinsic_targets - intrinsic_values
            )
            advantages = (advantages - advantages.mean()) / max(1e-4, advantages.std())
            for column, value in (
                (Postprocessing.ADVANTAGES, advantages),
                (Postprocessing.VALUE_TARGETS, targets),
                (INTRINSIC_VALUE_TARGETS, intrinsic_targets),
                (INTRINSIC_REWARDS, rewards),
            ):
                rows[column] = torch.as_tensor(value, dtype=torch.float32, device=device)
        return batch


def _discounted_sums(rewards: np.ndarray, ends: np.ndarray, gamma: float) -> np.ndarray:
    """Each row's discounted sum of the rewards before it in its chunk (the paper's forward
    filter, restarted at each chunk), whose spread scales the intrinsic rewards."""
    sums = np.empty_like(rewards)
    running, starts = 0.0, set((ends + 1).tolist())
    for row, reward in enumerate(rewards):
        running = reward + (0.0 if row in starts else gamma * running)
        sums[row] = running
    return sums


class RndPPOLearner(PPOLearner):
    """PPO's learner with RND: ``RndAdvantages`` in place of RLlib's GAE piece, and the
    intrinsic value and predictor losses added to PPO's."""

    def build(self) -> None:
        super().build()
        pipeline = learner_connector(self)
        if pipeline is not None and self.config.add_default_connectors_to_learner_pipeline:
            pipeline.remove(GeneralAdvantageEstimation)
            pipeline.append(RndAdvantages(gamma=self.config.gamma, lambda_=self.config.lambda_))

    def get_parameters(self, module: Any) -> list[torch.nn.Parameter]:
        # RND's target network is fixed: no optimizer state and no gradients for it.
        return [param for param in module.parameters() if param.requires_grad]

    def compute_loss_for_module(
        self, *, module_id: str, config: Any, batch: dict[str, Any], fwd_out: dict[str, Any]
    ) -> torch.Tensor:
        loss = super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )
        module = self.module[module_id].unwrapped()
        settings = RndSettings.of(module.model_config)
        mask = batch.get(Columns.LOSS_MASK)
        if mask is None:
            mask = torch.ones_like(batch[INTRINSIC_REWARDS], dtype=torch.bool)
        intrinsic = module.intrinsic_values(fwd_out[Columns.EMBEDDINGS])
        intrinsic_vf_loss = (intrinsic - batch[INTRINSIC_VALUE_TARGETS]).square()[mask].mean()
        errors = module.rnd.errors(batch[Columns.OBS]) / settings.embedding_size
        chosen = mask & (torch.rand_like(errors) < settings.update_proportion)
        predictor_loss = errors[chosen].sum() / chosen.sum().clamp(min=1)
        self.metrics.log_dict(
            {
                "intrinsic_vf_loss": intrinsic_vf_loss,
                "rnd_predictor_loss": predictor_loss,
                "intrinsic_reward_mean": batch[INTRINSIC_REWARDS][mask].mean(),
                "intrinsic_return_mean": batch[INTRINSIC_VALUE_TARGETS][mask].mean(),
            },
            key=module_id,
            window=1,
        )
        return loss + config.vf_loss_coeff * intrinsic_vf_loss + predictor_loss
