"""The probe stage: the run's RLModule built on the env's real spaces, a few env steps sampled
through it and one loss computed, in this process, before Ray starts.

Building the RLlib config checks its keys; only building the module and its learner shows
whether RLlib can encode the env's observations (images, 2D Box, Tuple), act in its action
space, and compute the algorithm's loss on what the env returns. The probe uses the trial's own
config (connectors, module classes, env runner class) with one local env runner and a local
learner, and throws both away afterwards.
"""

from __future__ import annotations

import math
import re
import traceback
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.learner import Learner
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.offline.offline_prelearner import OfflinePreLearner
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils import unflatten_dict

from rlplat.algorithms.probe import update_inputs
from rlplat.algorithms.registry import get_algorithm_class
from rlplat.datasets.dataset import first_rows
from rlplat.environments.array_runner import sampling_loop
from rlplat.environments.make import EnvInfo
from rlplat.environments.seeding import runner_seeds
from rlplat.errors import ConfigError
from rlplat.experiment.load import Locator
from rlplat.experiment.schema import Experiment
from rlplat.seams.rllib_runner import set_reset_seed
from rlplat.util.generators import GeneratorStates, swapped

PROBE_ENV_STEPS = 32


@dataclass(frozen=True)
class ProbeResult:
    """What the probe saw: env steps sampled and the losses of its one update, by module."""

    env_steps: int
    losses: dict[str, float]
    # Result paths the probe's env runner and learner reported (``env_runners/...``,
    # ``learners/<module>/...``): what the trial's results will carry too.
    metric_paths: frozenset[str] = frozenset()
    dataset_rows: int = 0  # an offline run's update: rows of its dataset, no env steps
    sampling: str = ""  # the loop the trial's env runners sample with (``sampling_loop``)

    def describe(self) -> str:
        losses = ", ".join(f"{module} {value:.4g}" for module, value in self.losses.items())
        if self.dataset_rows:
            return (
                f"the RLModule built and trained once on the dataset's first {self.dataset_rows} "
                f"rows (loss: {losses})"
            )
        return (
            f"the RLModule built and trained once ({self.env_steps} env steps sampled, one "
            f"update computed (loss: {losses}))"
        )


def probe_training(
    experiment: Experiment, algo_config: AlgorithmConfig, env: EnvInfo, locate: Locator
) -> ProbeResult:
    """Sample ``PROBE_ENV_STEPS`` env steps with the run's module and compute one update on them;
    what RLlib raises is one paragraph naming the key to change. ``env.check: false`` does not skip
    it: only the probe shows that the module takes what the env returns."""
    if experiment.offline is not None:
        return _probe_offline(experiment, algo_config, env, locate)
    config = _local(algo_config)
    stage = "building the RLModule or sampling with it"
    runner = learner = None
    try:
        with _own_generators(algo_config.seed):
            runner = _runner_class(config)(config=config)
            # The seed the trial's first env gets (a C++ env may refuse some seeds).
            seed = algo_config.seed
            set_reset_seed(runner, None if seed is None else runner_seeds(seed, 0, False, 1)[1])
            episodes = _sample(runner, config)
            stage = "computing one loss"
            learner = config.build_learner(spaces=runner.get_spaces())
            inputs = update_inputs(get_algorithm_class(experiment.algorithm), config, episodes)
            # Learner.update itself: IMPALA's and APPO's override hands batches to a thread.
            results = Learner.update(
                learner, **inputs, timesteps=_timesteps(episodes), num_epochs=1
            )
            runner_metrics = runner.get_metrics()
            sampling = sampling_loop(runner)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever RLlib raises is the experiment's problem
        raise _probe_error(experiment, stage, exc, locate) from None
    finally:
        _stop(runner, learner)
    steps = sum(len(episode) for episode in episodes)
    paths = {f"env_runners/{p}" for p in _paths(runner_metrics)}
    paths.update(f"learners/{p}" for p in _paths(results))
    return ProbeResult(steps, _losses(results), frozenset(paths), sampling=sampling)


def _stop(runner: Any, learner: Learner | None) -> None:
    """Stop what the probe built, also when it failed: IMPALA's and APPO's learner starts a
    thread that polls its empty queue 10,000 times a second until ``shutdown``, which would take
    a share of a core from the training that follows in the same process."""
    for stop in (learner and learner.shutdown, runner and runner.stop):
        try:
            if stop:
                stop()
        except Exception:  # noqa: BLE001, S112 - a probe that failed may fail to stop: it is done
            continue


def _own_generators(seed: int | None) -> AbstractContextManager[GeneratorStates]:
    """``random``, numpy and torch seeded for the probe and restored after it. The probe's config
    carries no seed: RLlib's own seeding also switches torch to deterministic algorithms, which
    imports torch's compiler (~1.6 s) into a process that trains nothing."""
    return swapped(GeneratorStates.seeded(seed))


def _paths(tree: dict[str, Any], prefix: str = "") -> list[str]:
    """The slash-joined paths of a nested dict's leaves."""
    paths = []
    for key, value in tree.items():
        if isinstance(value, dict):
            paths += _paths(value, f"{prefix}{key}/")
        else:
            paths.append(f"{prefix}{key}")
    return paths


def _local(algo_config: AlgorithmConfig) -> AlgorithmConfig:
    """The trial's config with one env runner in this process, one env, no evaluation."""
    config = algo_config.copy(copy_frozen=False)
    config.env_runners(
        num_env_runners=0,
        num_envs_per_env_runner=1,
        rollout_fragment_length=PROBE_ENV_STEPS,
        gym_env_vectorize_mode="sync",
    )
    config.evaluation(evaluation_interval=None)
    config.learners(num_learners=0, num_gpus_per_learner=0)
    config.debugging(seed=None)  # seeded by _own_generators
    return config


def _runner_class(config: AlgorithmConfig) -> type:
    """The trial's env runner class; RLlib's default where the config names none (a run that
    records its own output)."""
    if config.env_runner_cls is not None:
        return config.env_runner_cls
    return MultiAgentEnvRunner if config.is_multi_agent else SingleAgentEnvRunner


def _sample(runner: Any, config: AlgorithmConfig) -> list[Any]:
    """A few env steps, or one whole episode for an algorithm that learns from whole ones."""
    if config.batch_mode == "complete_episodes":
        return runner.sample(num_episodes=1, random_actions=False)
    return runner.sample(num_timesteps=PROBE_ENV_STEPS, random_actions=False)


def _timesteps(episodes: list[Any]) -> dict[str, Any]:
    return {"num_env_steps_sampled_lifetime": sum(len(e) for e in episodes)}


def _losses(results: dict[str, Any]) -> dict[str, float]:
    """Each module's total loss (or its losses' sum) from a learner's results."""
    losses: dict[str, float] = {}
    for module, values in results.items():
        if not isinstance(values, dict) or module.startswith("__"):
            continue
        found = [_value(v) for k, v in values.items() if k == "total_loss" or k.endswith("_loss")]
        found = [v for v in found if v is not None]
        if found:
            total = values.get("total_loss")
            losses[module] = _value(total) if total is not None else sum(found)
    return losses


def _value(stat: Any) -> float | None:
    value = stat.peek() if hasattr(stat, "peek") else stat
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _probe_offline(
    experiment: Experiment, algo_config: AlgorithmConfig, env: EnvInfo, locate: Locator
) -> ProbeResult:
    """Offline algorithms learn from a dataset: the probe builds their learner on the env's
    spaces and computes one update on the first dataset's first ``PROBE_ENV_STEPS`` rows,
    through RLlib's own offline pre-learner (the dataset's columns were checked before)."""
    config = _local(algo_config)
    spaces = (env.observation_space, env.action_space)
    multi_spec = config.get_multi_rl_module_spec(spaces={DEFAULT_MODULE_ID: spaces})
    config.rl_module(rl_module_spec=multi_spec)
    inputs = experiment.offline.input  # type: ignore[union-attr] - offline runs only
    dataset = Path(inputs if isinstance(inputs, str) else inputs[0])
    stage = "building the learner"
    learner = None
    try:
        with _own_generators(algo_config.seed):
            learner = config.build_learner(spaces={DEFAULT_MODULE_ID: spaces})
            stage = f"computing one loss on {dataset.name}'s first rows"
            rows = first_rows(dataset, PROBE_ENV_STEPS)
            columns = OfflinePreLearner(config=config, spaces=spaces)(rows)
            batch = MultiAgentBatch(
                {
                    module: SampleBatch(module_columns)
                    for module, module_columns in unflatten_dict(columns).items()
                },
                env_steps=len(rows["t"]),
            )
            results = Learner.update(learner, batch=batch, timesteps=_timesteps([]), num_epochs=1)
    except Exception as exc:  # noqa: BLE001
        raise _probe_error(experiment, stage, exc, locate) from None
    finally:
        _stop(None, learner)
    paths = frozenset(f"learners/{p}" for p in _paths(results))
    return ProbeResult(0, _losses(results), paths, dataset_rows=len(rows["t"]))


# What RLlib says when its default encoders cannot take an observation space, and the fix.
_ENCODER_FAILURES = (
    r"No default CNN configuration",
    r"2D Box spaces are not supported",
    r"No default encoder config",
    r"not supported.*observation",
)


def _probe_error(
    experiment: Experiment, stage: str, exc: Exception, locate: Locator
) -> ConfigError:
    text = _described(exc)
    if any(re.search(pattern, str(exc)) for pattern in _ENCODER_FAILURES):
        fix = (
            "RLlib's default encoders take 1D Box observations and images they have a CNN "
            "for. Flatten the observations (env.wrappers: [FlattenObservation]; PettingZoo: "
            "[flatten_v0]) or give rl_module.model_config.conv_filters for the image, e.g. "
            "[[16, [3, 3], 1, same], [32, [3, 3], 1, same]] for small frames "
            "(docs/environments.md)."
        )
        return ConfigError(
            f"RLlib cannot build a model for {experiment.env.label!r}'s observations ({text}). "
            + fix,
            location=locate("rl_module"),
            key="rl_module.model_config",
        )
    model_config = experiment.rl_module.get("model_config") or {}
    filled = experiment.defaults  # rlplat's own defaults are not the experiment's to blame
    own = [
        key
        for key in MODEL_KEYS
        if key in model_config and f"rl_module.model_config.{key}" not in filled
    ]
    hint = (
        f" The experiment's own {', '.join(f'rl_module.model_config.{k}' for k in own)} may not "
        "fit the env's observations (a convolution larger than the frame, say)."
        if own and stage.startswith("building")
        else ""
    )
    key = f"rl_module.model_config.{own[0]}" if hint else None
    return ConfigError(
        f"{experiment.algorithm} on {experiment.env.label!r} failed while {stage} on "
        f"{PROBE_ENV_STEPS} env steps (the check that the run can train, before Ray starts): "
        f"{text}.{hint} rlplat train --debug shows RLlib's traceback.",
        location=locate(key or ""),
        key=key,
    )


# Model settings that depend on the observations' shape.
MODEL_KEYS = ("conv_filters", "fcnet_hiddens", "head_fcnet_hiddens", "encoder_latent_dim")


def _described(exc: Exception) -> str:
    """The exception's type and first line; for a bare assert, the failing line of code."""
    message = str(exc).strip()
    if message:
        return f"{type(exc).__name__}: {message.splitlines()[0]}"
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return type(exc).__name__
    last = frames[-1]
    where = f"{Path(last.filename).name}:{last.lineno}"
    return f"{type(exc).__name__} in {last.name} ({where}): {last.line or 'no message'}"
