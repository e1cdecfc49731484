"""RLlib callbacks rlplat adds to every algorithm.

RLlib's new stack reports ``env_runners/episode_return_mean`` over the episodes that finished in
the current iteration only (often one to five for CartPole), so a stop condition on it fires on a
lucky iteration. ``WindowedEpisodeStats`` adds ``window/episode_return_mean`` and
``window/episode_len_mean``: the mean over the last ``metrics_num_episodes_for_smoothing`` finished
episodes (RLlib's own smoothing setting, default 100), which is what ``stop.episode_return_mean``
and checkpoint ranking use.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from ray.rllib.callbacks.callbacks import RLlibCallback

from rlplat.metrics import finite

WINDOW_KEY = "window"
WINDOWED = ("episode_return_mean", "episode_len_mean")


class WindowedEpisodeStats(RLlibCallback):
    """Keeps (count, means) of recent iterations and reports the mean over the last N episodes."""

    def __init__(self) -> None:
        super().__init__()
        self._recent: deque[tuple[int, dict[str, float]]] = deque()

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        window = int(algorithm.config.metrics_num_episodes_for_smoothing)
        runners = result.get("env_runners") or {}
        count = int(finite(runners.get("num_episodes")) or 0)
        means = {k: finite(runners.get(k)) for k in WINDOWED}
        if count > 0 and all(v is not None for v in means.values()):
            self._recent.append((count, means))
        # Drop whole iterations while the rest still fill the window.
        while self._recent and sum(c for c, _ in self._recent) - self._recent[0][0] >= window:
            self._recent.popleft()
        total = sum(c for c, _ in self._recent)
        if total == 0:
            return
        # The oldest iteration may overfill the window: count only the episodes that fit.
        excess = max(total - window, 0)
        weights = [c - (excess if i == 0 else 0) for i, (c, _) in enumerate(self._recent)]
        used = sum(weights)
        stats: dict[str, float] = {
            key: sum(w * m[key] for w, (_, m) in zip(weights, self._recent, strict=True)) / used
            for key in WINDOWED
        }
        stats["num_episodes"] = used
        result[WINDOW_KEY] = stats
