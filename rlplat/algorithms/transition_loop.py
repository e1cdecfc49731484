"""DQN's training loop (DQN, SAC, TD3) with replayed train batches built straight from the buffer.

RLlib's loop samples each update's batch as one small episode per transition and sends those
through the learner connector pipeline, which reads them back item by item: on HalfCheetah with
batch 256 that took 10 ms of sampling and 4 ms of connectors, as long as the update itself. Where
the learner needs only the transition columns, ``TransitionBatchLoop`` keeps the sampled steps in
rlplat's array memory (``TransitionMemory``, no episode copies) and draws each update's columns
from it as arrays; the learner sees the same columns, the updates and target updates keep
RLlib's cadence.

It applies to single-agent runs with rlplat's transition sampler, stateless modules, flat Box or
Discrete spaces and no learner connector pieces of the experiment's own (frame stacking, for one);
anything else (prioritized replay, sequences, multi-agent) runs RLlib's loop unchanged, with
``TransitionEpisodeReplayBuffer`` where the experiment asked for the transition sampler.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import gymnasium as gym
import torch
from ray.rllib.algorithms.dqn.dqn import DQN as RLlibDQN
from ray.rllib.algorithms.dqn.dqn import DQNConfig as RLlibDQNConfig
from ray.rllib.algorithms.dqn.dqn import calculate_rr_weights
from ray.rllib.algorithms.dqn.dqn_learner import QF_PREDS
from ray.rllib.algorithms.dqn.dqn_learner import DQNLearner as RLlibDQNLearner
from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import DefaultDQNTorchRLModule
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner
from ray.rllib.connectors.common.add_observations_from_episodes_to_batch import (
    AddObservationsFromEpisodesToBatch,
)
from ray.rllib.connectors.learner.add_next_observations_from_episodes_to_train_batch import (
    AddNextObservationsFromEpisodesToTrainBatch,
)
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import TargetNetworkAPI
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import (
    ENV_RUNNER_SAMPLING_TIMER,
    LAST_TARGET_UPDATE_TS,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_TARGET_UPDATES,
    REPLAY_BUFFER_ADD_DATA_TIMER,
    REPLAY_BUFFER_RESULTS,
    REPLAY_BUFFER_SAMPLE_TIMER,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TD_ERROR_KEY,
    TIMERS,
)

from rlplat.algorithms.base import (
    OwnAlgorithmConfig,
    WithoutModeSwitch,
    move_towards,
    pieces_within,
)
from rlplat.algorithms.loop import (
    env_steps_sampled,
    gather_runner_metrics,
    sample_round,
    sample_without_metrics,
)
from rlplat.algorithms.replay import TransitionEpisodeReplayBuffer
from rlplat.algorithms.shared_weights import sync_env_runners
from rlplat.algorithms.transition_memory import TransitionMemory
from rlplat.engine.learner import RlplatLearner
from rlplat.seams.rllib_algorithm import AlgorithmHooks, compiled_after
from rlplat.seams.rllib_learner import update_keeping_metrics

FLAT_SPACES = (gym.spaces.Box, gym.spaces.Discrete)
# RLlib's learner pieces for a feed-forward module: what a ``TransitionMemory`` batch holds. A
# learner pipeline with any other piece (frame stacking, reward scaling) keeps RLlib's loop.
TRANSITION_PIECES = frozenset(
    {
        "AddObservationsFromEpisodesToBatch",
        "AddNextObservationsFromEpisodesToTrainBatch",
        "AddColumnsFromEpisodesToTrainBatch",
        "AddTimeDimToBatchAndZeroPad",
        "AddStatesFromEpisodesToBatch",
        "BatchIndividualItems",
        "NumpyToTensor",
    }
)


class TransitionBatchLoop(AlgorithmHooks):
    """Mixin before an RLlib DQN-family algorithm: its ``training_step`` with array batches."""

    def setup(self, config: Any) -> None:
        super().setup(config)
        if self.replays_transition_batches:  # the same capacity as the buffer it replaces
            capacity = self.local_replay_buffer.capacity
            self.local_replay_buffer = self.make_transition_memory(capacity)

    def make_transition_memory(self, capacity: int) -> TransitionMemory:
        """The memory this run's batches come from (a trial of an experiment with hindsight
        relabelling makes rlplat's ``HindsightMemory`` instead)."""
        return TransitionMemory(capacity, self.config.seed)

    def training_step(self) -> None:
        if not self.replays_transition_batches:
            return super().training_step()
        store_weight, updates = calculate_rr_weights(self.config)
        for _ in range(store_weight):
            with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
                if self.defers_runner_metrics:
                    episodes = sample_without_metrics(self)
                else:
                    episodes = sample_round(self)
            with self.metrics.log_time((TIMERS, REPLAY_BUFFER_ADD_DATA_TIMER)):
                self.local_replay_buffer.add(episodes)
        env_steps = env_steps_sampled(self)
        if env_steps < self.config.num_steps_sampled_before_learning_starts:
            return None
        timesteps = {
            NUM_ENV_STEPS_SAMPLED_LIFETIME: env_steps,
            NUM_AGENT_STEPS_SAMPLED_LIFETIME: {},
        }
        deferred = self.defers_learner_metrics
        for _ in range(updates):
            with self.metrics.log_time((TIMERS, REPLAY_BUFFER_SAMPLE_TIMER)):
                batch = self.replayed_batch()
            with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
                if deferred:
                    update_keeping_metrics(self.learner_group, batch=batch, timesteps=timesteps)
                else:
                    results = self.learner_group.update(batch=batch, timesteps=timesteps)
                    self.metrics.aggregate(without_td_errors(results), key=LEARNER_RESULTS)
        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            sync_env_runners(self)
        return None

    @cached_property
    def defers_runner_metrics(self) -> bool:
        """Whether the env runners' metrics are gathered once per iteration rather than after
        every sampling call: not where the iteration counts agent steps, which it would read
        from those metrics after each training step."""
        return self.config.count_steps_by == "env_steps"

    @cached_property
    def defers_learner_metrics(self) -> bool:
        """Whether the learners' metrics are reduced once per iteration (after its last
        training step) rather than after every update: a reduce and an aggregation cost about
        as much as a small network's update. Not where the iteration waits for a number of
        trained env steps, which it reads from those metrics after each training step."""
        return not self.config.min_train_timesteps_per_iteration

    def run_training_iteration(self) -> Any:
        """RLlib's iteration, with the metrics gathered once for all its training steps just
        before RLlib compiles them into the result: the env runners', the learners' (where
        deferred) and the replay buffer's (its reduce costs more than an update of DQN's CartPole
        network)."""
        if not self.replays_transition_batches:
            return super().run_training_iteration()
        with compiled_after(self.metrics, self._gather_iteration_metrics):
            return super().run_training_iteration()

    def _gather_iteration_metrics(self) -> None:
        if self.defers_runner_metrics:
            gather_runner_metrics(self)
        if self.defers_learner_metrics:
            reduced = self.learner_group.foreach_learner(lambda learner: learner.metrics.reduce())
            results = [result.get() for result in reduced]
            self.metrics.aggregate(without_td_errors(results), key=LEARNER_RESULTS)
        self.metrics.log_dict(self.local_replay_buffer.stats(), key=REPLAY_BUFFER_RESULTS, window=1)

    def replayed_batch(self) -> MultiAgentBatch:
        """One learner update's batch, drawn from the replay buffer as arrays."""
        config = self.config
        columns = self.local_replay_buffer.sample_batch(
            config.total_train_batch_size, config.n_step, config.gamma
        )
        return MultiAgentBatch(
            {DEFAULT_MODULE_ID: SampleBatch(columns)}, env_steps=len(columns["rewards"])
        )

    @cached_property
    def replays_transition_batches(self) -> bool:
        """Whether this run's learner batches come straight from a ``TransitionMemory``
        (decided once, in ``setup``, which builds that memory: the spaces and modules are
        known only once the algorithm's env runners are built)."""
        config = self.config
        spaces = (self.spaces or {}).get(DEFAULT_MODULE_ID, ())
        return (
            type(self.local_replay_buffer) is TransitionEpisodeReplayBuffer
            and isinstance(config.n_step, int)
            and not config.is_multi_agent
            and len(spaces) == 2
            and all(isinstance(space, FLAT_SPACES) for space in spaces)
            and pieces_within(config.build_learner_connector(*spaces), TRANSITION_PIECES)
            and not self._acts_statefully()
        )

    def _acts_statefully(self) -> bool:
        """Whether the env runners' module keeps a state between steps (an LSTM's)."""
        if self.env_runner is not None:
            return self.env_runner.module.is_stateful()
        return self.env_runner_group.foreach_env_runner(
            lambda runner: runner.module.is_stateful(),
            remote_worker_ids=[1],
            local_env_runner=False,
        )[0]


def without_td_errors(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Learner results without the per-sample TD errors RLlib's DQN and SAC learners log for
    prioritized replay's priorities: uniform replay has no use for them, and kept they would put
    every update's batch of floats into the iteration's result (about 25 MB in each 5,000-update
    SAC result, in result.json and in Tune's experiment state), as RLlib's own loop avoids."""
    for learner_results in results:
        for module_results in learner_results.values():
            if isinstance(module_results, dict):
                module_results.pop(TD_ERROR_KEY, None)
    return results


class TransitionReplayConfig(OwnAlgorithmConfig):
    """The replay settings of an rlplat algorithm on DQN's loop (TD3, CrossQ): a uniformly
    replayed buffer of transitions with their next observations, one update of 256 per env step
    by default."""

    MERGED_SETTINGS = ("replay_buffer_config",)

    n_step: int | None = 1
    training_intensity: float | None = None  # replayed / sampled; None: one update per sample
    replay_buffer_config: dict[str, Any] | None = {
        "type": "EpisodeReplayBuffer",
        "capacity": 1_000_000,
    }
    store_buffer_in_checkpoints: bool | None = False

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class)
        self.gamma = 0.99
        self.grad_clip = None
        self.train_batch_size_per_learner = 256
        self.rollout_fragment_length = 1  # one env step per sampling call, one update after it

    def problems(self) -> list[str]:
        problems = super().problems()
        if "Prioritized" in str(self.replay_buffer_config.get("type")):
            problems.append(
                f"{self.algo_class.__name__} replays uniformly: use "
                "training.replay_buffer_config.type EpisodeReplayBuffer or "
                "TransitionEpisodeReplayBuffer"
            )
        return problems

    def build_learner_connector(
        self, input_observation_space: Any, input_action_space: Any, device: Any = None
    ) -> Any:
        """RLlib's learner pipeline plus the next observations the critic targets need."""
        pipeline = super().build_learner_connector(
            input_observation_space=input_observation_space,
            input_action_space=input_action_space,
            device=device,
        )
        pipeline.insert_after(
            AddObservationsFromEpisodesToBatch, AddNextObservationsFromEpisodesToTrainBatch()
        )
        return pipeline


class InPlaceTargetUpdates(RlplatLearner):
    """Before an RLlib DQN-family torch learner (DQN, SAC): ``RlplatLearner``, and
    target networks moved in place (``move_towards``) at DQNLearner's cadence, every
    ``target_network_update_freq`` env steps, with its counters. RLlib's own update rebuilds and
    loads a state dict per network: 0.8 ms of a SAC HalfCheetah update."""

    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        # In place of DQNLearner's own target update; the learners after it in the MRO still run.
        super(RLlibDQNLearner, self).after_gradient_based_update(timesteps=timesteps)
        timestep = timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0)
        for module_id, module in self.module.items():
            config = self.config.get_config_for_module(module_id)
            since = timestep - self.last_update_ts_by_mid[module_id]
            if since < config.target_network_update_freq:
                continue
            if not isinstance(module.unwrapped(), TargetNetworkAPI):
                continue
            for main, target in module.unwrapped().get_target_network_pairs():
                move_towards(main, target, config.tau)
            self.metrics.log_value((module_id, NUM_TARGET_UPDATES), 1, reduce="lifetime_sum")
            self.last_update_ts_by_mid[module_id] = timestep
            self.metrics.log_value((module_id, LAST_TARGET_UPDATE_TS), timestep, reduce="max")


class DQNLearner(InPlaceTargetUpdates, DQNTorchLearner):
    """RLlib's DQN torch learner with ``InPlaceTargetUpdates``."""


class DQNModule(WithoutModeSwitch, DefaultDQNTorchRLModule):
    """RLlib's default DQN module, epsilon-greedy with plain tensor operations: RLlib's builds a
    Categorical distribution per call to take the argmax and draws each random action by
    ``multinomial``, a third of a CartPole sampling call (docs/performance.md). The same
    actions' distribution: with probability epsilon (its schedule at ``t``) a uniformly drawn
    action, else the greedy one. Q-values with a masked action (-inf) or a recurrent network
    take RLlib's way, which draws among the actions left."""

    @torch.no_grad()
    def _forward_exploration(self, batch: dict[str, Any], t: int, **kwargs: Any) -> dict:
        q_outs = self.compute_q_values(batch)
        q_values = q_outs[QF_PREDS]
        if Columns.STATE_OUT in q_outs or not torch.isfinite(q_values).all():
            return super()._forward_exploration(batch, t)
        self.epsilon_schedule.update(t)
        epsilon = self.epsilon_schedule.get_current_value()
        rows, actions = q_values.shape
        greedy = q_values.argmax(dim=-1)
        uniform = torch.randint(actions, (rows,))
        return {Columns.ACTIONS: torch.where(torch.rand(rows) < epsilon, uniform, greedy)}


class DQNConfig(RLlibDQNConfig):
    """RLlib's ``DQNConfig``, whose torch learner is ``DQNLearner`` and module ``DQNModule``."""

    def get_default_learner_class(self) -> type:
        return DQNLearner

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=DQNModule, model_config=self.model_config)


class DQN(TransitionBatchLoop, RLlibDQN):
    """RLlib's DQN, with ``TransitionBatchLoop``'s replayed batches and ``DQNLearner``."""

    @classmethod
    def get_default_config(cls) -> DQNConfig:
        return DQNConfig(cls)
