"""Pieces of the training loops of rlplat's own algorithms (QMIX, MADDPG)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
)

from rlplat.algorithms.shared_weights import sync_env_runners


def sample_round(algo: Any) -> list[Any]:
    """One synchronous sampling call on every env runner; their metrics go into the
    algorithm's. Returns the episode chunks."""
    episodes, runner_metrics = synchronous_parallel_sample(
        worker_set=algo.env_runner_group,
        concat=True,
        sample_timeout_s=algo.config.sample_timeout_s,
        _uses_new_env_runners=True,
        _return_metrics=True,
    )
    algo.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
    return episodes


def sample_without_metrics(algo: Any) -> list[Any]:
    """One sampling call on every env runner, like ``sample_round``, but the runners keep their
    metrics until ``gather_runner_metrics``: a runner's reduce and the algorithm's aggregation of
    it cost about 1 ms a call (a quarter of a CartPole DQN call of 16 env steps). The env steps
    sampled are logged at once, since the iteration's stop condition reads them."""
    group = algo.env_runner_group
    if group.num_remote_workers() <= 0:
        chunks = [group.local_env_runner.sample()]
    else:
        chunks = group.foreach_env_runner(
            lambda runner: runner.sample(),
            local_env_runner=False,
            timeout_seconds=algo.config.sample_timeout_s,
        )
    episodes = [episode for chunk in chunks for episode in chunk]
    algo.metrics.log_value(
        (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME),
        sum(episode.env_steps() for episode in episodes),
        reduce="lifetime_sum",
        with_throughput=True,
    )
    return episodes


def gather_runner_metrics(algo: Any) -> None:
    """The env runners' metrics since the last gathering, into the algorithm's (their sampled
    env steps were logged by ``sample_without_metrics`` already)."""
    group = algo.env_runner_group
    if group.num_remote_workers() <= 0:
        metrics = [group.local_env_runner.get_metrics()]
    else:
        metrics = group.foreach_env_runner(
            lambda runner: runner.get_metrics(),
            local_env_runner=False,
            timeout_seconds=algo.config.sample_timeout_s,
        )
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
        group.update(
            batch=batch,
            timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: env_steps},
            _no_metrics_reduce=True,
        )
        updated = True
    if not updated:
        return
    reduced = group.foreach_learner(lambda learner: learner.metrics.reduce())
    algo.metrics.aggregate([result.get() for result in reduced], key=LEARNER_RESULTS)
    sync_env_runners(algo)
