"""RLlib learners' private state that rlplat's learners read or write.

rlplat's learners save more state in their checkpoints (their learner connector's) and cut and
count their minibatches themselves. RLlib's ``Learner`` keeps what those need in private
attributes and steps, with no public getter or hook; these functions are the only places that
name them. (Parameters and optimizers come from the public ``get_optimizers_for_module`` and
each torch optimizer's ``param_groups``.)
"""

from __future__ import annotations

from typing import Any

from ray.rllib.core.learner.learner import Learner

__all__ = [
    "LearnerHooks",
    "learner_connector",
    "update_keeping_metrics",
]


def update_keeping_metrics(learner_group: Any, **update: Any) -> Any:
    """One ``LearnerGroup.update`` whose learners keep this update's metrics unreduced (to be
    reduced once after several updates: a reduce costs about as much as a small network's
    update). RLlib's ``update`` takes that as the private keyword ``_no_metrics_reduce``."""
    return learner_group.update(**update, _no_metrics_reduce=True)


def learner_connector(learner: Learner) -> Any:
    """The learner's connector pipeline (None without one): what a learner adds pieces to in
    ``build`` and saves in checkpoints. ``Learner._learner_connector`` has no public getter."""
    return learner._learner_connector


class LearnerHooks:
    """Learner mixin (before an RLlib learner class): RLlib's private steps of ``update`` under
    public names that a subclass may override, each RLlib's own until it does.

    RLlib's ``Learner.update`` cuts minibatches in ``_create_iterator_if_necessary``, logs the
    trained-steps counters of each in ``_log_steps_trained_metrics`` and clips gradients with
    the function ``_get_clip_function`` returns; it builds the batch in
    ``_make_batch_if_necessary`` and counts weight versions in ``_weights_seq_no``. None has a
    public hook."""

    def _create_iterator_if_necessary(self, **arguments: Any) -> Any:
        return self.minibatch_iterator(**arguments)

    def minibatch_iterator(self, **arguments: Any) -> Any:
        """The minibatches of one update (RLlib's ``_create_iterator_if_necessary``)."""
        return super()._create_iterator_if_necessary(**arguments)  # type: ignore[misc]

    def _log_steps_trained_metrics(self, batch: Any) -> None:
        self.log_steps_trained(batch)

    def log_steps_trained(self, batch: Any) -> None:
        """Log one minibatch's trained-steps counters (RLlib's ``_log_steps_trained_metrics``)."""
        super()._log_steps_trained_metrics(batch)  # type: ignore[misc]

    def make_batch(self, training_data: Any) -> Any:
        """The ``MultiAgentBatch`` of ``training_data`` (RLlib's ``_make_batch_if_necessary``)."""
        return self._make_batch_if_necessary(training_data=training_data)  # type: ignore[attr-defined]

    @property
    def weights_seq_no(self) -> int:
        """The learner's weights version (RLlib's ``_weights_seq_no``)."""
        return self._weights_seq_no  # type: ignore[attr-defined]

    def _get_clip_function(self) -> Any:
        return self.clip_function()

    def clip_function(self) -> Any:
        """The function that clips gradients (RLlib's ``_get_clip_function``)."""
        return super()._get_clip_function()  # type: ignore[misc]
