"""MAPPO's learner: PPO's loss, with the critic's input added to every batch before the
advantages are computed (the value targets and the value loss use the centralised critic)."""

from __future__ import annotations

from ray.rllib.connectors.learner import AddOneTsToEpisodesAndTruncate

from rlplat.algorithms.mappo.connectors import CriticStateToBatch
from rlplat.algorithms.rllib_learners import PPOLearner
from rlplat.seams.rllib_learner import learner_connector


class MAPPOLearner(PPOLearner):
    def build(self) -> None:
        super().build()
        pipeline = learner_connector(self)
        if pipeline is not None and self.config.add_default_connectors_to_learner_pipeline:
            # After the bootstrap step is added, so the critic reads it too.
            pipeline.insert_after(AddOneTsToEpisodesAndTruncate, CriticStateToBatch())
