"""What a trial adds to its RLlib algorithm: ``ExperimentTrial``, an algorithm built from the
experiment Tune (or rlplat's loop) resolved for the trial.

Tune hands each trial its ``config``: here, the experiment itself (as in ``experiment.yaml``) with
concrete values where the file had search spaces. The trainable validates and builds the RLlib
config from it exactly as ``rlplat train`` does for a file, so a searched env kwarg, seed or
per-policy override takes effect like any other key, and PBT's mutated configs too. Each
algorithm's trial class (``PPOTrial``: ``ExperimentTrial`` and ``PPO``) is written in
``rlplat.run.trials``.
"""

from __future__ import annotations

import math
import re
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray.data import DataContext
from ray.rllib.core import COMPONENT_ENV_TO_MODULE_CONNECTOR, COMPONENT_MODULE_TO_ENV_CONNECTOR
from ray.tune.result import TIME_TOTAL_S
from ray.util.annotations import RayDeprecationWarning
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlplat.algorithms.hindsight import HindsightMemory, HindsightSettings
from rlplat.algorithms.registry import algorithm_record
from rlplat.algorithms.replay import TransitionEpisodeReplayBuffer, transition_sampler_requested
from rlplat.algorithms.shared_weights import share_learner_weights
from rlplat.checkpoints import (
    REPLAY_STATE,
    RESOLVED_EXPERIMENT,
    GreedyEvaluation,
    checkpoint_info_from_result,
)
from rlplat.cluster.connect import env_runner_restarts
from rlplat.environments.goals import GoalFunctions, goal_parts
from rlplat.environments.guard import take_reported_failure
from rlplat.errors import EnvKeepsFailing, RlplatError
from rlplat.experiment.load import trial_experiment
from rlplat.experiment.schema import CheckpointSpec, Experiment, StopSpec, score_metric
from rlplat.experiment.yaml_io import dump_yaml
from rlplat.metrics import (
    ENV_STEPS,
    ENV_STEPS_TRAINED,
    EVALUATION_SECONDS,
    REPLAY_STEPS,
    RESTORED_REPLAY_STEPS,
    RUNNER_RESTARTS,
    TIME_BUDGET_ENDED,
    finite,
    lookup,
)
from rlplat.prepare import trial_algorithm_config
from rlplat.rllib.env_creator import env_creator_for
from rlplat.rllib.episode_stats import episode_window
from rlplat.rllib.league import SELF_PLAY_STATE
from rlplat.rllib.self_play import self_play_driver
from rlplat.run.finetune import start_from_checkpoint
from rlplat.seams.ray_internals import env_runner_actor_ids
from rlplat.seams.rllib_algorithm import AlgorithmHooks
from rlplat.seams.tune import trial_storage_path
from rlplat.util.atomic import write_atomic
from rlplat.util.streams import stderr_without

CONNECTOR_COMPONENTS = [COMPONENT_ENV_TO_MODULE_CONNECTOR, COMPONENT_MODULE_TO_ENV_CONNECTOR]


# Ray's core worker logs an error for every restartable actor whose constructor arguments are
# object references (RLlib hands its env runners the config that way); nothing has failed.
RAY_RESTART_ARGUMENTS_WARNING = re.compile(
    r"core_worker\.cc.*constructor arguments in the object store and max_restarts > 0"
)


def algorithm_config(config: Any) -> Any:
    """The RLlib ``AlgorithmConfig`` for a trial's experiment dict (anything else unchanged)."""
    if not (isinstance(config, dict) and "algorithm" in config and "env" in config):
        return config
    return trial_algorithm_config(config)


WINDOW_STATE = "rlplat_episode_window"


def replay_memory(algo: Any) -> Any | None:
    """The algorithm's replay memory, where its registration says it keeps one; None for
    on-policy and offline algorithms (an offline one may inherit an unused buffer)."""
    attribute = algorithm_record(algo.registered_name).replay_memory
    if algo.config.is_offline or attribute is None:
        return None
    return getattr(algo, attribute, None)


def _hindsight(experiment: dict[str, Any]) -> dict[str, Any] | None:
    """The experiment's ``replay.her`` settings (None: no hindsight relabelling)."""
    return (experiment.get("replay") or {}).get("her")


def _seeded(buffer: Any, seed: int | None) -> Any:
    """RLlib's episode buffers draw from an unseeded generator: the run's ``seed`` seeds it, so
    that a seeded DQN, SAC or TD3 run replays the same batches."""
    if buffer is not None and seed is not None and hasattr(buffer, "rng"):
        buffer.rng = np.random.default_rng(seed)
    return buffer


def keep_ray_data_in_the_trial() -> None:
    """Ray Data starts its tasks and actors with the SPREAD strategy, outside the trial's
    placement group, where Tune reserved nothing for them: a trial that fills the cluster (two
    CPUs here) waits forever. In the group they use the bundle rlplat adds for them
    (``rlplat.rllib.build.data_pipeline_cpus``). Parquet goes through Ray Data's first
    datasource, because the second lists files with footer-reading actors that always SPREAD."""
    context = DataContext.get_current()
    context.use_datasource_v2 = False
    group = ray.util.get_current_placement_group()
    if group is None:
        return
    strategy = PlacementGroupSchedulingStrategy(group, placement_group_capture_child_tasks=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RayDeprecationWarning)
        context.scheduling_strategy = strategy
        context.scheduling_strategy_large_args = strategy


class ExperimentTrial(AlgorithmHooks):
    """Mixed in before the algorithm class: turns the experiment dict into its RLlib config,
    and adds what RLlib's new-stack checkpoints leave out: rlplat's episode-return window and
    the replay memory (``checkpoint.replay_buffer``)."""

    registered_name: str  # the algorithm's registered name, given by each trial class
    # Set by rlplat's own loop (rlplat.run.loop), which runs the trainable without Tune: where
    # the trial's files go, and the training seconds of the sessions before a resume (Tune
    # restores those into the trainable itself).
    trial_dir: Path | None = None
    earlier_training_s: float = 0.0

    def __init__(self, config: Any = None, **kwargs: Any):
        experiment = config if isinstance(config, dict) else {}
        self._experiment = experiment
        self._checkpoint_spec = CheckpointSpec.model_validate(experiment.get("checkpoint", {}))
        stop = experiment.get("stop")
        self._stop = StopSpec.model_validate(stop) if stop else None
        self._restored_replay_steps: int | None = None
        self._evaluation_seconds = 0.0
        self._previous_result: dict[str, Any] = {}
        self._evaluation: GreedyEvaluation | None = None  # the latest one
        if experiment.get("offline"):
            keep_ray_data_in_the_trial()
        with stderr_without(RAY_RESTART_ARGUMENTS_WARNING):
            super().__init__(config=algorithm_config(config), **kwargs)
        self._self_play = self_play_driver(experiment)
        init = experiment.get("init") or {}
        if init.get("checkpoint"):
            # A resumed trial restores its own checkpoint afterwards, over these weights.
            start_from_checkpoint(self, init["checkpoint"], bool(init.get("optimizer")))
        if self._self_play is not None:
            self._self_play.start(self)
        if algorithm_record(self.registered_name).synchronous_learner:
            share_learner_weights(self)
        if _hindsight(experiment) and not isinstance(replay_memory(self), HindsightMemory):
            raise RlplatError(  # the checks before Ray refuse what would get here
                "replay.her: this run does not replay from rlplat's transition memory, so its "
                "transitions cannot be relabelled."
            )

    def create_replay_buffer(self, config: Any) -> Any | None:
        """RLlib's replay buffer, or rlplat's transition sampler where the experiment asks for
        it (the RLlib config names RLlib's EpisodeReplayBuffer: see rlplat.algorithms.replay;
        a run that replays transition batches swaps it for its ``TransitionMemory`` in
        ``TransitionBatchLoop.setup``)."""
        training = self._experiment.get("training") or {}
        buffer = config.get("replay_buffer_config")
        if not transition_sampler_requested(training.get("replay_buffer_config")):
            return _seeded(super().create_replay_buffer(config), config.seed)
        if not buffer or buffer.get("no_local_replay_buffer"):
            return None
        settings = {k: v for k, v in buffer.items() if k != "type"}
        settings["metrics_num_episodes_for_smoothing"] = config.metrics_num_episodes_for_smoothing
        return _seeded(TransitionEpisodeReplayBuffer(**settings), config.seed)

    def make_transition_memory(self, capacity: int) -> Any:
        """The transition memory of an algorithm on rlplat's transition loop: with
        ``replay.her``, a ``HindsightMemory`` over a goal env of the trial's own (its
        ``compute_reward`` relabels)."""
        her = _hindsight(self._experiment)
        if her is None:
            return super().make_transition_memory(capacity)
        experiment = Experiment.model_validate(trial_experiment(self._experiment))
        env = env_creator_for(experiment)({})
        layout, problem = goal_parts(env)
        if layout is None:
            raise RlplatError(f"replay.her: {experiment.env.label!r} is no goal env: {problem}.")
        settings = HindsightSettings(her["strategy"], her["goals_per_transition"])
        return HindsightMemory(capacity, self.config.seed, settings, layout, GoalFunctions.of(env))

    def get_state(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        state = super().get_state(*args, **kwargs)
        window = episode_window(self)
        if window is not None:
            state[WINDOW_STATE] = window.get_state()
        memory = replay_memory(self)
        # Only a full state (a checkpoint) carries the replay memory, never a partial one.
        full_state = kwargs.get("components") is None
        if memory is not None and self._checkpoint_spec.replay_buffer and full_state:
            state[REPLAY_STATE] = memory.get_state()
        if self._self_play is not None and full_state:
            state[SELF_PLAY_STATE] = self._self_play.get_state()
        if full_state:
            state[EVALUATION_SECONDS] = self._evaluation_seconds
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        window = episode_window(self)
        if window is not None and WINDOW_STATE in state:
            window.set_state(state[WINDOW_STATE])
        memory = replay_memory(self)
        if memory is not None and REPLAY_STATE in state:
            memory.set_state(state[REPLAY_STATE])
            self._restored_replay_steps = memory.get_num_timesteps()
        if self._self_play is not None and SELF_PLAY_STATE in state:
            self._self_play.set_state(state[SELF_PLAY_STATE], self)
        self._evaluation_seconds = state.get(EVALUATION_SECONDS, self._evaluation_seconds)

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """RLlib's greedy evaluation, played with the training env runners' connector state (the
        observation filter's statistics): RLlib hands that state only to remote evaluation
        runners, and rlplat evaluates in the algorithm's process."""
        evaluation, training = self.eval_env_runner, self.env_runner
        if evaluation is not None and training is not None:
            evaluation.set_state(training.get_state(components=CONNECTOR_COMPONENTS))
        started = time.monotonic()
        try:
            return super().evaluate(*args, **kwargs)
        finally:
            self._evaluation_seconds += time.monotonic() - started

    @property
    def _evaluates(self) -> bool:
        return bool(self.config.evaluation_interval)

    @property
    def _score_metric(self) -> str:
        self_play = bool((self._experiment.get("multi_agent") or {}).get("self_play"))
        return score_metric(self._checkpoint_spec, self._evaluates, self_play)

    def step(self) -> dict[str, Any]:
        started = time.monotonic()
        interval = self.config.evaluation_interval
        evaluates = bool(interval) and (self.iteration + 1) % interval == 0  # as RLlib decides
        try:
            result = super().step()
            self._raise_if_remote_envs_keep_failing()
        except Exception as exc:
            replacement = self._stopped_by(exc)
            if replacement is exc:
                raise
            raise replacement from None
        check_losses_finite(result, self.iteration + 1)
        if self._self_play is not None:
            self._self_play.after_iteration(self, result)
        self._previous_result = result
        if evaluates:
            self._evaluation = GreedyEvaluation.from_result(
                result.get("evaluation") or {}, self.iteration + 1
            )
        else:  # RLlib repeats its latest evaluation: each result carries only its own
            result.pop("evaluation", None)
        if self._stop is not None and self._stop.time_s is not None:
            last = time.monotonic() - started
            elapsed = self.training_time_s() + self.earlier_training_s + last
            if elapsed < self._stop.time_s and not self._stop.another_iteration_fits(elapsed, last):
                result["done"] = True
                put(result, TIME_BUDGET_ENDED, 1)
        group = getattr(self, "env_runner_group", None)
        put(result, RUNNER_RESTARTS, env_runner_restarts(group) if group else 0)
        put(result, EVALUATION_SECONDS, self._evaluation_seconds)
        if self.config.is_offline:
            result[ENV_STEPS] = finite(lookup(result, ENV_STEPS_TRAINED)) or 0
        memory = replay_memory(self)
        if memory is not None:
            put(result, REPLAY_STEPS, memory.get_num_timesteps())
        if self._restored_replay_steps is not None:
            put(result, RESTORED_REPLAY_STEPS, self._restored_replay_steps)
            self._restored_replay_steps = None
        return result

    def save_checkpoint(self, checkpoint_dir: str) -> None:
        """RLlib's checkpoint, with the greedy evaluation of its weights (``rlplat_evaluation
        .json``): the one RLlib ran at this iteration, else one run now (a checkpoint at the
        end, or at any iteration the evaluation interval skipped)."""
        super().save_checkpoint(checkpoint_dir)
        if not self._evaluates:
            return
        if self._evaluation is None or self._evaluation.iteration != self.iteration:
            self._evaluation = GreedyEvaluation.from_result(self.evaluate(), self.iteration)
        self._evaluation.write(Path(checkpoint_dir))

    def _current_evaluation(self) -> GreedyEvaluation | None:
        evaluation = self._evaluation
        return evaluation if evaluation and evaluation.iteration == self.iteration else None

    def _raise_if_remote_envs_keep_failing(self) -> None:
        """A remote env runner whose env keeps failing exits (RLlib restarts it as a new
        process and samples without it meanwhile); it left its error for the trial."""
        group = getattr(self, "env_runner_group", None)
        for actor_id in env_runner_actor_ids(group) if group else []:
            message = take_reported_failure(actor_id)
            if message is not None:
                raise EnvKeepsFailing(message)

    def training_time_s(self) -> float:
        """Seconds this trial spent in its finished iterations: the ``time_total_s`` Tune's
        ``Trainable`` gives its next result (a resumed trial's earlier sessions included)."""
        return float(self.get_auto_filled_metrics()[TIME_TOTAL_S])

    def _stopped_by(self, exc: Exception) -> Exception:
        """Write a final checkpoint of the weights trained so far (a failed iteration changed
        none) next to Tune's; an env that keeps failing gets its path in the message."""
        try:
            path = self._write_final_checkpoint()
        except Exception:  # noqa: BLE001 - e.g. a full disk: the original error matters more
            return exc
        if isinstance(exc, EnvKeepsFailing):
            return EnvKeepsFailing(f"{exc} A final checkpoint was written: {path}")
        return exc

    def _write_final_checkpoint(self) -> Path:
        trial_dir = self.trial_dir or Path(trial_storage_path(self))
        path = trial_dir / f"checkpoint_failed_{self.iteration:06d}"
        self.save_to_path(str(path))
        write_atomic(path / RESOLVED_EXPERIMENT, dump_yaml(trial_experiment(self._experiment)))
        checkpoint_info_from_result(
            self._previous_result,
            self._score_metric,
            self._checkpoint_spec.mode,
            self._current_evaluation(),
        ).write(path)
        return path


LOSS_KEYS = ("total_loss", "policy_loss", "vf_loss", "qf_loss", "critic_loss", "actor_loss")


def check_losses_finite(result: dict[str, Any], iteration: int) -> None:
    """Stop a run whose losses became NaN or infinite: every later update would be wasted."""
    for module, stats in (result.get("learners") or {}).items():
        if not isinstance(stats, dict):
            continue
        for key in LOSS_KEYS:
            value = stats.get(key)
            if isinstance(value, (int, float)) and not math.isfinite(value):
                raise RlplatError(
                    f"the loss became {value} at iteration {iteration} "
                    f"(learners/{module}/{key}): training diverged. Lower training.lr, clip "
                    "gradients (training.grad_clip), or check the environment for NaN or "
                    "infinite observations and rewards."
                )


def put(result: dict[str, Any], path: str, value: Any) -> None:
    """Set ``section/key`` in a nested result dict."""
    section, key = path.split("/")
    result.setdefault(section, {})[key] = value
