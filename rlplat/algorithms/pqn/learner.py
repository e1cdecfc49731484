"""The PQN loss (Gallici et al. 2025): each Q(s_t, a_t) of the sampled rollout fits its
lambda-return

    G_t = r_t + gamma (1 - terminated_t) ((1 - lambda) max_a Q(s_{t+1}, a) + lambda G_{t+1})

by the squared error, averaged over the minibatch. The returns are computed once per rollout,
before the epochs, with the network that acted (no target network): RLlib's lambda-return
connector (``GeneralAdvantageEstimation``'s value targets, with max_a Q as the value and
``q_lambda`` as lambda), after one artificial step per episode chunk for the bootstrap
(``AddOneTsToEpisodesAndTruncate``, whose loss mask keeps that step out of the loss).
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.connectors.learner import (
    AddOneTsToEpisodesAndTruncate,
    GeneralAdvantageEstimation,
)
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.typing import ModuleID

from rlplat.algorithms.pqn.rl_module import Q_VALUES
from rlplat.engine.learner import RlplatLearner
from rlplat.seams.rllib_learner import learner_connector


class PQNLearner(RlplatLearner):
    def build(self) -> None:
        super().build()
        pipeline = learner_connector(self)
        if pipeline is not None and self.config.add_default_connectors_to_learner_pipeline:
            pipeline.prepend(AddOneTsToEpisodesAndTruncate())
            pipeline.append(
                GeneralAdvantageEstimation(gamma=self.config.gamma, lambda_=self.config.q_lambda)
            )

    def compute_loss_for_module(
        self, *, module_id: ModuleID, config: Any, batch: dict, fwd_out: dict
    ) -> torch.Tensor:
        q = fwd_out[Q_VALUES].gather(-1, batch[Columns.ACTIONS].long().unsqueeze(-1)).squeeze(-1)
        targets = batch[Postprocessing.VALUE_TARGETS]
        errors = (q - targets) ** 2
        mask = batch.get(Columns.LOSS_MASK)
        loss = errors.mean() if mask is None else errors[mask].mean()
        self.metrics.log_dict(
            {"q_loss": loss.detach(), "q_mean": q.detach().mean(), "target_mean": targets.mean()},
            key=module_id,
            window=1,
        )
        return loss
