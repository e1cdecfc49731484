"""Aggregate scores over seeds with interval estimates (Agarwal et al. 2021), on scipy and numpy.

Every function takes the per-seed scores of one experiment (one task: each experiment is an
algorithm configuration on one environment). The stratified bootstrap resamples seeds within
each task; with one task per experiment that is resampling the experiment's seeds, and with two
experiments (probability of improvement) each one's seeds separately. Intervals are percentile
intervals of ``scipy.stats.bootstrap``; each starts from ``numpy.random.default_rng(seed)``, so a
report's numbers can be recomputed exactly from its per-seed scores.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import stats

from rlplat.report.model import Estimate

CONFIDENCE = 0.95
RESAMPLES = 10_000
METHOD = "percentile"


def iqm(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Interquartile mean: the mean of the middle 50% (scipy's trim_mean, 25% cut each side;
    with fewer than four scores nothing is cut and it is the mean)."""
    return stats.trim_mean(scores, 0.25, axis=axis)


def mean(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(scores, axis=axis)


def median(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.median(scores, axis=axis)


def optimality_gap(target: float) -> Callable[..., np.ndarray]:
    """How far the scores fall short of ``target`` on average (scores above it count as 0)."""

    def gap(scores: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(np.maximum(target - scores, 0.0), axis=axis)

    return gap


def aggregate_functions(target: float | None) -> dict[str, Callable[..., np.ndarray]]:
    """The report's aggregates by name; the optimality gap only with a target score."""
    functions = {"iqm": iqm, "mean": mean, "median": median}
    if target is not None:
        functions["optimality_gap"] = optimality_gap(target)
    return functions


def _interval(samples: tuple[np.ndarray, ...], statistic: Callable, seed: int) -> tuple | None:
    if min(len(sample) for sample in samples) < 2:
        return None
    result = stats.bootstrap(
        samples,
        statistic,
        n_resamples=RESAMPLES,
        confidence_level=CONFIDENCE,
        method=METHOD,
        vectorized=True,
        random_state=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return float(low), float(high)


def bootstrap_estimate(scores: list[float], statistic: Callable, seed: int) -> Estimate:
    """``statistic`` of the scores with its stratified bootstrap interval."""
    sample = np.asarray(scores, dtype=float)
    return Estimate(float(statistic(sample)), _interval((sample,), statistic, seed))


def probability_of_improvement(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    """P(X > Y) for a seed of X and a seed of Y drawn at random, ties counting one half (the
    Mann-Whitney U statistic over n*m), for bootstrap samples along ``axis``."""
    x = np.moveaxis(np.asarray(x, dtype=float), axis, -1)[..., :, None]
    y = np.moveaxis(np.asarray(y, dtype=float), axis, -1)[..., None, :]
    return np.mean((x > y) + 0.5 * (x == y), axis=(-2, -1))


def improvement(x: list[float], y: list[float], seed: int) -> Estimate:
    """Probability that X improves on Y, with the interval of a bootstrap resampling each
    experiment's seeds on its own."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    interval = _interval((a, b), probability_of_improvement, seed)
    return Estimate(float(probability_of_improvement(a, b)), interval)


def curve_band(
    values: np.ndarray, statistic: Callable, seed: int
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Per grid point (columns of ``values``, one row per seed): the statistic across seeds and
    its bootstrap interval (None with fewer than two seeds)."""
    centre = statistic(values, axis=0)
    if values.shape[0] < 2:
        return centre, None, None
    result = stats.bootstrap(
        (values,),
        statistic,
        n_resamples=RESAMPLES // 5,
        confidence_level=CONFIDENCE,
        method=METHOD,
        vectorized=True,
        axis=0,
        random_state=np.random.default_rng(seed),
    )
    return centre, result.confidence_interval.low, result.confidence_interval.high
