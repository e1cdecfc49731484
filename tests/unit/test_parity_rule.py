"""The parity certificate's comparison rule, without an export: what counts as agreeing."""

from __future__ import annotations

import numpy as np

from rlplat.export.parity import Agreement

WHERE = {"driver": "checkpoint", "seed": 0, "step": 0}


def test_different_discrete_actions_agree_only_where_the_checkpoint_scores_them_alike():
    agreement = Agreement(tolerance=1e-4)
    tie = np.array([99.999995, 100.0], np.float32)  # Q-values 5e-6 apart: rounding decides
    agreement.add(np.int64(1), np.int64(0), WHERE, scores=tie)
    assert (agreement.agreed, agreement.near_ties) == (1, 1)

    clear = np.array([99.0, 100.0], np.float32)  # a real preference: a real disagreement
    agreement.add(np.int64(1), np.int64(0), {**WHERE, "step": 1}, scores=clear)
    agreement.add(np.int64(1), np.int64(0), {**WHERE, "step": 2})  # no scores: no benefit
    assert (agreement.compared, agreement.agreed, agreement.near_ties) == (3, 1, 1)
    assert agreement.first_disagreement["step"] == 1
    assert agreement.fraction == 1 / 3
