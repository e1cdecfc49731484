"""Each seed's own observation filter in a stack (the experiment's ``mean_std_filter``).

A run of one seed normalises its observations by RLlib's ``MeanStdFilter``: the running mean
and variance of every observation it sampled (Welford's sums), then (obs - mean) / (std + 1e-6)
clipped to [-clip, clip]. ``SeedFilters`` keeps those statistics for every seed of a stack apart
(arrays with a leading seed axis, a vector step's observations merged at once by Chan's formula),
so no seed's observations move another seed's filter, and gives one seed's statistics as the
state of RLlib's piece: a seed's checkpoint normalises as that seed did in training.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from ray.rllib.connectors.env_to_module.mean_std_filter import MeanStdFilter
from ray.rllib.utils.filter import RunningStat
from ray.rllib.utils.numpy import SMALL_NUMBER


def filter_pieces(pipeline: Any) -> Iterator[MeanStdFilter]:
    """The ``MeanStdFilter`` pieces of a connector pipeline (nested pipelines included)."""
    for piece in getattr(pipeline, "connectors", []):
        if isinstance(piece, MeanStdFilter):
            yield piece
        else:
            yield from filter_pieces(piece)


class SeedFilters:
    """Running mean and variance of each seed's flat observations, and observations normalised
    by their seed's statistics as RLlib's ``MeanStdFilter`` ``piece`` (its settings
    ``de_mean_to_zero``, ``de_std_to_one``, ``clip_by_value``) normalises them."""

    def __init__(self, seeds: int, size: int, piece: MeanStdFilter):
        self.count = np.zeros(seeds)
        self.mean = np.zeros((seeds, size))
        self.sum_sq = np.zeros((seeds, size))  # sums of squared differences from the mean
        self.demean = bool(piece.de_mean_to_zero)
        self.destd = bool(piece.de_std_to_one)
        self.clip = piece.clip_by_value

    def __call__(self, obs: np.ndarray, new: np.ndarray | None = None) -> np.ndarray:
        """``obs`` (seeds x k rows, seed-major) normalised, after pushing them into their seeds'
        statistics (only the rows where ``new`` is true, when given)."""
        seeds = len(self.count)
        rows = obs.reshape(seeds, -1, obs.shape[-1]).astype(np.float64)
        self._push(rows, None if new is None else new.reshape(seeds, -1))
        return self.normalise(obs)

    def normalise(self, obs: np.ndarray) -> np.ndarray:
        """``obs`` (seeds x k rows, seed-major) normalised by their seeds' statistics as they
        stand (greedy evaluation's: its observations are not pushed)."""
        rows = obs.reshape(len(self.count), -1, obs.shape[-1]).astype(np.float64)
        if self.demean:
            rows = rows - self.mean[:, None]
        if self.destd:
            rows = rows / (self.std()[:, None] + SMALL_NUMBER)
        if self.clip:
            rows = np.clip(rows, -self.clip, self.clip)
        return rows.reshape(obs.shape).astype(obs.dtype)

    def _push(self, rows: np.ndarray, new: np.ndarray | None) -> None:
        weights = np.ones(rows.shape[:2]) if new is None else new.astype(np.float64)
        added = weights.sum(1)
        batch_mean = (weights[..., None] * rows).sum(1) / np.maximum(added, 1)[:, None]
        batch_sum_sq = (weights[..., None] * (rows - batch_mean[:, None]) ** 2).sum(1)
        total = self.count + added
        delta = batch_mean - self.mean
        share = np.where(total > 0, added / np.maximum(total, 1), 0.0)[:, None]
        self.mean += delta * share
        self.sum_sq += batch_sum_sq + delta**2 * (self.count * share[:, 0])[:, None]
        self.count = total

    def std(self) -> np.ndarray:
        """Each seed's std (RLlib's ``RunningStat.std``: unbiased, 0 until two pushes)."""
        var = self.sum_sq / np.maximum(self.count - 1, 1)[:, None]
        var = np.where((self.count > 1)[:, None], var, 0.0).astype(np.float32)
        return np.sqrt(np.maximum(0, var))

    def seed_state(self, index: int, piece: MeanStdFilter) -> dict[str, Any]:
        """``piece``'s state (RLlib's ``MeanStdFilter``) holding seed ``index``'s statistics."""
        state = piece.get_state()
        stat = RunningStat(self.mean[index].shape)
        stat.num_pushes = int(self.count[index])
        stat.mean_array = self.mean[index].copy()
        stat.sum_sq_diff_array = self.sum_sq[index].copy()
        for agent_state in state.values():
            agent_state["running_stats"] = [stat.to_state()]
        return state

    def get_state(self) -> dict[str, np.ndarray]:
        return {"count": self.count.copy(), "mean": self.mean.copy(), "sum_sq": self.sum_sq.copy()}

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        self.count, self.mean, self.sum_sq = (np.array(state[key]) for key in self.get_state())
