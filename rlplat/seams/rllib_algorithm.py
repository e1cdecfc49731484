"""RLlib algorithms', algorithm configs' and replay buffers' private parts that rlplat's
training loops use.

rlplat's transition replay (DQN, SAC, TD3, CrossQ) draws n-step transitions straight from
RLlib's ``EpisodeReplayBuffer`` and gathers an iteration's metrics once; its trainable builds
its own replay buffer. RLlib keeps the buffer's index of stored steps, its sampler and its
metrics, the algorithm's iteration step and its replay buffer's construction in private names,
with no public hook.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer

__all__ = [
    "AlgorithmHooks",
    "EpisodeReplayHooks",
    "compiled_after",
]


class AlgorithmHooks:
    """Algorithm mixin (before an RLlib ``Algorithm``): its private steps under public names,
    each RLlib's own until a subclass overrides it. RLlib runs one training iteration in
    ``_run_one_training_iteration`` and builds the algorithm's replay buffer in
    ``_create_local_replay_buffer_if_necessary``; neither has a public hook."""

    def _run_one_training_iteration(self) -> Any:
        return self.run_training_iteration()

    def run_training_iteration(self) -> Any:
        """One training iteration (RLlib's ``_run_one_training_iteration``)."""
        return super()._run_one_training_iteration()  # type: ignore[misc]

    def _create_local_replay_buffer_if_necessary(self, config: Any) -> Any:
        return self.create_replay_buffer(config)

    def create_replay_buffer(self, config: Any) -> Any:
        """The algorithm's replay buffer, or None (RLlib's
        ``_create_local_replay_buffer_if_necessary``)."""
        return super()._create_local_replay_buffer_if_necessary(config)  # type: ignore[misc]


@contextmanager
def compiled_after(metrics: Any, before: Callable[[], None]) -> Iterator[None]:
    """In the block, ``before()`` runs each time just before ``metrics.compile()`` (RLlib's
    ``MetricsLogger``, which compiles an iteration's results once at its end): the one moment
    to add metrics gathered over the whole iteration, for which RLlib has no hook. The logger's
    own method is back after the block."""
    compile_metrics = metrics.compile

    def gathered_then_compiled() -> Any:
        before()
        return compile_metrics()

    metrics.compile = gathered_then_compiled
    try:
        yield
    finally:
        del metrics.compile


class EpisodeReplayHooks(EpisodeReplayBuffer):
    """RLlib's episode replay buffer with its sampler (``_sample_episodes``) as
    ``draw_episodes``, RLlib's until a subclass overrides it, and the private state a sampler
    reads and writes under public names: the index of stored (episode, step) pairs
    (``_indices``), the indices of the last sample (``_last_sampled_indices``) and its sample
    metrics (``_update_sample_metrics``)."""

    def _sample_episodes(self, num_items: int | None = None, **kwargs: Any) -> Any:
        return self.draw_episodes(num_items, **kwargs)

    def draw_episodes(self, num_items: int | None = None, **kwargs: Any) -> Any:
        """The episode pieces of one ``sample`` call (RLlib's ``_sample_episodes``)."""
        return super()._sample_episodes(num_items, **kwargs)

    @property
    def step_index(self) -> list[tuple[int, int]]:
        """(episode index counted with the evicted ones, step) of every stored step."""
        return self._indices

    def forget_last_sampled(self) -> None:
        """Start a new sample's record of sampled indices."""
        self._last_sampled_indices = []

    def update_sample_metrics(self, **metrics: Any) -> None:
        """Log one sample's metrics as RLlib's sampler does."""
        self._update_sample_metrics(**metrics)
