"""What the diagnoses read from a trial: one ``Reading`` per result row (the few numbers the
rules look at) and the run's ``Settings`` (the values a fix would change)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlplat.metrics import ENV_STEPS, ITERATION, RETURN_MEAN, TIME_TOTAL, finite, lookup

# Per-episode numbers rlplat's episode callback logs on every single-agent env runner
# (rlplat.rllib.episode_stats): sums over the iteration's finished episodes.
HEALTH_KEY = "health"
EPISODES_TRUNCATED = "episodes_truncated"  # episodes that ended at the time limit
EPISODES_ENDED = "episodes_ended"
OBS_ABS_SUM = "obs_abs_sum"  # sum over episodes of each episode's mean |observation|
ACTIONS_AT_BOUNDS = "actions_at_bounds"  # Box action components at (or past) their bounds
ACTION_COMPONENTS = "action_components"

TRAINED = "learners/__all_modules__/num_env_steps_trained_lifetime"
EPISODES_LIFETIME = "env_runners/num_episodes_lifetime"
# Each learner's module: RLlib's PPO family and SAC/DQN names, and rlplat's own algorithms'.
ENTROPY = "entropy"
# rlplat's PPO learners (rlplat.algorithms.policy_change): logged whatever the loss uses.
APPROX_KL = "approx_kl"
CLIP_FRACTION = "clip_fraction"
EXPLAINED_VARIANCE = "vf_explained_var"
# The Q-value estimates are each algorithm's own names (its registration's ``q_metrics``).
ALL_MODULES = "__all_modules__"


@dataclass(frozen=True)
class Reading:
    """The numbers one result row gives the rules (None where the row does not have them)."""

    iteration: int
    env_steps: float
    time_s: float
    trained: bool  # a gradient update has happened
    window_return: float | None
    episodes_lifetime: float | None
    return_max: float | None  # this iteration's finished episodes
    return_min: float | None
    episode_len: float | None
    entropy: float | None  # mean over the learner's modules
    kl: float | None  # approximate KL of each update's policy from the sampling one
    clip_fraction: float | None
    explained_variance: float | None
    q_abs_max: float | None  # the largest |Q| estimate any module logged (inf when not finite)
    truncated_fraction: float | None
    obs_abs_mean: float | None
    actions_at_bounds: float | None  # fraction of Box action components at their bounds

    @classmethod
    def of(cls, row: Mapping[str, Any], q_metrics: tuple[str, ...] = ()) -> Reading:
        """``row``'s numbers; ``q_metrics``: the learner metrics that estimate Q-values."""
        modules = {
            name: stats
            for name, stats in (row.get("learners") or {}).items()
            if name != ALL_MODULES and isinstance(stats, Mapping)
        }
        health = row.get(HEALTH_KEY) or (row.get("env_runners") or {}).get(HEALTH_KEY) or {}
        ended = finite(health.get(EPISODES_ENDED))
        components = finite(health.get(ACTION_COMPONENTS))
        return cls(
            iteration=int(finite(row.get(ITERATION)) or 0),
            env_steps=finite(lookup(row, ENV_STEPS)) or 0.0,
            time_s=finite(row.get(TIME_TOTAL)) or 0.0,
            trained=bool(finite(lookup(row, TRAINED))),
            window_return=finite(lookup(row, RETURN_MEAN)),
            episodes_lifetime=finite(lookup(row, EPISODES_LIFETIME)),
            return_max=finite(lookup(row, "env_runners/episode_return_max")),
            return_min=finite(lookup(row, "env_runners/episode_return_min")),
            episode_len=finite(lookup(row, "env_runners/episode_len_mean")),
            entropy=_mean(modules, ENTROPY),
            kl=_mean(modules, APPROX_KL),
            clip_fraction=_mean(modules, CLIP_FRACTION),
            explained_variance=_mean(modules, EXPLAINED_VARIANCE),
            q_abs_max=_q_abs_max(modules, q_metrics),
            truncated_fraction=_ratio(health.get(EPISODES_TRUNCATED), ended),
            obs_abs_mean=_ratio(health.get(OBS_ABS_SUM), ended),
            actions_at_bounds=_ratio(health.get(ACTIONS_AT_BOUNDS), components),
        )


def _mean(modules: Mapping[str, Mapping[str, Any]], key: str) -> float | None:
    values = [v for stats in modules.values() if (v := finite(stats.get(key))) is not None]
    return sum(values) / len(values) if values else None


def _q_abs_max(modules: Mapping[str, Mapping[str, Any]], names: tuple[str, ...]) -> float | None:
    """The largest |Q| logged; inf when one is logged but not finite (a diverged critic)."""
    found = [stats[key] for stats in modules.values() for key in names if key in stats]
    if not found:
        return None
    values = [finite(value) for value in found]
    if None in values:
        return float("inf")
    return max(abs(value) for value in values if value is not None)


def _ratio(part: Any, whole: float | None) -> float | None:
    part = finite(part)
    if part is None or not whole:
        return None
    return part / whole


@dataclass(frozen=True)
class Settings:
    """A trial's settings as the rules name them: ``training.<key>`` with its value in use (the
    experiment's, else the algorithm config's default, as the trial's results carry it)."""

    algorithm: str = ""
    training: Mapping[str, Any] = field(default_factory=dict)  # the experiment's section
    config: Mapping[str, Any] = field(default_factory=dict)  # RLlib's config, defaults included
    connectors: tuple[str, ...] = ()
    off: frozenset[str] = frozenset()  # diagnoses.off
    q_metrics: tuple[str, ...] = ()  # the algorithm's learner metrics that estimate Q-values
    rnd_available: bool = False  # the algorithm takes exploration.rnd and the run has none

    @classmethod
    def of(
        cls,
        experiment: Mapping[str, Any],
        config: Mapping[str, Any] | None,
        q_metrics: tuple[str, ...] = (),
        takes_rnd: bool = False,
    ) -> Settings:
        names = []
        for entry in experiment.get("connectors") or []:
            names += list(entry) if isinstance(entry, Mapping) else [str(entry)]
        return cls(
            algorithm=str(experiment.get("algorithm", "")),
            training=experiment.get("training") or {},
            config=config or {},
            connectors=tuple(names),
            off=frozenset((experiment.get("diagnoses") or {}).get("off") or ()),
            q_metrics=q_metrics,
            rnd_available=takes_rnd and not (experiment.get("exploration") or {}).get("rnd"),
        )

    def value(self, key: str) -> Any:
        if key in self.training:
            return self.training[key]
        return self.config.get(key)

    def has(self, key: str) -> bool:
        return self.value(key) is not None

    def named(self, *keys: str) -> str:
        """``training.lr (now 0.0003)`` for each of ``keys`` the algorithm has, joined by "or"."""
        shown = [f"training.{key} (now {_short(self.value(key))})" for key in keys if self.has(key)]
        return " or ".join(shown)

    def number(self, key: str, default: float) -> float:
        value = finite(self.value(key))
        return default if value is None else value


def _short(value: Any) -> str:
    if isinstance(value, float):
        return str(value) if len(str(value)) <= 8 else f"{value:.3g}"
    if isinstance(value, list) and value and isinstance(value[0], (list, tuple)):
        return f"a schedule from {_short(value[0][-1])} to {_short(value[-1][-1])}"
    return str(value)
