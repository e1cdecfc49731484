"""Checks of an experiment's ``offline:`` section against its algorithm, env and datasets."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym

from rlplat.algorithms.registry import algorithm_record, algorithm_records
from rlplat.datasets.dataset import read_info
from rlplat.environments.make import EnvInfo
from rlplat.errors import ConfigError, UserError
from rlplat.experiment.load import Locator
from rlplat.experiment.schema import Experiment

RECORD_HINT = "record one with `rlplat eval <checkpoint> -n 50 --record DIR`"


def check_offline(experiment: Experiment, env: EnvInfo, locate: Locator) -> Experiment:
    """The algorithm is an offline one exactly when ``offline:`` is given, and every dataset
    exists, holds env steps and has the env's observation and action spaces. Returns the
    experiment with absolute dataset paths (trials run in other working directories)."""
    name, offline = experiment.algorithm, experiment.offline
    continuous = isinstance(env.action_space, gym.spaces.Box)
    fitting = [
        r.name
        for r in algorithm_records()
        if r.offline and (continuous or not r.discrete_alternative)
    ]
    if offline is None:
        if algorithm_record(name).offline:
            raise ConfigError(
                f"{name} learns from recorded experience, and the experiment names no data: "
                f"add `offline: {{input: DIR}}` with a dataset directory ({RECORD_HINT}).",
                location=locate("algorithm"),
                key="offline",
            )
        return experiment
    if not algorithm_record(name).offline:
        raise ConfigError(
            f"offline.input gives datasets, but {name} learns by sampling its env. Train from "
            f"datasets with an offline algorithm: {', '.join(fitting)} (did you mean "
            f"algorithm: {fitting[0]}?), or remove the offline section.",
            location=locate("algorithm"),
            key="algorithm",
        )
    if env.multi_agent:
        raise ConfigError(
            f"{experiment.env.label!r} is multi-agent; RLlib's offline algorithms learn "
            "single-agent policies from single-agent datasets.",
            location=locate("offline"),
            key="offline",
        )
    if experiment.offline_data.get("input_") is not None:
        raise ConfigError(
            "offline_data.input_ is set by rlplat from offline.input (datasets are checked "
            "before the run); give the dataset directories there. Did you mean offline.input?",
            location=locate("offline_data.input_"),
            key="offline_data.input_",
        )
    runs_normalized = experiment.env_runners.get("normalize_actions", True)
    for index, given in enumerate(offline.inputs()):
        key = "offline.input" if isinstance(offline.input, str) else f"offline.input[{index}]"
        _check_dataset(given, experiment, env, runs_normalized, location=locate(key), key=key)
    absolute = [str(Path(given).resolve()) for given in offline.inputs()]
    return experiment.model_copy(update={"offline": offline.model_copy(update={"input": absolute})})


def _check_dataset(
    given: str,
    experiment: Experiment,
    env: EnvInfo,
    runs_normalized: bool,
    *,
    location: str,
    key: str,
) -> None:
    """One dataset of ``offline.input`` exists, holds env steps, has the env's spaces and its
    Box actions in the range the run acts in; errors name ``key`` at ``location``."""
    if "://" in given:
        raise ConfigError(
            f"{given} is a URI; offline.input takes dataset directories on a file system "
            "(shared by every node on a cluster), because rlplat checks each dataset.json "
            "before the run.",
            location=location,
            key=key,
        )
    try:
        info = read_info(Path(given))
    except UserError as exc:
        raise ConfigError(str(exc), location=location, key=key) from None
    if info.env_steps == 0:
        raise ConfigError(
            f"the dataset {given} holds no env steps; {RECORD_HINT}.", location=location, key=key
        )
    observation_space, action_space = info.spaces()
    for what, theirs, ours in (
        ("observation", observation_space, env.observation_space),
        ("action", action_space, env.action_space),
    ):
        if theirs != ours:
            raise ConfigError(
                f"the dataset {given} was recorded with {what} space {theirs}, but "
                f"{experiment.env.label!r} has {ours}; train on data from the same env "
                "(its dataset.json names the env it came from).",
                location=location,
                key=key,
            )
    continuous = isinstance(env.action_space, gym.spaces.Box)
    if continuous and info.actions_normalized != runs_normalized:
        held = "the policy's [-1, 1] range" if info.actions_normalized else "the env's range"
        raise ConfigError(
            f"the dataset {given} holds actions in {held} (dataset.json: actions_normalized: "
            f"{str(info.actions_normalized).lower()}), and RLlib trains on them as they are: "
            "set env_runners.normalize_actions: "
            f"{str(info.actions_normalized).lower()} so the policy's actions mean the same.",
            location=location,
            key=key,
        )
