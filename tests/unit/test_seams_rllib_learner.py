"""Canaries of rlplat/seams/rllib_learner.py: RLlib's learner internals its seams rely on."""

from __future__ import annotations

import inspect

from ray.rllib.core.learner.learner import Learner
from ray.rllib.core.learner.learner_group import LearnerGroup
from ray.rllib.core.learner.torch.torch_learner import TorchLearner

from tests.seam_canary import has, holds

SEAM = "rlplat.seams.rllib_learner."


def test_update_keeping_metrics():
    seam = SEAM + "update_keeping_metrics"
    has(seam, Learner, "update", params=("batch", "timesteps", "_no_metrics_reduce"))
    # The group hands its update's other keywords to each learner's update.
    has(seam, LearnerGroup, "update", params=("batch", "timesteps", "kwargs"))


def test_learner_connector():
    seam = SEAM + "learner_connector"
    has(seam, Learner, "_learner_connector")
    holds(
        seam,
        "self._learner_connector = self.config.build_learner_connector("
        in inspect.getsource(Learner.build),
        "Learner.build keeps the config's learner connector pipeline in _learner_connector",
    )


def test_learner_hooks():
    seam = SEAM + "LearnerHooks"
    params = ("training_data", "num_total_minibatches", "num_epochs", "minibatch_size")
    has(seam, Learner, "_create_iterator_if_necessary", params=params)
    has(seam, Learner, "_log_steps_trained_metrics", params=("batch",))
    has(seam, Learner, "_make_batch_if_necessary", params=("training_data",))
    has(seam, Learner, "_weights_seq_no")
    has(seam, TorchLearner, "_get_clip_function", params=())
    update = inspect.getsource(Learner)
    for hook in ("_create_iterator_if_necessary(", "_get_clip_function()("):
        holds(seam, f"self.{hook}" in update, f"RLlib's Learner calls self.{hook}...)")
