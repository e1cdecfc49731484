"""The learner's minibatches of a train batch, cut once per epoch, and its trained-steps counters
logged once per update.

RLlib's ``MiniBatchCyclicIterator`` slices every minibatch out of the ``SampleBatch`` and copies
it (``concat_samples``), and the learner logs seven trained-steps counters after each minibatch:
on PPO HalfCheetah (160 minibatches of 64 per iteration) ~90 and ~40 ms of a ~1 s update.
:class:`EpochMinibatches` cuts the same minibatches (the same rows in the same order, the
shuffles drawn from numpy's global generator at the same points) as views of columns shuffled
once per epoch, and logs the counters' sums once, after the last minibatch (updates of one
batch, the off-policy learners', keep RLlib's iterator and counters).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import tree
from ray.rllib.core import ALL_MODULES
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import (
    MODULE_TRAIN_BATCH_SIZE_MEAN,
    NUM_ENV_STEPS_TRAINED,
    NUM_ENV_STEPS_TRAINED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    WEIGHTS_SEQ_NO,
)
from ray.rllib.utils.typing import ModuleID

from rlplat.seams.rllib_learner import LearnerHooks


class EpochMinibatches(LearnerHooks):
    """Learner mixin (before a ``TorchLearner``): see the module's docstring. Recurrent batches
    (sequences), data iterators and a fixed number of minibatches keep RLlib's iterator."""

    module: Any

    def minibatch_iterator(
        self,
        *,
        training_data: TrainingData,
        num_total_minibatches: int = 0,
        num_epochs: int = 1,
        minibatch_size: int | None = None,
        shuffle_batch_per_epoch: bool = False,
        **kwargs: Any,
    ) -> Any:
        arguments = dict(
            training_data=training_data,
            num_total_minibatches=num_total_minibatches,
            num_epochs=num_epochs,
            minibatch_size=minibatch_size,
            shuffle_batch_per_epoch=shuffle_batch_per_epoch,
            **kwargs,
        )
        if training_data.data_iterators or num_total_minibatches or not minibatch_size:
            return super().minibatch_iterator(**arguments)
        batch = self.make_batch(training_data)
        for module_id in list(batch.policy_batches):
            if not self.should_module_be_updated(module_id, batch):  # type: ignore[attr-defined]
                del batch.policy_batches[module_id]
        if not batch.policy_batches:
            return iter(())
        rllibs = any(  # sequences, or infos (which RLlib's shuffle leaves in place)
            self.module[module_id].is_stateful()
            or SampleBatch.SEQ_LENS in module_batch
            or Columns.INFOS in module_batch
            for module_id, module_batch in batch.policy_batches.items()
        )
        if rllibs:
            training_data = TrainingData(batch=batch)
            return super().minibatch_iterator(**{**arguments, "training_data": training_data})
        return self._counted(
            marked_epoch_minibatches(
                batch, num_epochs, minibatch_size, shuffle_batch_per_epoch and num_epochs > 1
            )
        )

    @property
    def in_final_minibatch(self) -> bool:
        """Whether the minibatch being learned from is the update's last (True where RLlib's
        iterator cuts them: it does not say). A statistic logged with ``window=1`` is reported
        from the last minibatch only, so it need be computed there only."""
        return self.__dict__.get("_final_minibatch", True)

    def log_steps_trained(self, batch: MultiAgentBatch) -> None:
        counts = self.__dict__.get("_trained_counts")
        if counts is None:
            super().log_steps_trained(batch)
        else:
            counts.add(batch)

    def _counted(
        self, minibatches: Iterator[tuple[MultiAgentBatch, bool]]
    ) -> Iterator[MultiAgentBatch]:
        """``minibatches``, their trained-steps counters summed while RLlib's update loop logs
        them, and logged once it has asked for the next minibatch after the last."""
        counts = self.__dict__["_trained_counts"] = _TrainedCounts()
        try:
            for minibatch, final in minibatches:
                self.__dict__["_final_minibatch"] = final
                yield minibatch
        finally:
            self.__dict__.pop("_trained_counts", None)
            self.__dict__.pop("_final_minibatch", None)
        counts.log(self.metrics, self.weights_seq_no)  # type: ignore[attr-defined]


class _TrainedCounts:
    """The rows and env steps of one update's minibatches, logged under RLlib's keys as RLlib
    logs each minibatch's (sums, and the mean minibatch size)."""

    def __init__(self) -> None:
        self.minibatches: dict[ModuleID, int] = defaultdict(int)
        self.rows: dict[ModuleID, int] = defaultdict(int)
        self.env_steps = 0

    def add(self, batch: MultiAgentBatch) -> None:
        for module_id, module_batch in batch.policy_batches.items():
            self.minibatches[module_id] += 1
            self.rows[module_id] += len(module_batch)
        self.env_steps += batch.env_steps()

    def log(self, metrics: Any, weights_seq_no: int) -> None:
        for module_id, rows in self.rows.items():
            metrics.log_value((module_id, WEIGHTS_SEQ_NO), weights_seq_no, window=1)
            size = rows / self.minibatches[module_id]
            metrics.log_value((module_id, MODULE_TRAIN_BATCH_SIZE_MEAN), size, reduce="mean")
            metrics.log_value((module_id, NUM_MODULE_STEPS_TRAINED), rows, reduce="sum")
            for key, reduce in (
                ((module_id, NUM_MODULE_STEPS_TRAINED_LIFETIME), "lifetime_sum"),
                ((ALL_MODULES, NUM_MODULE_STEPS_TRAINED), "sum"),
                ((ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME), "lifetime_sum"),
            ):
                metrics.log_value(key, rows, reduce=reduce, with_throughput=True)
        for key, reduce in (
            ((ALL_MODULES, NUM_ENV_STEPS_TRAINED), "sum"),
            ((ALL_MODULES, NUM_ENV_STEPS_TRAINED_LIFETIME), "lifetime_sum"),
        ):
            metrics.log_value(key, self.env_steps, reduce=reduce, with_throughput=True)


def epoch_minibatches(
    batch: MultiAgentBatch, num_epochs: int, minibatch_size: int, shuffle: bool
) -> Iterator[MultiAgentBatch]:
    """RLlib's cyclic minibatches of ``batch`` (``MiniBatchCyclicIterator``): each module's rows
    in order, wrapping around the batch's end, and after each full pass the rows shuffled by one
    ``np.random.permutation`` (applied to every column at once)."""
    for minibatch, _ in marked_epoch_minibatches(batch, num_epochs, minibatch_size, shuffle):
        yield minibatch


def marked_epoch_minibatches(
    batch: MultiAgentBatch, num_epochs: int, minibatch_size: int, shuffle: bool
) -> Iterator[tuple[MultiAgentBatch, bool]]:
    """``epoch_minibatches``, each with whether it is the last."""
    columns = {module_id: dict(rows) for module_id, rows in batch.policy_batches.items()}
    starts = dict.fromkeys(columns, 0)
    epochs = dict.fromkeys(columns, 0)
    while min(epochs.values()) < num_epochs:
        minibatch = {}
        for module_id, data in columns.items():
            size = len(batch.policy_batches[module_id])
            start, wanted, pieces = starts[module_id], minibatch_size, []
            while start + wanted >= size:
                pieces.append(_rows(data, start, size))
                wanted -= size - start
                start = 0
                epochs[module_id] += 1
                if shuffle:
                    data = columns[module_id] = _shuffled(data, np.random.permutation(size))
            if wanted > 0:
                pieces.append(_rows(data, start, start + wanted))
            minibatch[module_id] = SampleBatch(_joined(pieces))
            starts[module_id] = start + wanted
        yield MultiAgentBatch(minibatch, len(batch)), min(epochs.values()) >= num_epochs


def _shuffled(data: dict[str, Any], permutation: np.ndarray) -> dict[str, Any]:
    return tree.map_structure(lambda column: column[permutation], data)


def _rows(data: dict[str, Any], start: int, end: int) -> dict[str, Any]:
    return tree.map_structure(lambda column: column[start:end], data)


def _joined(pieces: list[dict[str, Any]]) -> dict[str, Any]:
    if len(pieces) == 1:
        return pieces[0]
    return tree.map_structure(lambda *parts: _concatenated(parts), *pieces)


def _concatenated(parts: tuple[Any, ...]) -> Any:
    if isinstance(parts[0], torch.Tensor):
        return torch.cat(parts)
    return np.concatenate(parts)
