"""The metric stage: ``checkpoint.score`` and ``tune.metric`` name numbers this run's results
will carry. A path no result contains would score every checkpoint null ("best" would mean
nothing) or give a search nothing to compare, without an error."""

from __future__ import annotations

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from rlplat.environments.make import EnvInfo
from rlplat.errors import ConfigError, allowed_list, did_you_mean
from rlplat.experiment.load import Locator
from rlplat.experiment.schema import Experiment
from rlplat.metrics import GROUP_PREFIXES, metric_path
from rlplat.prepare.probe import ProbeResult

# The first part of every result path: RLlib's and Tune's groups and rlplat's own.
RESULT_GROUPS = (
    "env_runners",
    "learners",
    "evaluation",
    "window",
    "timers",
    "perf",
    "fault_tolerance",
    "replay",
    "self_play",
    "stop",
    "env_runner_group",
)
TOP_LEVEL = (
    "num_env_steps_sampled_lifetime",
    "training_iteration",
    "time_total_s",
    "time_this_iter_s",
    "time_since_restore",
    "iterations_since_restore",
    "num_training_step_calls_per_iteration",
)
# What env runners report once episodes finish (a probe of 32 env steps may finish none).
EPISODE_METRICS = (
    "episode_return_mean",
    "episode_return_min",
    "episode_return_max",
    "episode_len_mean",
    "episode_len_min",
    "episode_len_max",
    "episode_duration_sec_mean",
    "num_episodes",
    "num_episodes_lifetime",
    "agent_episode_return_mean",
    "module_episode_return_mean",
)


def check_metric_paths(
    experiment: Experiment,
    algo_config: AlgorithmConfig,
    env: EnvInfo,
    probe: ProbeResult | None,
    locate: Locator,
) -> None:
    """Refuse a ``checkpoint.score`` or ``tune.metric`` no result of this run would carry: a
    policy or agent it does not have, a group results do not have, or (with the probe's
    results) an env-runner or learner number neither reports."""
    named = {"checkpoint.score": experiment.score_metric()}
    if experiment.tune is not None:
        named["tune.metric"] = experiment.tune.metric
    for key, metric in named.items():
        _check_member(metric, key, algo_config, env, locate)
        problem = _path_problem(metric_path(metric), algo_config, probe)
        if problem:
            raise ConfigError(
                f"no result of this run would carry {metric!r}: {problem} Every checkpoint "
                "would be scored null (or the search would compare nothing).",
                location=locate(key),
                key=key,
            )


def _check_member(
    metric: str, key: str, algo_config: AlgorithmConfig, env: EnvInfo, locate: Locator
) -> None:
    """A ``policy_return_mean/<policy>`` or ``agent_return_mean/<agent>`` names a member the run
    has."""
    policies = sorted(algo_config.policies) if algo_config.is_multi_agent else []
    members = dict(zip(GROUP_PREFIXES, (policies, list(env.agents or [])), strict=True))
    for prefix, allowed in members.items():
        if not metric.startswith(prefix):
            continue
        member = metric.removeprefix(prefix)
        if member in allowed:
            continue
        kind = prefix.split("_", 1)[0]  # policy or agent
        has = (
            f"its {kind} ids are {allowed_list(allowed)}.{did_you_mean(member, allowed)}"
            if allowed
            else f"it has no {kind} ids (a single-agent or team run): use episode_return_mean."
        )
        raise ConfigError(
            f"{metric!r} names the {kind} {member!r}, which this run does not have, so no "
            f"result would carry it; {has}",
            location=locate(key),
            key=key,
        )


def _path_problem(path: str, algo_config: AlgorithmConfig, probe: ProbeResult | None) -> str | None:
    parts = path.split("/")
    if len(parts) == 1:
        return None if path in TOP_LEVEL else _unknown("result key", path, TOP_LEVEL)
    if parts[0] not in RESULT_GROUPS:
        return _unknown("result group", parts[0], RESULT_GROUPS)
    if probe is None or not probe.metric_paths:
        return None
    if parts[0] == "evaluation" and parts[1:2] == ["env_runners"]:
        parts = parts[1:]
    sampled = {p.split("/")[1] for p in probe.metric_paths if p.startswith("env_runners/")}
    if parts[0] == "env_runners" and len(parts) > 1 and sampled:  # an offline probe samples none
        names = sampled | set(EPISODE_METRICS)
        if parts[1] not in names:
            return _unknown("env-runner metric", parts[1], names)
    if parts[0] == "learners" and len(parts) > 2:
        modules = {"__all_modules__", *(getattr(algo_config, "policies", None) or {})}
        modules.update(p.split("/")[1] for p in probe.metric_paths if p.startswith("learners/"))
        if parts[1] not in modules:
            return _unknown("learner module", parts[1], modules)
        module = f"learners/{parts[1]}/"
        names = {p.removeprefix(module) for p in probe.metric_paths if p.startswith(module)}
        if names and "/".join(parts[2:]) not in names:
            return _unknown(f"{parts[1]}'s learner metric", "/".join(parts[2:]), names)
    return None


def _unknown(what: str, name: str, known: object) -> str:
    choices = sorted(set(known))  # type: ignore[call-overload]
    return (
        f"{name!r} is no {what} of its results.{did_you_mean(name, choices)} Known: "
        f"{allowed_list(choices, limit=12)}."
    )
