"""The learners' minibatches are RLlib's: the same rows in the same order, the same shuffles."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.minibatch_utils import MiniBatchCyclicIterator

from rlplat.engine.minibatches import epoch_minibatches, marked_epoch_minibatches


def train_batch(rows: dict[str, int]) -> MultiAgentBatch:
    """Per module, ``rows`` rows whose every column holds the row's number."""
    return MultiAgentBatch(
        {
            module: SampleBatch(
                {
                    "obs": torch.arange(count * 3, dtype=torch.float32).reshape(count, 3),
                    "advantages": torch.arange(count, dtype=torch.float32),
                    "nested": {"a": torch.arange(count)},
                }
            )
            for module, count in rows.items()
        },
        env_steps=max(rows.values()),
    )


@pytest.mark.parametrize(
    ("rows", "minibatch_size", "epochs", "shuffle"),
    [
        ({"p": 12}, 4, 3, True),  # epochs end at a minibatch's end
        ({"p": 10}, 4, 3, True),  # minibatches that span two epochs
        ({"a": 7, "b": 10}, 3, 2, True),  # modules of different sizes
        ({"p": 10}, 4, 2, False),
        ({"p": 3}, 8, 2, True),  # one minibatch covers the batch more than twice
    ],
)
def test_epoch_minibatches_are_rllibs_cyclic_minibatches(rows, minibatch_size, epochs, shuffle):
    np.random.seed(7)
    theirs = list(
        MiniBatchCyclicIterator(
            train_batch(rows),
            num_epochs=epochs,
            minibatch_size=minibatch_size,
            shuffle_batch_per_epoch=shuffle,
        )
    )
    np.random.seed(7)
    ours = list(epoch_minibatches(train_batch(rows), epochs, minibatch_size, shuffle))
    assert len(ours) == len(theirs) > 0
    # Only the last is marked last (a statistic logged with window=1 is computed there only).
    marks = [
        last
        for _, last in marked_epoch_minibatches(train_batch(rows), epochs, minibatch_size, shuffle)
    ]
    assert marks == [False] * (len(theirs) - 1) + [True]
    for mine, their in zip(ours, theirs, strict=True):
        assert mine.env_steps() == their.env_steps()
        assert set(mine.policy_batches) == set(their.policy_batches)
        for module in their.policy_batches:
            a, b = mine.policy_batches[module], their.policy_batches[module]
            assert len(a) == len(b) == minibatch_size
            for key in ("obs", "advantages"):
                assert torch.equal(a[key], b[key])
            assert torch.equal(a["nested"]["a"], b["nested"]["a"])


def test_the_seam_rllib_names_the_minibatches_rely_on_are_there():
    """``EpochMinibatches`` overrides two of ``Learner.update``'s private steps: the iterator,
    and the trained-steps counters that ``update`` logs for each minibatch it draws from it
    (Ray 2.60)."""
    import inspect

    from ray.rllib.core.learner.learner import Learner

    update = inspect.getsource(Learner.update)
    assert "self._create_iterator_if_necessary(" in update
    loop = update.index("in enumerate(batch_iter)")
    assert loop < update.index("self._log_steps_trained_metrics(tensor_minibatch)")
    assert callable(Learner._make_batch_if_necessary)
