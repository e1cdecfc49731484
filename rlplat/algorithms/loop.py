"""Pieces of the training loops rlplat owns (QMIX, MADDPG, PQN and the transition loop of DQN,
SAC, TD3 and CrossQ)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)

from rlplat.algorithms.shared_weights import sync_env_runners
from rlplat.seams.rllib_learner import update_keeping_metrics


def sample_round(algo: Any) -> list[Any]:
    """One synchronous sampling call on every env runner; their metrics go into the
    algorithm's. Returns the episode chunks."""
    return _sample(algo, with_metrics=True)


def sample_without_metrics(algo: Any) -> list[Any]:
    """One sampling call on every env runner, like ``sample_round``, but the runners keep their
    metrics until ``gather_runner_metrics``: a runner's reduce and the algorithm's aggregation of
    it cost about 1 ms a call (a quarter of a CartPole DQN call of 16 env steps). The env steps
    sampled are logged at once, since the iteration's stop condition reads them."""
    return _sample(algo, with_metrics=False)


def gather_runner_metrics(algo: Any) -> None:
    """The env runners' metrics since the last gathering, into the algorithm's (their sampled
    env steps were logged by ``sample_without_metrics`` already)."""
    _aggregate(algo, _on_runners(algo, lambda runner: runner.get_metrics()))


def _sample(algo: Any, with_metrics: bool) -> list[Any]:
    """Every env runner's episode chunks of one ``sample`` call (and its metrics, in the same
    call); the env steps sampled logged into the algorithm's metrics."""

    def call(runner: Any) -> tuple[list[Any], Any]:
        return runner.sample(), runner.get_metrics() if with_metrics else None

    results = _on_runners(algo, call)
    episodes = [episode for chunk, _ in results for episode in chunk]
    algo.metrics.log_value(
        (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME),
        sum(episode.env_steps() for episode in episodes),
        reduce="lifetime_sum",
        with_throughput=True,
    )
    if with_metrics:
        _aggregate(algo, [metrics for _, metrics in results])
    return episodes


def _on_runners(algo: Any, function: Any) -> list[Any]:
    """``function`` of the one local env runner, or of every remote one (those that answer)."""
    group = algo.env_runner_group
    if group.num_remote_workers() <= 0:
        return [function(group.local_env_runner)]
    return group.foreach_env_runner(
        function, local_env_runner=False, timeout_seconds=algo.config.sample_timeout_s
    )


def _aggregate(algo: Any, metrics: list[Any]) -> None:
    """Env runners' reduced metrics into the algorithm's, less the env steps sampled (logged at
    each sampling call)."""
    for each in metrics:
        each.pop(NUM_ENV_STEPS_SAMPLED_LIFETIME, None)
    algo.metrics.aggregate(metrics, key=ENV_RUNNER_RESULTS)


def env_steps_sampled(algo: Any) -> int:
    """Env steps the algorithm has sampled in its lifetime."""
    return int(algo.metrics.peek((ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0))


class OwedUpdates:
    """Learner updates owed at a fractional rate (e.g. one per 4 env steps): ``add`` takes what
    new data earned and returns the whole updates now due, carrying the fraction."""

    def __init__(self) -> None:
        self.owed = 0.0

    def add(self, amount: float) -> int:
        due, self.owed = divmod(self.owed + amount, 1.0)
        return int(due)


def update_and_sync(algo: Any, batches: Iterable[Any]) -> None:
    """One learner update per batch (``MultiAgentBatch``, made lazily); then, if any update was
    made, the learners' metrics go into the algorithm's and the env runners get the new weights.

    Learners reduce their metrics once after all the updates, as RLlib does over the minibatches
    of one call, not after each: a reduce costs about as much as a small network's update."""
    env_steps = env_steps_sampled(algo)
    group = algo.learner_group
    updated = False
    for batch in batches:
        update_keeping_metrics(
            group, batch=batch, timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: env_steps}
        )
        updated = True
    if not updated:
        return
    reduced = group.foreach_learner(lambda learner: learner.metrics.reduce())
    algo.metrics.aggregate([result.get() for result in reduced], key=LEARNER_RESULTS)
    sync_env_runners(algo)
