"""rlplat's single-agent sampling loop: one batched forward pass per vector step, arrays, and
the episodes built once per sampling call.

RLlib's ``SingleAgentEnvRunner`` runs its two connector pipelines (11 pieces for PPO) on every
vector step, unbatches every column into per-env items, deep-copies the actions and appends each
env's step to its episode with a callback per env and step: ~50 us per env step on CartPole with
16 envs (the env itself: 11 us) and ~670 us on HalfCheetah with one env (the env: 75 us).

Where a run's pipelines are RLlib's standard pieces (and a running mean/std filter) and its
module is a feed-forward torch one, :class:`ArraySampling` does per vector step only what those
pieces compute: the observation batch as a tensor, the module's forward pass, the actions drawn
from its distribution (with their log-probabilities), the actions unsquashed or clipped for the
env, the env's step. Each step is written into arrays; at the end of the call the arrays are
appended to the same ``SingleAgentEpisode`` objects RLlib's loop keeps, in the same order, and
the ``on_episode_end`` callbacks run in the order the episodes ended. For one seed the episodes,
actions, log-probabilities and filter statistics are those of RLlib's loop
(``tests/unit/test_array_runner.py``). Metrics are logged once per call.

It samples env steps (training) and whole episodes (evaluation) alike. Everything else (a
recurrent module, other connector pieces, callbacks on every step, random actions) runs RLlib's
own loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.connectors.env_to_module.mean_std_filter import MeanStdFilter
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.env.env_runner import ENV_STEP_FAILURE
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.metrics import RLMODULE_INFERENCE_TIMER, WEIGHTS_SEQ_NO
from ray.rllib.utils.numpy import convert_to_numpy
from ray.rllib.utils.torch_utils import convert_to_torch_tensor

from rlplat.environments.lean_sampling import mode_free
from rlplat.seams.rllib_runner import RunnerHooks, episode_started, stamp_episode_step

# RLlib's standard env-to-module and module-to-env pieces for a feed-forward single-agent module:
# what they compute together is what the array loop computes.
STANDARD_ENV_TO_MODULE = frozenset(
    {
        "AddObservationsFromEpisodesToBatch",
        "AddTimeDimToBatchAndZeroPad",
        "AddStatesFromEpisodesToBatch",
        "BatchIndividualItems",
        "NumpyToTensor",
    }
)
STANDARD_MODULE_TO_ENV = frozenset(
    {
        "GetActions",
        "TensorToNumpy",
        "UnBatchToIndividualItems",
        "RemoveSingleTsTimeRankFromBatch",
        "NormalizeAndClipActions",
        "ListifyDataForVectorEnv",
    }
)
# Pieces that only rewrite each episode's newest observation, env by env: the loop runs them on
# one-observation episodes per step.
OBSERVATION_PIECES = (MeanStdFilter,)
PER_STEP_CALLBACKS = ("on_episode_created", "on_episode_start", "on_episode_step")


@dataclass
class ArrayPlan:
    """What the array loop needs to know about a runner, worked out once per module/env."""

    observation_pieces: list[Any]
    device: torch.device
    act: Any  # (batch, explore, t) -> the module's outputs
    for_env: Any  # actions -> the actions the env is given
    _slots: list[SingleAgentEpisode] = field(default_factory=list)

    def slots(self, space: Any, count: int) -> list[SingleAgentEpisode]:
        """One-observation episodes, one per env, for the observation pieces to rewrite."""
        if len(self._slots) != count:
            first = space.sample()
            self._slots = [
                SingleAgentEpisode(observations=[first], observation_space=space)
                for _ in range(count)
            ]
        return self._slots


@dataclass
class _Steps:
    """One sampling call's vector steps, env by env (``[step][env]``)."""

    observations: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    rewards: list[np.ndarray] = field(default_factory=list)
    terminateds: list[np.ndarray] = field(default_factory=list)
    truncateds: list[np.ndarray] = field(default_factory=list)
    infos: list[list[dict]] = field(default_factory=list)
    outputs: list[dict[str, np.ndarray]] = field(default_factory=list)
    resets: list[np.ndarray] = field(default_factory=list)  # the env returned a reset observation
    times: list[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.times)


ARRAY_LOOP = "rlplat's array loop"


def array_plan(runner: Any) -> ArrayPlan | None:
    """The plan for ``runner``'s array loop, or None where RLlib's loop must sample."""
    if array_loop_obstacle(runner) is not None:
        return None
    module, env, config = runner.module, runner.env, runner.config
    observation_pieces, _ = _split_observation_pieces(runner.env_to_module.connectors)
    parameter = next(module.parameters(), None)
    return ArrayPlan(
        observation_pieces=observation_pieces,
        device=parameter.device if parameter is not None else torch.device("cpu"),
        act=_acting(module),
        for_env=actions_for_env(
            env.single_action_space, config.normalize_actions, config.clip_actions
        ),
    )


def array_loop_obstacle(runner: Any) -> str | None:
    """Why ``runner``'s training samples cannot run the array loop (None: they can)."""
    module, env = runner.module, runner.env
    if module is None or env is None:
        return "the env runner has no module or no env"
    if not isinstance(module, TorchRLModule):
        return f"the module ({type(module).__name__}) is not a torch RLModule"
    if module.is_stateful():
        return "the module is recurrent"
    if not isinstance(env.single_observation_space, gym.spaces.Box):
        return f"the observations are a {type(env.single_observation_space).__name__} space"
    if not isinstance(env.single_action_space, (gym.spaces.Box, gym.spaces.Discrete)):
        return f"the actions are a {type(env.single_action_space).__name__} space"
    if _per_step_callbacks(runner):
        return "a callback acts on every step"
    _, pieces = _split_observation_pieces(runner.env_to_module.connectors)
    others = other_pieces(pieces, STANDARD_ENV_TO_MODULE) + other_pieces(
        runner.module_to_env.connectors, STANDARD_MODULE_TO_ENV
    )
    if others:
        return f"the connector piece {type(others[0]).__name__} is not one the loop computes"
    return None


def sampling_loop(runner: Any) -> str:
    """Which loop ``runner`` samples its training steps with, and why where it is RLlib's."""
    if not isinstance(runner, ArraySampling):
        kind = "multi-agent" if isinstance(runner, MultiAgentEnvRunner) else "single-agent"
        return f"RLlib's {kind} loop"
    obstacle = array_loop_obstacle(runner)
    return ARRAY_LOOP if obstacle is None else f"RLlib's loop: {obstacle}"


def _split_observation_pieces(pieces: list[Any]) -> tuple[list[Any], list[Any]]:
    """The leading pieces that rewrite each newest observation, and the pieces after them."""
    count = 0
    while count < len(pieces) and isinstance(pieces[count], OBSERVATION_PIECES):
        count += 1
    return list(pieces[:count]), list(pieces[count:])


def other_pieces(pieces: list[Any], names: frozenset[str]) -> list[Any]:
    """The pieces that are not RLlib's own named ``names``."""
    return [
        piece
        for piece in pieces
        if type(piece).__name__ not in names or not type(piece).__module__.startswith("ray.rllib.")
    ]


def actions_for_env(space: Any, normalize: bool, clip: bool) -> Any:
    """RLlib's ``NormalizeAndClipActions`` (``unsquash_action``, ``clip_action``) for a whole
    batch of one Box or Discrete space, with the space's bounds looked up once."""
    if not isinstance(space, gym.spaces.Box) or not (normalize or clip):
        return lambda actions: actions
    low, high = space.low, space.high
    bounded = bool(np.all(space.bounded_below) and np.all(space.bounded_above))
    if normalize and bounded and space.dtype in (np.float32, np.float64):
        return lambda actions: np.clip(low + (actions + 1.0) * (high - low) / 2.0, low, high)
    if normalize and bounded and np.issubdtype(space.dtype, np.integer):
        return lambda actions: low + actions
    if normalize:
        return lambda actions: actions
    return lambda actions: np.clip(actions, low, high)


def _per_step_callbacks(runner: Any) -> bool:
    """Whether a callback wants episodes while they are played (on every step or start)."""
    config = runner.config
    if any(getattr(config, f"callbacks_{name}", None) for name in PER_STEP_CALLBACKS):
        return True
    return any(
        getattr(type(callback), name) is not getattr(RLlibCallback, name)
        for callback in runner.callbacks
        for name in PER_STEP_CALLBACKS
    )


def _acting(module: TorchRLModule) -> Any:
    """The module's forward pass for acting; a module that computes the same in train and eval
    mode is put in eval mode once and called without RLlib's switch around each pass."""
    if mode_free(module):
        module.eval()
        exploring, inferring = module._forward_exploration, module._forward_inference
    else:
        exploring, inferring = module.forward_exploration, module.forward_inference

    def act(batch: dict[str, Any], explore: bool, t: int) -> dict[str, Any]:
        return exploring(batch, t=t) if explore else inferring(batch)

    return act


class ArraySampling(RunnerHooks):
    """Single-agent env-runner mixin (just before RLlib's ``SingleAgentEnvRunner``): see the
    module's docstring."""

    config: Any
    env: Any
    module: Any
    metrics: Any
    num_envs: int
    _array_plan: ArrayPlan | None = None
    _array_plan_for: tuple[int, int] | None = None

    def sample_episodes(
        self,
        *,
        num_timesteps: int | None = None,
        num_episodes: int | None = None,
        explore: bool,
        random_actions: bool = False,
        force_reset: bool = False,
    ) -> list[SingleAgentEpisode]:
        plan = self._plan()
        if plan is None or random_actions:
            return super().sample_episodes(
                num_timesteps=num_timesteps,
                num_episodes=num_episodes,
                explore=explore,
                random_actions=random_actions,
                force_reset=force_reset,
            )
        return self._sample_arrays(plan, explore, force_reset, num_timesteps, num_episodes)

    def _plan(self) -> ArrayPlan | None:
        key = (id(self.module), id(self.env))  # make_env/make_module replace them
        if self._array_plan_for != key:
            self._array_plan, self._array_plan_for = array_plan(self), key
        return self._array_plan

    def _sample_arrays(
        self,
        plan: ArrayPlan,
        explore: bool,
        force_reset: bool,
        num_timesteps: int | None,
        num_episodes: int | None,
    ) -> list[SingleAgentEpisode]:
        """RLlib's ``_sample`` for ``num_timesteps`` env steps (the ongoing episodes continue in
        the next call) or ``num_episodes`` whole episodes (from fresh resets), on arrays."""
        done: list[tuple[int, int, SingleAgentEpisode]] = []  # (step, env, episode)
        if force_reset or num_episodes is not None or self.needs_initial_reset:
            self.reset_envs_and_episodes(explore)
        if num_episodes is not None:
            self.needs_initial_reset = True
        runners = self.config.num_env_runners or 1
        lifetime = self.num_env_steps_sampled_lifetime // runners
        # An env whose episode ended at the last step returns its reset observation next.
        resetting = np.array([not episode.is_reset for episode in self.ongoing_episodes])
        steps, ts, ended, flushed, acting_s = _Steps(), 0, 0, 0, 0.0

        def more() -> bool:
            return ts < num_timesteps if num_timesteps is not None else ended < num_episodes

        while more():
            to_module = self.cached_to_module
            self.cached_to_module = None
            started = time.perf_counter()
            out = plan.act(to_module, explore, (lifetime + ts) * runners)
            out = self._with_actions(out, explore)
            acting_s += time.perf_counter() - started
            out = _to_numpy(out)
            actions = out.pop(Columns.ACTIONS)
            results = self.try_env_step(plan.for_env(actions))
            if results == ENV_STEP_FAILURE:
                self._to_episodes(steps, done, flushed)
                flushed, steps, ts = flushed + len(steps), _Steps(), 0
                self.reset_envs_and_episodes(explore)
                resetting = np.zeros(self.num_envs, dtype=bool)
                continue
            observations, rewards, terminateds, truncateds, infos = results
            observations = self._observations(plan, observations, explore)
            steps.observations.append(observations)
            steps.actions.append(actions)
            steps.rewards.append(rewards)
            steps.terminateds.append(terminateds)
            steps.truncateds.append(truncateds)
            steps.infos.append(infos)
            steps.outputs.append(out)
            steps.resets.append(resetting)
            steps.times.append(time.perf_counter())
            ts += int(self.num_envs - resetting.sum())
            resetting = np.logical_and(np.logical_or(terminateds, truncateds), ~resetting)
            ended += int(resetting.sum())
            self.cached_to_module = {Columns.OBS: _to_tensor(observations, plan.device)}
        if steps:
            self.metrics.log_value(RLMODULE_INFERENCE_TIMER, acting_s / len(steps))
        self._to_episodes(steps, done, flushed)
        done.sort(key=lambda item: item[:2])
        if num_episodes is not None:  # RLlib's loop stops counting at the last one needed
            return self._returned(done[:num_episodes], ts, chunks=False)
        return self._returned(done, ts, chunks=True)

    def _with_actions(self, out: dict[str, Any], explore: bool) -> dict[str, Any]:
        """RLlib's ``GetActions``: actions drawn from the module's distribution where it gave
        none, with their log-probabilities."""
        if Columns.ACTIONS in out or Columns.ACTION_DIST_INPUTS not in out:
            return out
        module = self.module
        if explore:
            distribution = module.get_exploration_action_dist_cls()
        else:
            distribution = module.get_inference_action_dist_cls()
        distribution = distribution.from_logits(out[Columns.ACTION_DIST_INPUTS])
        if not explore:
            distribution = distribution.to_deterministic()
        actions = distribution.sample()
        out = {**out, Columns.ACTIONS: actions}
        if Columns.ACTION_LOGP not in out:
            out[Columns.ACTION_LOGP] = distribution.logp(actions)
        return out

    def _observations(self, plan: ArrayPlan, observations: np.ndarray, explore: bool) -> Any:
        """The observations after the observation pieces (a running filter), env by env in
        order, as RLlib's pipeline runs them over its episodes."""
        if not plan.observation_pieces:
            return observations
        slots = plan.slots(self.env.single_observation_space, len(observations))
        for slot, row in zip(slots, observations, strict=True):
            slot.observations.data[-1] = row
        for piece in plan.observation_pieces:
            piece(rl_module=self.module, batch={}, episodes=slots, explore=explore, metrics=None)
        return np.stack([slot.observations.data[-1] for slot in slots])

    def _to_episodes(
        self, steps: _Steps, done: list[tuple[int, int, SingleAgentEpisode]], flushed: int
    ) -> None:
        """Append the recorded steps to the ongoing episodes; each that ended is kept in
        ``done`` with the step it ended at (counted from the call's start: ``flushed`` steps
        came before these), and its env gets a new episode."""
        if not steps:
            return
        observation_space = self._episode_observation_space()
        weights_seq_no = self.weights_seq_no
        ongoing_episodes = self.ongoing_episodes
        for env in range(self.num_envs):
            episode = ongoing_episodes[env]
            for t in range(len(steps)):
                infos = steps.infos[t][env]
                if steps.resets[t][env]:
                    episode.add_env_reset(observation=steps.observations[t][env], infos=infos)
                    continue
                outputs = {key: column[env] for key, column in steps.outputs[t].items()}
                outputs[WEIGHTS_SEQ_NO] = weights_seq_no
                fresh = not episode_started(episode)
                episode.add_env_step(
                    observation=steps.observations[t][env],
                    action=steps.actions[t][env],
                    reward=steps.rewards[t][env],
                    infos=infos,
                    terminated=bool(steps.terminateds[t][env]),
                    truncated=bool(steps.truncateds[t][env]),
                    extra_model_outputs=outputs,
                )
                stamp_episode_step(episode, steps.times[t], fresh)
                if observation_space is not None:
                    episode.observation_space = observation_space
                if episode.is_done:
                    done.append((flushed + t, env, episode))
                    self.new_episode(env, ongoing_episodes)
                    episode = ongoing_episodes[env]

    def _episode_observation_space(self) -> Any:
        plan = self._array_plan
        if plan is None or not plan.observation_pieces:
            return None
        return plan.observation_pieces[-1].observation_space

    def _returned(
        self, done: list[tuple[int, int, SingleAgentEpisode]], ts: int, chunks: bool
    ) -> list[SingleAgentEpisode]:
        """What RLlib's loop returns and records: the finished episodes in the order they ended
        (their ``on_episode_end`` callbacks first), then (``chunks``) those of the ongoing ones,
        which continue in new chunks."""
        finished = []
        for _, env, episode in done:
            slots: list[Any] = [None] * self.num_envs
            slots[env] = episode
            self.episode_callback("on_episode_end", env, slots)
            finished.append(episode.to_numpy() if self.episodes_to_numpy else episode)
        ongoing = self._cut_ongoing() if chunks else []
        self.record_sampled(finished, ts)
        return finished + ongoing

    def _cut_ongoing(self) -> list[SingleAgentEpisode]:
        """The ongoing episodes' chunks (those with steps), each continued in a new chunk."""
        ongoing = []
        continuations = [
            episode.cut(len_lookback_buffer=self.config.episode_lookback_horizon)
            for episode in self.ongoing_episodes
        ]
        for episode in self.ongoing_episodes:
            if episode.t == 0:
                continue
            episode.validate()
            self.track_ongoing(episode)
            ongoing.append(episode.to_numpy() if self.episodes_to_numpy else episode)
        self.ongoing_episodes = continuations
        return ongoing


def _to_numpy(outputs: dict[str, Any]) -> dict[str, Any]:
    """RLlib's ``TensorToNumpy`` for a module's flat dict of tensors (others: RLlib's own)."""
    if all(isinstance(value, torch.Tensor) for value in outputs.values()):
        return {key: value.detach().cpu().numpy() for key, value in outputs.items()}
    return convert_to_numpy(outputs)


def _to_tensor(observations: Any, device: torch.device) -> Any:
    """RLlib's ``NumpyToTensor`` (``convert_to_torch_tensor``: floats as float32)."""
    if not isinstance(observations, np.ndarray) or device.type != "cpu":
        return convert_to_torch_tensor(observations, device=device)
    tensor = torch.from_numpy(observations)
    if tensor.is_floating_point() and tensor.dtype != torch.float16:
        tensor = tensor.float()
    return tensor
