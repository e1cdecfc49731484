"""Experiment -> RLlib ``AlgorithmConfig``, checking every RLlib key against the real builders.

The RLlib sections of the YAML are passed to the ``AlgorithmConfig`` builder method of the same
name (``training:`` -> ``config.training(**section)``), so RLlib's own docs describe their keys.
Before that, each key is checked against the builder's signature (the algorithm's override and
every base class's) and each value against the parameter's type annotation.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from pydantic import TypeAdapter, ValidationError
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.tune.execution.placement_groups import PlacementGroupFactory
from ray.tune.registry import register_env

from rlplat.algorithms.base import OwnAlgorithmConfig
from rlplat.algorithms.memory import ATTENTION, ATTENTION_ONLY, MEMORY, MEMORY_TYPES, MemorySettings
from rlplat.algorithms.networks import OBSERVATION_NORM, SIMBA, SimbaSettings
from rlplat.algorithms.registry import (
    algorithm_record,
    get_algorithm_class,
    is_team_algorithm,
    names_where,
)
from rlplat.algorithms.replay import TRANSITION_SAMPLER, transition_sampler_requested
from rlplat.algorithms.rnd import RND, RndPPOLearner, RndPPOModule, RndSettings
from rlplat.algorithms.stacked.crossq import StackedCrossQ
from rlplat.algorithms.stacked.dqn import StackedDQN
from rlplat.algorithms.stacked.ppo import StackedPPO
from rlplat.algorithms.stacked.pqn import StackedPQN
from rlplat.algorithms.stacked.sac import StackedSAC
from rlplat.algorithms.stacked.td3 import StackedTD3
from rlplat.datasets.dataset import data_path
from rlplat.environments.backends import backend_for
from rlplat.environments.connectors import ConnectorFactory
from rlplat.environments.guard import GuardedCreator
from rlplat.environments.kinds import is_image
from rlplat.environments.make import EnvInfo
from rlplat.environments.seeding import seeded_env_runner_class
from rlplat.environments.team import TeamEnvError
from rlplat.environments.wrappers import resolve_chain
from rlplat.errors import ConfigError, did_you_mean, not_among
from rlplat.experiment.sb3_names import sb3_hint
from rlplat.experiment.schema import OWN_FAULT_TOLERANCE, Experiment, MultiAgentSpec, entry_parts
from rlplat.rllib.env_creator import env_creator_for, rllib_env_name
from rlplat.rllib.episode_stats import WindowedEpisodeStats
from rlplat.rllib.modules import (
    LOG_STD_INIT,
    MEMORY_CATALOGS,
    SCALED_FRAMES_MODULES,
    SIMBA_CATALOGS,
    InitialLogStdPPOModule,
    UniformRandomModule,
    default_catalog,
)
from rlplat.rllib.multi_agent import PolicyMapping, check_multi_agent
from rlplat.rllib.optimizers import check_optimizer
from rlplat.rllib.self_play import self_play_calls
from rlplat.util.imports import import_object

# An offline run's data pipeline runs in the trial's placement group (see
# rlplat.run.trainable.keep_ray_data_in_the_trial): Ray Data samples a Parquet file in a one-CPU
# task, then reads it and runs RLlib's OfflinePreLearner in an actor pool. RLlib asks Tune for no
# resources for it and starts two one-CPU actors by default. rlplat starts one half-CPU actor and
# half-CPU reads, and adds a bundle to the trial (``data_pipeline_cpus``); offline_data overrides
# either.
OFFLINE_MAP_BATCHES = {"concurrency": 1, "num_cpus": 0.5}
OFFLINE_READ_CPUS = 0.5
PARQUET_SAMPLING_CPUS = 1.0


def _offline_data_defaults(offline_data: dict[str, Any]) -> None:
    offline_data["map_batches_kwargs"] = {
        **OFFLINE_MAP_BATCHES,
        **(offline_data.get("map_batches_kwargs") or {}),
    }
    read = dict(offline_data.get("input_read_method_kwargs") or {})
    read["ray_remote_args"] = {
        "num_cpus": OFFLINE_READ_CPUS,
        **(read.get("ray_remote_args") or {}),
    }
    offline_data["input_read_method_kwargs"] = read
    # RLlib requires it with a learner in the algorithm's process (learners.count 0).
    offline_data.setdefault("dataset_num_iters_per_learner", 1)


def with_data_pipeline(request: PlacementGroupFactory, config: AlgorithmConfig) -> Any:
    """RLlib's resource request for a trial, plus a bundle for an offline run's data pipeline
    (which Ray Data runs inside the trial's placement group)."""
    cpus = data_pipeline_cpus(config)
    if not cpus:
        return request
    head = [{}] if request.head_bundle_is_empty else []  # a driver that asks for nothing
    return PlacementGroupFactory(
        [*head, *request.bundles, {"CPU": cpus}], strategy=request.strategy
    )


def resource_request(config: AlgorithmConfig, algo_cls: type) -> Any:
    """What Tune reserves for one trial of ``algo_cls`` with ``config``: RLlib's request and an
    offline run's data pipeline."""
    return with_data_pipeline(algo_cls.default_resource_request(config), config)


def data_pipeline_cpus(config: AlgorithmConfig) -> float:
    """CPUs an offline run's Ray Data pipeline needs at once: its map actors and a read, or the
    Parquet sampling task that runs before them."""
    if not config.is_offline:
        return 0.0
    kwargs = config.map_batches_kwargs or {}
    concurrency = kwargs.get("concurrency") or 1
    if isinstance(concurrency, (tuple, list)):  # Ray Data's (min, max) actor pool size
        concurrency = concurrency[-1]
    remote = (config.input_read_method_kwargs or {}).get("ray_remote_args") or {}
    actors = float(concurrency) * float(kwargs.get("num_cpus", 1) or 0)
    reading = actors + float(remote.get("num_cpus", 1) or 0)
    return max(PARQUET_SAMPLING_CPUS, reading)


# resources.<key path> -> (RLlib builder method, its keyword)
RESOURCE_KEYS: dict[str, tuple[str, str]] = {
    "env_runners.count": ("env_runners", "num_env_runners"),
    "env_runners.envs": ("env_runners", "num_envs_per_env_runner"),
    "env_runners.cpus": ("env_runners", "num_cpus_per_env_runner"),
    "env_runners.gpus": ("env_runners", "num_gpus_per_env_runner"),
    "env_runners.custom": ("env_runners", "custom_resources_per_env_runner"),
    "learners.count": ("learners", "num_learners"),
    "learners.cpus": ("learners", "num_cpus_per_learner"),
    "learners.gpus": ("learners", "num_gpus_per_learner"),
    "learners.custom": ("learners", "custom_resources_per_learner"),
    "driver.cpus": ("resources", "num_cpus_for_main_process"),
    "driver.custom": ("resources", "custom_resources_for_main_process"),
    "placement": ("resources", "placement_strategy"),
}

# rlplat's fault-tolerance defaults where RLlib's do not suit: a runner whose env raised waits
# this long before it exits and is restarted (RLlib: 60 s, which stalls a small run for a minute).
FAULT_TOLERANCE_DEFAULTS: dict[str, Any] = {
    "delay_between_env_runner_restarts_s": 10.0,
    # An env that raises is rebuilt and its episode dropped, instead of failing the runner.
    "restart_failed_sub_environments": True,
}
# The fault-tolerance settings the run directory records (RLlib's defaults filled in).
FAULT_TOLERANCE_KEYS = (
    "restart_failed_env_runners",
    "restart_failed_sub_environments",
    "max_num_env_runner_restarts",
    "delay_between_env_runner_restarts_s",
    "num_consecutive_env_runner_failures_tolerance",
    "env_runner_health_probe_timeout_s",
    "env_runner_restore_timeout_s",
)

# RLlib keywords that rlplat sets from its own keys: accept one spelling, point to it.
OWNED_KEYS: dict[tuple[str, str], str] = {
    **{rllib: f"resources.{path}" for path, rllib in RESOURCE_KEYS.items()},
    ("environment", "env"): "env.id or env.factory",
    ("environment", "env_config"): "env.kwargs",
    ("debugging", "seed"): "seed",
    ("env_runners", "env_to_module_connector"): "connectors",
    ("learners", "learner_connector"): "connectors",
    ("rl_module", "algorithm_config_overrides_per_module"): "multi_agent.overrides",
}

_DEPRECATED = -1  # RLlib marks removed builder arguments with DEPRECATED_VALUE (-1) as default.


def builder_parameters(config_cls: type, section: str) -> dict[str, inspect.Parameter]:
    """Keyword parameters of ``config_cls.<section>()``, merged over the class hierarchy."""
    params: dict[str, inspect.Parameter] = {}
    for klass in reversed(config_cls.__mro__):
        method = klass.__dict__.get(section)
        if method is None:
            continue
        for name, param in inspect.signature(method).parameters.items():
            if param.kind is inspect.Parameter.KEYWORD_ONLY or (
                param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and name != "self"
            ):
                params[name] = param
    return {n: p for n, p in params.items() if not _is_deprecated(p)}


def _is_deprecated(param: inspect.Parameter) -> bool:
    default = param.default
    return isinstance(default, int) and not isinstance(default, bool) and default == _DEPRECATED


def _type_problem(annotation: Any, value: Any) -> str | None:
    """Why ``value`` does not fit ``annotation`` (None when it fits or cannot be judged)."""
    if annotation is inspect.Parameter.empty:
        return None
    try:
        adapter = TypeAdapter(annotation)
    except Exception:  # noqa: BLE001 - forward references, classes: RLlib checks these itself
        return None
    try:
        adapter.validate_python(value, strict=True)
        return None
    except ValidationError as strict_error:
        error = strict_error
    except Exception:  # noqa: BLE001
        return None
    if not isinstance(value, str):  # lists for tuples, ints for floats: fine; "5" for 5: not
        try:
            adapter.validate_python(value)
            return None
        except ValidationError as lax_error:
            error = lax_error
        except Exception:  # noqa: BLE001
            return None
    expected = (annotation.__name__ if isinstance(annotation, type) else str(annotation)).replace(
        "typing.", ""
    )
    return f"{error.errors()[0]['msg'].lower()} (expected {expected}, got {value!r})"


def _positive(value: Any) -> bool:
    return value > 0


def _fraction(value: Any) -> bool:
    return 0 <= value <= 1


def _learning_rate(value: Any) -> bool:
    """A positive number, or a schedule [[timestep, value], ...] of values >= 0."""
    if isinstance(value, list):
        return all(isinstance(p, list) and len(p) == 2 and p[1] >= 0 for p in value)
    return value > 0


# Values RLlib accepts but that cannot train (or diverge at once): key -> (check, allowed).
VALUE_RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "lr": (_learning_rate, "a number > 0, or a schedule [[timestep, value], ...] of values >= 0"),
    "actor_lr": (_learning_rate, "a number > 0, or a schedule of values >= 0"),
    "critic_lr": (_learning_rate, "a number > 0, or a schedule of values >= 0"),
    "alpha_lr": (_learning_rate, "a number > 0, or a schedule of values >= 0"),
    "gamma": (_fraction, "a discount between 0 and 1"),
    "lambda_": (_fraction, "a GAE lambda between 0 and 1"),
    "tau": (_fraction, "a target-network update rate between 0 and 1"),
    "train_batch_size_per_learner": (_positive, "a positive number of env steps"),
    "minibatch_size": (_positive, "a positive number of env steps"),
    "num_epochs": (_positive, "a positive number of passes over each batch"),
    "clip_param": (_positive, "a positive clip range"),
    # RLlib reads 0 as "never": the greedy evaluation, and the checkpoint scores with it, would be
    # off although a number was written.
    "evaluation_interval": (
        _positive,
        "a number of iterations >= 1 (RLlib reads 0 as 'never evaluate'); null turns the greedy "
        "evaluation off",
    ),
    "evaluation_duration": (
        _positive,
        "a positive number of episodes or timesteps, or 'auto' (0 would evaluate nothing)",
    ),
}


def _range_problem(
    key: str, value: Any, ranges: dict[str, tuple[Callable[[Any], bool], str]] = VALUE_RANGES
) -> str | None:
    check, allowed = ranges.get(key, (None, ""))
    if check is None or value is None:
        return None
    try:
        ok = check(value)
    except TypeError:
        return None  # a wrong type is reported by the type check
    return None if ok else f"{value!r} is out of range: {key} must be {allowed}."


# RLlib keys that RLlib ignores when the key beside them is set: (section, ignored) -> used.
IGNORED_BESIDE: dict[tuple[str, str], str] = {
    ("training", "train_batch_size"): "train_batch_size_per_learner",
}


def check_rllib_sections(exp: Experiment, config_cls: type, locate: Callable[[str], str]) -> None:
    """Raise ConfigError for the first unknown, owned, deprecated, mistyped or ignored RLlib
    key."""
    sections = exp.rllib_sections()
    for (section, ignored), used in IGNORED_BESIDE.items():
        values = sections.get(section) or {}
        if ignored in values and used in values:
            path = f"{section}.{ignored}"
            source = exp.defaults.get(f"{section}.{used}")
            where = f"rlplat's default: {source}" if source else locate(f"{section}.{used}")
            raise ConfigError(
                f"RLlib ignores {ignored} ({values[ignored]!r}) when {section}.{used} is set "
                f"({values[used]!r}, {where}): one of them would mean "
                f"nothing. Keep {used} (the new API stack's key) and remove {ignored}.",
                location=locate(path),
                key=path,
            )
    for section, values in sections.items():
        params = builder_parameters(config_cls, section)
        for key, value in values.items():
            path = f"{section}.{key}"
            if (section, key) in OWNED_KEYS:
                raise ConfigError(
                    f"set this with '{OWNED_KEYS[(section, key)]}' instead: rlplat sets "
                    f"RLlib's {key} from that key, and one value must have one place.",
                    location=locate(path),
                    key=path,
                )
            if key not in params:
                allowed = [p for p in params if (section, p) not in OWNED_KEYS]
                if section == "fault_tolerance":
                    allowed += OWN_FAULT_TOLERANCE  # rlplat's key in RLlib's section
                raise ConfigError(
                    f"{config_cls.__name__}.{section}() has no argument {key!r}."
                    + (sb3_hint(key) or not_among(key, allowed, limit=40)),
                    location=locate(path),
                    key=path,
                )
            problem = _type_problem(params[key].annotation, value)
            if problem:
                raise ConfigError(f"wrong type: {problem}.", location=locate(path), key=path)
            problem = _range_problem(key, value)
            if problem:
                raise ConfigError(problem, location=locate(path), key=path)
    defaults = config_cls()
    if isinstance(defaults.optimizer, dict):  # RLlib's old-stack key, rlplat's on the new one
        learner_class = exp.training.get("learner_class") or learner_class_for(exp.algorithm)
        check_optimizer(exp.training.get("optimizer"), exp.algorithm, learner_class, locate)


def model_config_keys(algorithm: str) -> list[str]:
    """The keys under ``rl_module.model_config`` that ``algorithm``'s networks read."""
    record = algorithm_record(algorithm)
    keys = {SIMBA} if record.simba else set()
    if record.memory:
        keys.add(MEMORY)
    if record.initial_log_std:
        keys.add(LOG_STD_INIT)
    if record.networks == "catalog":
        keys |= {f.name for f in fields(DefaultModelConfig)}
    return sorted(keys)


# Sizes a network may have: RLlib allocates whatever it is given, and [100000000] grew the check
# before Ray to ~20 GB until the kernel killed it. 2**16 units is wider than any published MLP;
# 10**8 weights between hidden layers are 0.4 GB, ~1.6 GB with gradients and Adam's moments.
MAX_LAYER_SIZE = 2**16
MAX_HIDDEN_WEIGHTS = 10**8
MAX_LSTM_CELLS = 2**12  # an LSTM holds 8 * cells**2 weights: 134 million at 4,096
MAX_SEQUENCE = 10**5


def _sizes(value: Any) -> bool:
    return all(0 < size <= MAX_LAYER_SIZE for size in value) and (
        sum(a * b for a, b in zip(value, value[1:], strict=False)) <= MAX_HIDDEN_WEIGHTS
    )


SIZES = (
    f"a list of positive layer sizes, each at most {MAX_LAYER_SIZE:,}, with at most "
    f"{MAX_HIDDEN_WEIGHTS:,} weights between them"
)
# Network settings that RLlib builds with whatever it is given (0 hangs the LSTM's batching).
MODEL_RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "max_seq_len": (
        lambda v: 0 < v <= MAX_SEQUENCE,
        f"a positive number of steps per training sequence, at most {MAX_SEQUENCE:,}",
    ),
    "lstm_cell_size": (
        lambda v: 0 < v <= MAX_LSTM_CELLS,
        f"a positive number of units, at most {MAX_LSTM_CELLS:,}",
    ),
    "fcnet_hiddens": (_sizes, SIZES),
    "head_fcnet_hiddens": (_sizes, f"{SIZES} ([] for no hidden layer)"),
    "fusionnet_hiddens": (_sizes, SIZES),
    "log_std_clip_param": (lambda v: 0 < v < float("inf"), "a finite positive number"),
}
# RLlib's names of activations; torch.nn's activation classes (GELU, Sigmoid, ...) work too.
ACTIVATIONS = ("relu", "tanh", "elu", "swish", "silu", "linear", "softmax")
ACTIVATION_KEYS = ("fcnet_activation", "head_fcnet_activation", "conv_activation",
                   "fusionnet_activation")  # fmt: skip


def _activation_problem(key: str, value: Any) -> str | None:
    """Why ``value`` names no activation RLlib's torch networks can build, or None."""
    from torch.nn.modules import activation  # noqa: PLC0415 - torch loads with RLlib's models

    classes = [name for name in activation.__all__ if name[0].isupper()]
    if not isinstance(value, str) or value.lower() in ACTIVATIONS or value in classes:
        return None
    return (
        f"{value!r} is not an activation: {key} takes one of {', '.join(ACTIVATIONS)}, or the "
        f"name of a torch.nn activation class ({', '.join(classes[:6])}, ...)."
        + did_you_mean(value, [*ACTIVATIONS, *classes])
    )


PLAIN_HINTS = (bool, int, float, str, list[int], typing.List[int])  # noqa: UP006 - RLlib's
MODEL_HINTS = typing.get_type_hints(DefaultModelConfig)


def _model_setting_problem(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be RLlib's DefaultModelConfig ``key`` (its type, then its range)."""
    hint = MODEL_HINTS.get(key)
    # Only the plain annotations: RLlib's richer ones are narrower than what it builds
    # (conv_filters takes a padding as a fourth item).
    problem = _type_problem(hint, value) if hint in PLAIN_HINTS else None
    if problem:
        return f"{key}: {problem}."
    if key in ACTIVATION_KEYS:
        return _activation_problem(key, value)
    return _range_problem(key, value, MODEL_RANGES)


def check_model_config(
    exp: Experiment, default_config: AlgorithmConfig, locate: Callable[[str], str]
) -> None:
    """Raise ConfigError for a key under ``rl_module.model_config`` that the algorithm's
    networks do not read (it would be dropped), or that is one of its training settings (its
    networks get it from ``training``, where the learner reads it too)."""
    model_config = exp.rl_module.get("model_config") or {}
    if not isinstance(model_config, dict):
        return
    read = model_config_keys(exp.algorithm)
    from_training = sorted(set(default_config.model_config) - set(read))
    own = algorithm_record(exp.algorithm).networks == "own"
    for key, value in model_config.items():
        path = f"rl_module.model_config.{key}"
        if key in read:
            problem = _model_setting_problem(key, value)
            if problem:
                raise ConfigError(problem, location=locate(path), key=path)
            continue
        if key == MEMORY:
            message = (
                f"{MEMORY} (rlplat's GRU and attention memories) applies to "
                f"{', '.join(names_where('memory'))}, not {exp.algorithm}."
            )
        elif key in from_training:
            message = (
                f"{key} is a training setting of {exp.algorithm}: set training.{key}. Its "
                "networks get it from there, and so does its learner; here it would change the "
                "network alone."
            )
        elif own:
            takes = f"only {', '.join(read)}" if read else "no key"
            message = (
                f"{exp.algorithm}'s networks are rlplat's own and do not read {key!r}: they are "
                f"set by training settings ({', '.join(from_training)}) and take {takes} "
                "under rl_module.model_config."
            ) + did_you_mean(key, [*read, *from_training])
        else:
            message = (
                f"{exp.algorithm}'s networks (RLlib's, built from RLlib's DefaultModelConfig) "
                f"do not read {key!r}: it would be dropped." + not_among(key, read, limit=16)
            )
        raise ConfigError(message, location=locate(path), key=path)


# stacked: true
STACKED = {
    "CrossQ": StackedCrossQ,
    "PPO": StackedPPO,
    "PQN": StackedPQN,
    "SAC": StackedSAC,
    "TD3": StackedTD3,
    "DQN": StackedDQN,
}


def build_algorithm_config(
    exp: Experiment, locate: Callable[[str], str], env: EnvInfo
) -> AlgorithmConfig:
    """The RLlib config for an experiment. Raises ConfigError for anything RLlib rejects.

    ``locate(key_path)`` returns 'file:line' for messages; ``env`` is what ``check_env`` found.
    """
    if exp.stacked:
        algo_cls = STACKED[exp.algorithm]
    else:
        algo_cls = get_algorithm_class(exp.algorithm)
    config = algo_cls.get_default_config()
    check_rllib_sections(exp, type(config), locate)
    check_model_config(exp, config, locate)

    env_name = rllib_env_name(exp)
    creator = env_creator_for(exp)
    team = is_team_algorithm(exp.algorithm)
    register_env(env_name, GuardedCreator(creator))

    calls: dict[str, dict[str, Any]] = {s: dict(v) for s, v in exp.rllib_sections().items()}
    calls["environment"].update(env=env_name, env_config={})
    calls["debugging"]["seed"] = exp.seed
    calls["evaluation"] = exp.evaluation_settings()
    _evaluation_env(exp, env, env_name, calls)
    backend = backend_for(exp.env).rllib_settings()
    calls["env_runners"].update(backend.get("env_runners", {}))
    calls["evaluation"]["evaluation_config"].update(backend.get("evaluation_config", {}))
    calls["callbacks"] = {"callbacks_class": WindowedEpisodeStats}
    _connector_calls(exp, config, calls)
    _initial_log_std(exp, env, calls, locate)
    _scaled_frames_module(exp, env, config, calls, locate)
    _simba_networks(exp, env, config, calls, locate)
    _memory_networks(exp, env, config, calls, locate)
    _exploration_bonus(exp, env, config, calls, locate)
    _hindsight_replay(exp, env, config, calls, locate)
    if env.multi_agent and not team:
        _multi_agent_calls(exp, env, config, calls, locate)
    _transition_replay(calls, env.multi_agent and not team, locate)
    if exp.offline is not None:
        calls["offline_data"]["input_"] = [str(data_path(Path(p))) for p in exp.offline.inputs()]
        _offline_data_defaults(calls["offline_data"])
    if not exp.stacked:  # a stack trains with its own learner
        _learner_class_calls(calls, exp.algorithm)
    for path, (section, keyword) in RESOURCE_KEYS.items():
        value = resource_value(exp, path)
        if value not in (None, {}):
            calls.setdefault(section, {})[keyword] = value
    calls["fault_tolerance"] = {**FAULT_TOLERANCE_DEFAULTS, **calls["fault_tolerance"]}
    _call_builders(config, calls, locate)
    if exp.stacked:
        evaluation_creator = None
        if any(
            wrapper.training_only for wrapper in resolve_chain(exp.env.wrappers, multi_agent=False)
        ):
            evaluation_creator = GuardedCreator(env_creator_for(exp, evaluation=True))
        config.stacked(
            seeds=exp.seed_list() or [],
            env_creator=GuardedCreator(creator),
            evaluation_env_creator=evaluation_creator,
        )
    if config.env_runner_cls is None and not config.output:  # RLlib records with its own
        config.env_runners(env_runner_cls=seeded_env_runner_class(config.is_multi_agent))
    if isinstance(config, OwnAlgorithmConfig):
        config.fit_to_env(env, PolicyMapping((exp.multi_agent or MultiAgentSpec()).policies))
    _check_something_samples(config, locate)
    try:
        config.validate()
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(
            f"{type(config).__name__}.validate() rejected the experiment's settings: {exc}",
            location=locate(""),
        ) from None
    return config


def _evaluation_env(
    exp: Experiment, env: EnvInfo, env_name: str, calls: dict[str, dict[str, Any]]
) -> None:
    """Evaluation plays the env without its training-only wrappers (an episodic life, clipped
    rewards: Atari's), so its episodes are whole games scored as the game scores them."""
    chain = resolve_chain(exp.env.wrappers, multi_agent=env.multi_agent)
    if not any(wrapper.training_only for wrapper in chain):
        return
    name = f"{env_name}/evaluation"
    register_env(name, GuardedCreator(env_creator_for(exp, evaluation=True)))
    calls["evaluation"]["evaluation_config"]["env"] = name


def _connector_calls(
    exp: Experiment, config: AlgorithmConfig, calls: dict[str, dict[str, Any]]
) -> None:
    """The experiment's ``connectors:`` as RLlib's env-to-module and learner connectors; a
    learner with learner pieces keeps their state in its checkpoints."""
    if not exp.connectors:
        return
    calls["env_runners"]["env_to_module_connector"] = ConnectorFactory(
        exp.connectors, "env_to_module"
    )
    training = {"gamma": config.gamma, **calls["training"]}
    learner_side = ConnectorFactory(exp.connectors, "learner", training)
    if learner_side.pieces():
        calls["learners"]["learner_connector"] = learner_side


def _initial_log_std(
    exp: Experiment, env: EnvInfo, calls: dict[str, dict[str, Any]], locate: Callable[[str], str]
) -> None:
    """``rl_module.model_config.log_std_init``: single-agent PPO's module with that start."""
    model_config = calls["rl_module"].get("model_config") or {}
    if LOG_STD_INIT not in model_config:
        return
    key = f"rl_module.model_config.{LOG_STD_INIT}"
    supported = algorithm_record(exp.algorithm).initial_log_std
    if not supported or env.multi_agent:
        names = " or ".join(names_where("initial_log_std"))
        raise ConfigError(
            f"{LOG_STD_INIT} (the initial log std of the action distribution) applies to "
            f"single-agent {names}, not {exp.algorithm}"
            + (" on a multi-agent env." if supported else "."),
            location=locate(key),
            key=key,
        )
    if not model_config.get("free_log_std"):
        raise ConfigError(
            f"{LOG_STD_INIT} starts a state-independent log std: set "
            "rl_module.model_config.free_log_std: true beside it.",
            location=locate(key),
            key=key,
        )
    value = model_config[LOG_STD_INIT]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(
            f"{LOG_STD_INIT} is a number (RL Zoo's MuJoCo settings use -2), got {value!r}.",
            location=locate(key),
            key=key,
        )
    calls["rl_module"]["rl_module_spec"] = RLModuleSpec(module_class=InitialLogStdPPOModule)


def _simba_networks(
    exp: Experiment,
    env: EnvInfo,
    config: AlgorithmConfig,
    calls: dict[str, dict[str, Any]],
    locate: Callable[[str], str],
) -> None:
    """``rl_module.model_config.simba``: SimBa's residual encoders, checked here; RLlib's modules
    get them from their catalog (``SIMBA_CATALOGS``); rlplat's own modules read the
    setting."""
    model_config = calls["rl_module"].get("model_config") or {}
    if SIMBA not in model_config:
        return
    key = f"rl_module.model_config.{SIMBA}"

    def refuse(message: str) -> None:
        raise ConfigError(message, location=locate(key), key=key)

    takers = names_where("simba")
    if exp.algorithm not in takers:
        refuse(
            f"{SIMBA} (SimBa's residual encoder) applies to {', '.join(takers)}, "
            f"not {exp.algorithm}."
        )
    if model_config.get("use_lstm"):
        refuse(
            f"{SIMBA} replaces RLlib's encoder, the LSTM of use_lstm included: the run would "
            "train without memory. Choose one: SimBa's residual encoder (remove use_lstm), or "
            f"the LSTM (remove {SIMBA})."
        )
    value = model_config[SIMBA]
    allowed = {f.name for f in fields(SimbaSettings)}
    if not isinstance(value, dict):
        refuse(f"{SIMBA} is a mapping such as {{width: 256, blocks: 2}}, got {value!r}.")
    for name, setting in value.items():
        if name not in allowed:
            refuse(f"{SIMBA} has no setting {name!r}." + not_among(name, sorted(allowed)))
        minimum = 1 if name == "width" else 0
        if isinstance(setting, bool) or not isinstance(setting, int) or setting < minimum:
            refuse(f"{SIMBA}.{name} is a whole number of at least {minimum}, got {setting!r}.")
    if env.multi_agent or not (
        isinstance(env.observation_space, gym.spaces.Box) and len(env.observation_space.shape) == 1
    ):
        refuse(
            f"{SIMBA} encodes a single agent's flat (1-D Box) observations; "
            f"{exp.env.label!r} observes {env.observation_space}."
        )
    if "mean_std_filter" not in [entry_parts(entry)[0] for entry in exp.connectors]:
        refuse(
            f"SimBa normalises observations by their running statistics: add "
            f"'connectors: [mean_std_filter]' beside {key}."
        )
    _use_catalogs(calls, config, SIMBA_CATALOGS)


MAX_MEMORY_SETTING = {"size": MAX_LSTM_CELLS, "steps": 2**12, "heads": 64, "layers": 16}


def _memory_networks(
    exp: Experiment,
    env: EnvInfo,
    config: AlgorithmConfig,
    calls: dict[str, dict[str, Any]],
    locate: Callable[[str], str],
) -> None:
    """``rl_module.model_config.memory``: rlplat's GRU or attention memory
    (``rlplat.algorithms.memory``), checked here; RLlib's PPO modules get it from their catalog
    (``MEMORY_CATALOGS``)."""
    model_config = calls["rl_module"].get("model_config") or {}
    if MEMORY not in model_config:
        return
    key = f"rl_module.model_config.{MEMORY}"

    def refuse(message: str) -> None:
        raise ConfigError(message, location=locate(key), key=key)

    value = model_config[MEMORY]
    example = "{type: gru, size: 64} or {type: attention, size: 64, steps: 16}"
    if not isinstance(value, dict) or "type" not in value:
        refuse(f"{MEMORY} is a mapping such as {example}, got {value!r}.")
    kind = value["type"]
    if kind not in MEMORY_TYPES:
        refuse(
            f"{MEMORY}.type is one of {', '.join(MEMORY_TYPES)} (RLlib's LSTM is use_lstm: "
            f"true), got {kind!r}." + did_you_mean(str(kind), list(MEMORY_TYPES))
        )
    allowed = [f.name for f in fields(MemorySettings) if f.name != "type"]
    for name, setting in value.items():
        if name == "type":
            continue
        if name not in allowed:
            refuse(f"{MEMORY} has no setting {name!r}." + not_among(name, allowed))
        if kind != ATTENTION and name in ATTENTION_ONLY:
            refuse(
                f"{MEMORY}.{name} is a setting of the attention memory; a {kind} memory takes "
                "only size (and max_seq_len, the length of its training sequences)."
            )
        most = MAX_MEMORY_SETTING[name]
        if isinstance(setting, bool) or not isinstance(setting, int) or not 0 < setting <= most:
            refuse(f"{MEMORY}.{name} is a whole number from 1 to {most:,}, got {setting!r}.")
    settings = MemorySettings(**value)
    if kind == ATTENTION and settings.size % settings.heads:
        refuse(
            f"{MEMORY}.size ({settings.size}) is split evenly among the attention's heads "
            f"({settings.heads}): choose a size that {settings.heads} divides."
        )
    if model_config.get("use_lstm"):
        refuse(
            f"{MEMORY} replaces RLlib's LSTM (use_lstm): a module has one memory. Choose "
            f"one: remove use_lstm, or remove {MEMORY}."
        )
    if SIMBA in model_config:
        refuse(f"{MEMORY} and {SIMBA} are both encoders of the observation: choose one.")
    if env.multi_agent:
        refuse(
            f"{MEMORY} applies to single-agent runs so far; a multi-agent run can use RLlib's "
            "LSTM (use_lstm: true)."
        )
    module_class, catalog = _use_catalogs(calls, config, MEMORY_CATALOGS)
    if catalog not in MEMORY_CATALOGS:
        refuse(
            f"{MEMORY} needs RLlib's PPO catalog to build the module's encoder; this run's "
            f"module ({module_class.__name__}) builds from "
            f"{getattr(catalog, '__name__', 'no catalog')}."
        )


def _exploration_bonus(
    exp: Experiment,
    env: EnvInfo,
    config: AlgorithmConfig,
    calls: dict[str, dict[str, Any]],
    locate: Callable[[str], str],
) -> None:
    """``exploration.rnd``: PPO's module and learner with Random Network Distillation
    (``rlplat.algorithms.rnd``), its settings in the module's model config."""
    spec = exp.exploration.rnd
    if spec is None:
        return
    key = "exploration.rnd"

    def refuse(message: str) -> None:
        raise ConfigError(message, location=locate(key), key=key)

    if not algorithm_record(exp.algorithm).rnd:
        refuse(
            f"{key} (Random Network Distillation) trains with "
            f"{' or '.join(names_where('rnd'))}, not {exp.algorithm}: its intrinsic value head "
            "and second GAE are written into PPO's learner (APPO's and IMPALA's V-trace "
            "corrects off-policy rows inside the loss, where RND's rewards would need a "
            "second correction)."
        )
    if env.multi_agent:
        refuse(f"{key} applies to single-agent runs so far; this env is multi-agent.")
    space = env.observation_space
    if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
        refuse(
            f"{key}'s networks read flat vector observations (a 1-D Box); this env observes "
            f"{space}. Flatten them in a wrapper (e.g. gymnasium.wrappers.FlattenObservation); "
            "images would need RND's convolutional networks, which rlplat does not have yet."
        )
    model_config = calls["rl_module"].get("model_config") or {}
    if model_config.get("use_lstm") or MEMORY in model_config:
        refuse(
            f"{key} trains feed-forward modules; remove use_lstm or memory from "
            "rl_module.model_config, or train without RND."
        )
    if calls["training"].get("learner_class"):
        refuse(
            f"{key} trains with rlplat's RND learner; training.learner_class names another. "
            "Remove one of them."
        )
    spec_before = calls["rl_module"].get("rl_module_spec") or config.get_default_rl_module_spec()
    calls["rl_module"]["rl_module_spec"] = RLModuleSpec(
        module_class=RndPPOModule, catalog_class=spec_before.catalog_class
    )
    settings = RndSettings(**{**spec.model_dump(), "hiddens": tuple(spec.hiddens)})
    calls["rl_module"]["model_config"] = {**model_config, RND: settings.as_model_config()}
    calls["training"]["learner_class"] = RndPPOLearner


def _hindsight_replay(
    exp: Experiment,
    env: EnvInfo,
    config: AlgorithmConfig,
    calls: dict[str, dict[str, Any]],
    locate: Callable[[str], str],
) -> None:
    """``replay.her``: the run's transitions are drawn from rlplat's ``HindsightMemory``, which
    each trial makes (``rlplat.run.trainable``); here, everything that memory needs."""
    if exp.replay.her is None:
        return
    key = "replay.her"

    def refuse(message: str, where: str = key) -> None:
        raise ConfigError(message, location=locate(where), key=where)

    if not algorithm_record(exp.algorithm).hindsight:
        refuse(
            f"{key} relabels the transitions of rlplat's transition memory, which "
            f"{', '.join(names_where('hindsight'))} replay from; {exp.algorithm} does not."
        )
    if exp.connectors:
        refuse(
            f"{key} puts the env's goals into stored observations; connectors "
            f"({', '.join(entry_parts(c)[0] for c in exp.connectors)}) change what is stored. "
            "Train without them (a goal env's observations are usually small and bounded).",
            "connectors",
        )
    if env.goals is None:
        refuse(
            f"{key} relabels goals with the env's own compute_reward; {exp.env.label!r} is no "
            f"goal env: {env.goal_problem}. A goal env observes a Dict of observation, "
            "achieved_goal and desired_goal and has compute_reward(achieved_goal, desired_goal, "
            "info), as Gymnasium-Robotics' envs do."
        )
    buffer = exp.training.get("replay_buffer_config") or {}
    if not transition_sampler_requested(buffer):
        refuse(
            f"{key} draws from rlplat's transition memory: training.replay_buffer_config.type "
            f"is {TRANSITION_SAMPLER} (the default), not {buffer.get('type')!r}.",
            "training.replay_buffer_config.type",
        )
    n_step = calls["training"].get("n_step", config.n_step)
    if n_step != 1:
        refuse(
            f"{key} replays one-step transitions: an n-step return would need each of its "
            f"rewards recomputed for the new goal. Set training.n_step to 1 (it is {n_step!r}).",
            "training.n_step",
        )
    model_config = calls["rl_module"].get("model_config") or {}
    if model_config.get("use_lstm") or MEMORY in model_config:
        refuse(f"{key} replays single transitions; remove the module's memory (use_lstm, memory).")
    if exp.replay.her.normalize:
        spec = calls["rl_module"].get("rl_module_spec") or config.get_default_rl_module_spec()
        if not getattr(spec.module_class, "TAKES_OBSERVATION_NORM", False):
            refuse(
                f"{key}.normalize normalises observations inside SAC's module; "
                f"{exp.algorithm}'s {spec.module_class.__name__} has no such input. "
                + (
                    "CrossQ's batch renormalisation of its input already normalises them. "
                    if exp.algorithm == "CrossQ"
                    else ""
                )
                + f"Remove {key}.normalize or train SAC.",
                f"{key}.normalize",
            )
        calls["rl_module"]["model_config"] = {**model_config, OBSERVATION_NORM: {"clip": 10.0}}


def _use_catalogs(
    calls: dict[str, dict[str, Any]], config: AlgorithmConfig, catalogs: dict[type, type]
) -> tuple[type, type | None]:
    """The run's module builds from its catalog's counterpart in ``catalogs`` (SimBa's, the
    memories'), where it has one; the module class and the catalog it built from before."""
    spec = calls["rl_module"].get("rl_module_spec") or config.get_default_rl_module_spec()
    catalog = spec.catalog_class or default_catalog(spec.module_class)
    if catalog in catalogs:
        calls["rl_module"]["rl_module_spec"] = RLModuleSpec(
            module_class=spec.module_class, catalog_class=catalogs[catalog]
        )
    return spec.module_class, catalog


def _single_agent_images(env: EnvInfo) -> bool:
    return not env.multi_agent and is_image(env.observation_space)


def _scaled_frames_module(
    exp: Experiment,
    env: EnvInfo,
    config: AlgorithmConfig,
    calls: dict[str, dict[str, Any]],
    locate: Callable[[str], str],
) -> None:
    """Single-agent uint8 frames: the algorithm's default module that scales them to [0, 1]."""
    if not _single_agent_images(env) or env.observation_space.dtype != np.uint8:
        return
    default = config.get_default_rl_module_spec().module_class
    if getattr(default, "SCALES_UINT8_FRAMES", False):  # the module scales them itself
        return
    scaled = SCALED_FRAMES_MODULES.get(default)
    if scaled is None:
        supported = sorted(cls.__name__ for cls in SCALED_FRAMES_MODULES)
        raise ConfigError(
            f"{exp.env.label!r} observes uint8 images {env.observation_space.shape}, which "
            f"rlplat scales to [0, 1] in RLlib's default modules ({', '.join(supported)}), not "
            f"in {exp.algorithm}'s {default.__name__}. Convert them to float32 in a wrapper "
            "instead (e.g. AtariPreprocessing's scale_obs: true).",
            location=locate("env"),
            key="env",
        )
    calls["rl_module"]["rl_module_spec"] = RLModuleSpec(module_class=scaled)


def _learner_class_calls(calls: dict[str, dict[str, Any]], algorithm: str) -> None:
    """An algorithm RLlib ships trains with the learner its record names (RLlib's on rlplat's
    ``RlplatLearner``); rlplat's own configs give theirs."""
    if algorithm_record(algorithm).learner and not calls["training"].get("learner_class"):
        calls["training"]["learner_class"] = learner_class_for(algorithm)


def learner_class_for(algorithm: str) -> type:
    """The learner ``algorithm`` trains with: the one its record names (RLlib's learner on
    rlplat's ``RlplatLearner``), else its config's default (rlplat's own algorithms)."""
    record = algorithm_record(algorithm)
    if record.learner:
        return import_object(record.learner)
    return get_algorithm_class(algorithm).get_default_config().get_default_learner_class()


def _call_builders(
    config: AlgorithmConfig, calls: dict[str, dict[str, Any]], locate: Callable[[str], str]
) -> None:
    """``config.<section>(**kwargs)`` for each section; what RLlib rejects is a ConfigError."""
    for section, kwargs in calls.items():
        if not kwargs:
            continue
        try:
            getattr(config, section)(**kwargs)
        except Exception as exc:  # noqa: BLE001 - RLlib raises ValueError, TypeError, ...
            raise ConfigError(
                f"RLlib rejected the '{section}' settings: {exc}",
                location=locate(section),
                key=section,
            ) from None


def _check_something_samples(config: AlgorithmConfig, locate: Callable[[str], str]) -> None:
    if config.num_env_runners == 0 and not config.create_local_env_runner:
        raise ConfigError(
            "nothing would sample: resources.env_runners.count is 0 and create_local_env_runner "
            "is false. Either sample in the algorithm's process (create_local_env_runner: true, "
            "the default) or give resources.env_runners.count >= 1.",
            location=locate("env_runners.create_local_env_runner"),
            key="env_runners.create_local_env_runner",
        )


def _transition_replay(
    calls: dict[str, dict[str, Any]], multi_agent: bool, locate: Callable[[str], str]
) -> None:
    """``replay_buffer_config.type: TransitionEpisodeReplayBuffer``: RLlib's validation accepts
    only its own buffer names, so the config names RLlib's EpisodeReplayBuffer and the trial
    builds rlplat's sampler in its place (``rlplat.run.trainable``). Single-agent only: RLlib's
    multi-agent buffers sample per agent through their own episode types."""
    buffer = calls["training"].get("replay_buffer_config") or {}
    if not transition_sampler_requested(buffer):
        return
    if multi_agent:
        raise ConfigError(
            f"{TRANSITION_SAMPLER} samples single-agent episodes; for a multi-agent env use "
            "EpisodeReplayBuffer (rlplat turns it into RLlib's MultiAgentEpisodeReplayBuffer).",
            location=locate("training.replay_buffer_config.type"),
            key="training.replay_buffer_config.type",
        )
    calls["training"]["replay_buffer_config"] = {**buffer, "type": "EpisodeReplayBuffer"}


def team_state_source(exp: Experiment, locate: Callable[[str], str]) -> str:
    """Build the team view of the env once (QMIX); the global state it resolved to
    (``training.global_state``: the env's ``state()`` or the agents' observations)."""
    try:
        team_env = env_creator_for(exp)()
    except TeamEnvError as exc:
        raise ConfigError(
            f"{exp.algorithm} cannot play {exp.env.label!r} as one team: {exc}.",
            location=locate(exc.key),
            key=exc.key,
        ) from None
    team_env.close()
    return team_env.state_source


def _multi_agent_calls(
    exp: Experiment,
    env: EnvInfo,
    config: AlgorithmConfig,
    calls: dict[str, dict[str, Any]],
    locate: Callable[[str], str],
) -> None:
    """Policies, mapping, trained policies, per-policy overrides, module classes, and the
    multi-agent variant of an off-policy algorithm's episode replay buffer."""
    spec = exp.multi_agent or MultiAgentSpec()
    setup = check_multi_agent(spec, env, list(builder_parameters(type(config), "training")), locate)
    needs_own_modules = [p for p in setup.policies if p in setup.random or p in setup.masked]
    for what, policies, trait in (
        ("random policies", setup.random, "random_policies"),
        ("action masks (Dict observations)", setup.masked, "masked_module"),
    ):
        algorithms = names_where(trait)
        if policies and exp.algorithm not in algorithms:
            raise ConfigError(
                f"{what} are supported with {', '.join(algorithms)}; "
                f"{exp.algorithm} would ignore them.",
                location=locate("algorithm"),
                key="algorithm",
            )
    calls["multi_agent"] = {
        "policies": set(setup.policies),
        "policy_mapping_fn": setup.mapping,
        "policies_to_train": setup.trained,
    }
    if spec.self_play is not None:
        calls["multi_agent"].update(self_play_calls(spec, setup, env.random_rewards, locate))
    if spec.overrides:
        calls["rl_module"]["algorithm_config_overrides_per_module"] = dict(spec.overrides)
    # RLlib's single-agent episode buffers (DQN's and SAC's defaults) cannot store
    # multi-agent episodes; each has a multi-agent twin taking the same settings.
    buffer = dict(getattr(config, "replay_buffer_config", None) or {})
    buffer.update(calls["training"].get("replay_buffer_config") or {})
    kind = buffer.get("type")
    if kind in ("EpisodeReplayBuffer", "PrioritizedEpisodeReplayBuffer"):
        calls["training"]["replay_buffer_config"] = {**buffer, "type": f"MultiAgent{kind}"}
    if needs_own_modules:
        # Every policy is listed: RLlib's env-to-module pipeline knows only the listed ones.
        specs = {policy: config.get_default_rl_module_spec() for policy in setup.policies}
        for policy in needs_own_modules:
            own = (
                UniformRandomModule
                if policy in setup.random
                else import_object(algorithm_record(exp.algorithm).masked_module)
            )
            specs[policy] = RLModuleSpec(module_class=own)
        calls["rl_module"]["rl_module_spec"] = MultiRLModuleSpec(rl_module_specs=specs)


def resource_value(exp: Experiment, path: str) -> Any:
    """The value at ``resources.<path>`` of an experiment."""
    value: Any = exp.resources
    for part in path.split("."):
        value = getattr(value, part)
    return value


def effective_settings(config: AlgorithmConfig) -> dict[str, Any]:
    """The resources and fault_tolerance sections as RLlib will use them (defaults filled in),
    as a nested update for the experiment's data."""
    resources: dict[str, Any] = {}
    for path, (_, keyword) in RESOURCE_KEYS.items():
        *groups, field = path.split(".")
        target = resources
        for group in groups:
            target = target.setdefault(group, {})
        value = getattr(config, keyword)
        target[field] = dict(value) if isinstance(value, dict) else value
    fault_tolerance = {key: getattr(config, key) for key in FAULT_TOLERANCE_KEYS}
    return {"resources": resources, "fault_tolerance": fault_tolerance}
