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

Goal envs that say in an episode's last info whether it succeeded (``is_success``, as
Gymnasium-Robotics' do) also get ``env_runners/success_rate`` and ``window/success_rate``: the share
of the iteration's, and of the window's, finished episodes that did.

Envs that report a game's end in the step's info (``game_score``, ``game_length``: the Atari
preset's ``GameScore``, where an episode is one life) also get ``window/game_score_mean`` and
``window/game_length_mean`` over the last N finished games, and ``window/num_games``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rlplat.environments.atari import GAME_LENGTH, GAME_SCORE
from rlplat.environments.team import AGENT_REWARDS
from rlplat.health.reading import (
    ACTION_COMPONENTS,
    ACTIONS_AT_BOUNDS,
    EPISODES_ENDED,
    EPISODES_TRUNCATED,
    HEALTH_KEY,
    OBS_ABS_SUM,
)
from rlplat.metrics import finite, lookup
from rlplat.rllib.self_play import count_game

WINDOW_KEY = "window"
BEFORE_LEARNING = "episodes_before_learning"
TRAINED_LIFETIME = "learners/__all_modules__/num_env_steps_trained_lifetime"
WINDOWED = ("episode_return_mean", "episode_len_mean")
SUCCESS_RATE = "success_rate"  # goal envs: is_success in an episode's last info
# Multi-agent runs: RLlib's per-policy and per-agent means -> rlplat's windowed names.
RLLIB_AGENT_RETURNS = "agent_episode_returns_mean"
NUM_GAMES = "num_games"
GAME_MEANS = {GAME_SCORE: "game_score_mean", GAME_LENGTH: "game_length_mean"}
PER_GROUP = {
    "module_episode_returns_mean": "policy_return_mean",
    RLLIB_AGENT_RETURNS: "agent_return_mean",
}


def _runner_window(config: Any) -> int:
    """RLlib's window for episode metrics, shared among the env runners."""
    runners = config.num_env_runners or 1
    return max(1, math.ceil(config.metrics_num_episodes_for_smoothing / runners))


def _window_means(
    recent: deque[tuple[int, dict[str, float], bool]], window: int
) -> tuple[int, int, dict[str, float]]:
    """Drop whole iterations from ``recent`` while the rest still fill the window; the entries'
    count (up to the window), how many of those were before learning, and their means."""
    while recent and sum(c for c, *_ in recent) - recent[0][0] >= window:
        recent.popleft()
    total = sum(c for c, *_ in recent)
    # The oldest iteration may overfill the window: count only the entries that fit.
    excess = max(total - window, 0)
    weighted = [
        (c - (excess if i == 0 else 0), m, before) for i, (c, m, before) in enumerate(recent)
    ]
    means = {}
    for key in dict.fromkeys(k for _, m, _ in weighted for k in m):
        pairs = [(w, m[key]) for w, m, _ in weighted if key in m]
        means[key] = sum(w * v for w, v in pairs) / sum(w for w, _ in pairs)
    return sum(w for w, *_ in weighted), sum(w for w, _, before in weighted if before), means


def _entries(saved: list) -> deque[tuple[int, dict[str, float], bool]]:
    return deque((int(count), dict(means), bool(before)) for count, means, before in saved)


def iteration_means(runners: dict[str, Any]) -> dict[str, float]:
    """The means of one iteration's finished episodes, flat: ``policy_return_mean/<id>``..."""
    means = {key: finite(runners.get(key)) for key in (*WINDOWED, SUCCESS_RATE)}
    for rllib_key, name in PER_GROUP.items():
        for member, value in (runners.get(rllib_key) or {}).items():
            means[f"{name}/{member}"] = finite(value)
    return {key: value for key, value in means.items() if value is not None}


AT_BOUND = 0.99  # of the way from the middle to a bound: an action component at its bound


def log_episode_health(episode: SingleAgentEpisode, env_runner: Any, metrics_logger: Any) -> None:
    """The per-episode numbers the training-health diagnoses read (rlplat.health): whether it
    ended at the time limit, its mean |observation| (flat float observations), and how many of
    its Box action components sat at a bound. Sums: the iteration's result divides them."""
    log = metrics_logger.log_value
    log((HEALTH_KEY, EPISODES_ENDED), 1, reduce="sum")
    log((HEALTH_KEY, EPISODES_TRUNCATED), int(episode.is_truncated), reduce="sum")
    observations = flat_observations(episode)
    if observations is not None:
        log((HEALTH_KEY, OBS_ABS_SUM), float(np.abs(observations).mean()), reduce="sum")
    space = episode.action_space or getattr(env_runner.env, "single_action_space", None)
    if isinstance(space, gym.spaces.Box) and len(episode):
        actions = np.asarray(episode.get_actions(), dtype=np.float64)
        if env_runner.config.normalize_actions:
            low, high = -np.ones_like(space.low), np.ones_like(space.high)
        else:
            low, high = space.low, space.high
        middle, half = (high + low) / 2, (high - low) / 2
        at_bounds = np.abs(actions - middle) >= AT_BOUND * half
        log((HEALTH_KEY, ACTIONS_AT_BOUNDS), int(at_bounds.sum()), reduce="sum")
        log((HEALTH_KEY, ACTION_COMPONENTS), int(actions.size), reduce="sum")


def flat_observations(episode: SingleAgentEpisode) -> np.ndarray | None:
    """The episode's observations as one (T, n) float array when they are flat float vectors
    (images and nested observations are left out)."""
    observations = episode.get_observations()
    first = observations[0] if len(observations) else None
    if not (isinstance(first, np.ndarray) and first.ndim == 1 and first.dtype.kind == "f"):
        return None
    return observations if isinstance(observations, np.ndarray) else np.stack(observations)


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
        self._games: deque[tuple[int, dict[str, float], bool]] = deque()  # the same for games
        self._learning_started = False

    # The window is saved in checkpoints (see rlplat.run.trainable): a restored trial (PBT's
    # exploit, --resume) reports the same windowed return it had, not one over its first few
    # episodes.
    def get_state(self) -> dict[str, Any]:
        return {
            "recent": list(self._recent),
            "games": list(self._games),
            "learning_started": self._learning_started,
        }

    def set_state(self, state: dict[str, Any] | list) -> None:
        if isinstance(state, list):  # checkpoints written before the window kept more
            state = {"recent": [(*entry, False) for entry in state], "learning_started": True}
        self._recent = _entries(state["recent"])
        self._games = _entries(state.get("games", []))
        self._learning_started = bool(state["learning_started"])

    def on_episode_end(
        self, *, episode: Any, env_runner: Any = None, metrics_logger: Any = None, **kwargs: Any
    ) -> None:
        """A game's end (its score in the last info) is logged; team envs (QMIX) report each
        member's reward in its infos: each member's return is logged under RLlib's multi-agent
        key, so they are windowed and shown like any agent's."""
        if metrics_logger is None:
            return
        if not isinstance(episode, SingleAgentEpisode):
            count_game(episode, kwargs.get("prev_episode_chunks"), env_runner, metrics_logger)
            return
        log_episode_health(episode, env_runner, metrics_logger)
        window = _runner_window(env_runner.config)
        last = episode.get_infos(-1) or {}
        if "is_success" in last:
            metrics_logger.log_value(SUCCESS_RATE, float(bool(last["is_success"])), window=window)
        if GAME_SCORE in last:
            metrics_logger.log_value(NUM_GAMES, 1, reduce="sum")
            for info_key, name in GAME_MEANS.items():
                metrics_logger.log_value(name, float(last.get(info_key, math.nan)), window=window)
        returns: dict[str, float] = {}
        for info in episode.get_infos():
            for agent, reward in (info.get(AGENT_REWARDS) or {}).items():
                returns[agent] = returns.get(agent, 0.0) + reward
        if not returns:
            return
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
        games = int(finite(runners.get(NUM_GAMES)) or 0)
        game_means = {name: finite(runners.get(name)) for name in GAME_MEANS.values()}
        if games > 0 and None not in game_means.values():
            self._games.append((games, game_means, before_learning))
        self._learning_started |= bool(finite(lookup(result, TRAINED_LIFETIME)))
        total, before, means = _window_means(self._recent, window)
        if total == 0:
            return
        stats: dict[str, Any] = {"num_episodes": total, BEFORE_LEARNING: before}
        for key, value in means.items():
            group, _, member = key.partition("/")
            if member:
                stats.setdefault(group, {})[member] = value
            else:
                stats[key] = value
        played, _, game_means = _window_means(self._games, window)
        if played:
            stats.update(game_means, **{NUM_GAMES: played})
        result[WINDOW_KEY] = stats


def episode_window(algorithm: Any) -> WindowedEpisodeStats | None:
    """The algorithm's ``WindowedEpisodeStats`` instance (RLlib keeps one or a list)."""
    callbacks = algorithm.callbacks
    for callback in callbacks if isinstance(callbacks, list) else [callbacks]:
        if isinstance(callback, WindowedEpisodeStats):
            return callback
    return None
