"""A trial's readings so far, with the running figures the rules share (first and best return,
whether any episode was rewarded), kept so that each new result costs the rules O(1) work."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from rlplat.health.reading import Reading

LOOK_BACK = 4  # a rule asking for the last n values of a metric looks at most n x this rows back


class Trace:
    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self.readings: list[Reading] = []
        self.first_return: float | None = None
        self.best_return: float | None = None
        self.rewarded = False  # an episode with a non-zero return has ended
        self.episodes_seen = False
        self.max_abs_return = 0.0
        self.max_reward_per_step = 0.0  # the largest mean |reward| per step of an iteration
        self.min_truncated = 1.0
        self.start_entropy: float | None = None
        self._entropies: list[float] = []
        self._counts: dict[str, int] = {}
        self._learning_from: int | None = None  # index of the first reading after an update
        self.episodes_at_learning = 0.0  # episodes ended before the first update
        self.return_at_learning: float | None = None  # the windowed return then

    @property
    def last(self) -> Reading:
        return self.readings[-1]

    def add(self, reading: Reading) -> None:
        if self.readings and reading.env_steps < self.last.env_steps:
            self._clear()  # restored from an earlier checkpoint: its history starts again
        self.readings.append(reading)
        for name in ("entropy", "kl", "clip_fraction", "explained_variance", "actions_at_bounds",
                     "truncated_fraction", "obs_abs_mean"):  # fmt: skip
            if getattr(reading, name) is not None:
                self._counts[name] = self._counts.get(name, 0) + 1
        if reading.window_return is not None:
            if self.first_return is None:
                self.first_return = reading.window_return
            best = self.best_return
            self.best_return = (
                reading.window_return if best is None else max(best, reading.window_return)
            )
        for value in (reading.return_max, reading.return_min):
            if value is not None:
                self.episodes_seen = True
                self.rewarded |= value != 0
                self.max_abs_return = max(self.max_abs_return, abs(value))
        per_step = self.reward_per_step()
        if per_step is not None:
            self.max_reward_per_step = max(self.max_reward_per_step, per_step)
        if reading.truncated_fraction is not None:
            self.min_truncated = min(self.min_truncated, reading.truncated_fraction)
        if reading.entropy is not None and len(self._entropies) < 3:
            self._entropies.append(reading.entropy)
            self.start_entropy = statistics.fmean(self._entropies)
        if reading.trained and self._learning_from is None:
            self._learning_from = len(self.readings)
            self.episodes_at_learning = reading.episodes_lifetime or 0.0
            self.return_at_learning = reading.window_return

    def count(self, name: str) -> int:
        return self._counts.get(name, 0)

    def recent(self, name: str, n: int) -> list[float]:
        """The last ``n`` values of a reading's field (fewer where the rows lack it)."""
        values: list[float] = []
        for reading in reversed(self.readings[-n * LOOK_BACK :]):
            value = getattr(reading, name)
            if value is not None:
                values.append(value)
                if len(values) == n:
                    break
        return values[::-1]

    def improved(self) -> bool:
        """The windowed return rose above its first value (by 10% of it, or at all from 0)."""
        return self._rose_from(self.first_return)

    def episodes_since_learning(self) -> float:
        if self._learning_from is None:
            return 0.0
        return (self.last.episodes_lifetime or 0.0) - self.episodes_at_learning

    def improved_since_learning(self) -> bool:
        """The windowed return rose above where it stood at the first update (a replay warm-up's
        random episodes are no sign of a stuck learner)."""
        if self.return_at_learning is None:
            return self.improved()
        return self._rose_from(self.return_at_learning)

    def _rose_from(self, start: float | None) -> bool:
        """The best windowed return so far is above ``start`` by 10% of it (at all from 0)."""
        if start is None or self.best_return is None:
            return False
        return self.best_return > start + 0.1 * abs(start)

    def steps_since(self, condition: Callable[[Reading], bool]) -> float:
        """The env steps of the first reading that met ``condition``."""
        return next((r.env_steps for r in self.readings if condition(r)), self.last.env_steps)

    def steps_since_all(self, condition: Callable[[Reading], bool]) -> float:
        """The env steps from which every reading met ``condition``."""
        since = self.last.env_steps
        for reading in reversed(self.readings):
            if not condition(reading):
                break
            since = reading.env_steps
        return since

    def reward_per_step(self) -> float | None:
        """Mean |reward| per step over the latest episodes (their return over their length)."""
        last = self.last
        if last.window_return is None or not last.episode_len:
            return None
        return abs(last.window_return) / last.episode_len

    def throughput(self) -> tuple[float | None, float | None, float]:
        """Env steps/s: the median of the first 5 iterations after learning started (the first
        of them skipped), the median of the last 5, and the env steps where the fall began."""
        if self._learning_from is None:
            return None, None, 0.0
        begin = self._learning_from + 1
        if len(self.readings) < begin + 15:
            return None, None, 0.0
        start = self._speeds(begin, begin + 5)
        now = self._speeds(len(self.readings) - 5, len(self.readings))
        if not start or not now:
            return None, None, 0.0
        return statistics.median(start), statistics.median(now), self.readings[-5].env_steps

    def _speeds(self, begin: int, end: int) -> list[float]:
        speeds = []
        pairs = zip(self.readings[begin - 1 : end - 1], self.readings[begin:end], strict=True)
        for before, after in pairs:
            seconds = after.time_s - before.time_s
            if seconds > 0 and after.env_steps > before.env_steps:
                speeds.append((after.env_steps - before.env_steps) / seconds)
        return speeds
