"""RLlib callbacks rlplat adds to every algorithm.

RLlib's new stack reports ``env_runners/episode_return_mean`` over the episodes that finished in
the current iteration only (often one to five for CartPole), so a stop condition on it fires on a
lucky iteration. ``WindowedEpisodeStats`` adds ``window/episode_return_mean`` and
``window/episode_len_mean``: the mean over the last ``metrics_num_episodes_for_smoothing`` finished
episodes (RLlib's own smoothing setting, default 100), which is what ``stop.episode_return_mean``
and checkpoint ranking use. Offline runs (BC, MARWIL, CQL, IQL) play episodes only in evaluation:
their window is over the evaluation episodes. ``window/episodes_before_learning`` counts the
window's episodes that were played before the first gradient update (a replay warm-up's random
actions, or PPO's first, untrained batch): a window score with any of them is no trained policy's.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rlplat.environments.team import AGENT_REWARDS
from rlplat.metrics import finite, lookup

WINDOW_KEY = "window"
BEFORE_LEARNING = "episodes_before_learning"
TRAINED_LIFETIME = "learners/__all_modules__/num_env_steps_trained_lifetime"
WINDOWED = ("episode_return_mean", "episode_len_mean")
# Multi-agent runs: RLlib's per-policy and per-agent means -> rlplat's windowed names.
RLLIB_AGENT_RETURNS = "agent_episode_returns_mean"
PER_GROUP = {
    "module_episode_returns_mean": "policy_return_mean",
    RLLIB_AGENT_RETURNS: "agent_return_mean",
}


def iteration_means(runners: dict[str, Any]) -> dict[str, float]:
    """The means of one iteration's finished episodes, flat: ``policy_return_mean/<id>``..."""
    means = {key: finite(runners.get(key)) for key in WINDOWED}
    for rllib_key, name in PER_GROUP.items():
        for member, value in (runners.get(rllib_key) or {}).items():
            means[f"{name}/{member}"] = finite(value)
    return {key: value for key, value in means.items() if value is not None}


class WindowedEpisodeStats(RLlibCallback):
    """Keeps (count, means) of recent iterations and reports the mean over the last N episodes.

    Multi-agent runs also get ``window/policy_return_mean/<policy>`` and
    ``window/agent_return_mean/<agent>``; ``window/episode_return_mean`` is then the team's
    return (the sum over agents, as RLlib counts it).
    """

    def __init__(self) -> None:
        super().__init__()
        # (episodes, their means, whether they were played before the first update)
        self._recent: deque[tuple[int, dict[str, float], bool]] = deque()
        self._learning_started = False

    # The window is saved in checkpoints (see rlplat.run.trainable): a restored trial (PBT's
    # exploit, --resume) reports the same windowed return it had, not one over its first few
    # episodes.
    def get_state(self) -> dict[str, Any]:
        return {"recent": list(self._recent), "learning_started": self._learning_started}

    def set_state(self, state: dict[str, Any] | list) -> None:
        if isinstance(state, list):  # checkpoints written before the window kept more
            state = {"recent": [(*entry, False) for entry in state], "learning_started": True}
        self._recent = deque(
            (int(count), dict(means), bool(before)) for count, means, before in state["recent"]
        )
        self._learning_started = bool(state["learning_started"])

    def on_episode_end(
        self, *, episode: Any, env_runner: Any = None, metrics_logger: Any = None, **kwargs: Any
    ) -> None:
        """Team envs (QMIX) report each member's reward in its infos: log each member's return
        under RLlib's multi-agent key, so they are windowed and shown like any agent's."""
        if not isinstance(episode, SingleAgentEpisode) or metrics_logger is None:
            return
        returns: dict[str, float] = {}
        for info in episode.get_infos():
            for agent, reward in (info.get(AGENT_REWARDS) or {}).items():
                returns[agent] = returns.get(agent, 0.0) + reward
        if not returns:
            return
        config = env_runner.config
        # RLlib's own window for episode metrics, shared among the env runners.
        runners = config.num_env_runners or 1
        window = max(1, math.ceil(config.metrics_num_episodes_for_smoothing / runners))
        metrics_logger.log_dict({RLLIB_AGENT_RETURNS: returns}, window=window)

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        window = int(algorithm.config.metrics_num_episodes_for_smoothing)
        runners = result.get("env_runners") or {}
        if algorithm.config.is_offline:
            # Offline algorithms sample nothing to train on: their episodes are the evaluation's.
            runners = (result.get("evaluation") or {}).get("env_runners") or {}
        count = int(finite(runners.get("num_episodes")) or 0)
        means = iteration_means(runners)
        # This iteration's episodes were played by trained weights if an update came before it.
        before_learning = not (self._learning_started or algorithm.config.is_offline)
        if count > 0 and all(key in means for key in WINDOWED):
            self._recent.append((count, means, before_learning))
        self._learning_started |= bool(finite(lookup(result, TRAINED_LIFETIME)))
        # Drop whole iterations while the rest still fill the window.
        while self._recent and sum(c for c, *_ in self._recent) - self._recent[0][0] >= window:
            self._recent.popleft()
        total = sum(c for c, *_ in self._recent)
        if total == 0:
            return
        # The oldest iteration may overfill the window: count only the episodes that fit.
        excess = max(total - window, 0)
        weighted = [
            (c - (excess if i == 0 else 0), m, before)
            for i, (c, m, before) in enumerate(self._recent)
        ]
        stats: dict[str, Any] = {
            "num_episodes": sum(w for w, *_ in weighted),
            BEFORE_LEARNING: sum(w for w, _, before in weighted if before),
        }
        for key in dict.fromkeys(k for _, m, _ in weighted for k in m):
            pairs = [(w, m[key]) for w, m, _ in weighted if key in m]
            value = sum(w * v for w, v in pairs) / sum(w for w, _ in pairs)
            group, _, member = key.partition("/")
            if member:
                stats.setdefault(group, {})[member] = value
            else:
                stats[key] = value
        result[WINDOW_KEY] = stats


def episode_window(algorithm: Any) -> WindowedEpisodeStats | None:
    """The algorithm's ``WindowedEpisodeStats`` instance (RLlib keeps one or a list)."""
    callbacks = algorithm.callbacks
    for callback in callbacks if isinstance(callbacks, list) else [callbacks]:
        if isinstance(callback, WindowedEpisodeStats):
            return callback
    return None
