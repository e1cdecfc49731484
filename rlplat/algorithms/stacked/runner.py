"""Sampling for stacked seeds (issue 104): RLlib's ``EnvRunner`` interface over N seeds' envs,
acting with one stacked RL module (``rlplat.algorithms.stacked.ppo``, ``.pqn``, ``.sac``,
``.td3``, ``.crossq``, ``.dqn``).

The algorithm's config says what differs between algorithms (``StackedSettings``): the module
class, the env steps of one sampling call, when learning starts and the single-seed module a
seed's checkpoint holds. Everything else (seeding each seed's envs as it would be seeded alone,
per-seed episode metrics and health counts, each seed's greedy evaluation episodes when the
runner is RLlib's evaluation runner, one seed's checkpoint as RLlib's own module) is the same
for every stacked algorithm.
"""

from __future__ import annotations

import pickle
from collections import deque
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core import (
    COMPONENT_ENV_RUNNER,
    COMPONENT_ENV_TO_MODULE_CONNECTOR,
    COMPONENT_LEARNER,
    COMPONENT_LEARNER_GROUP,
    COMPONENT_MODULE_TO_ENV_CONNECTOR,
    COMPONENT_RL_MODULE,
    DEFAULT_MODULE_ID,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.env import INPUT_ENV_SINGLE_SPACES, INPUT_ENV_SPACES
from ray.rllib.env.env_runner import EnvRunner
from ray.rllib.utils.checkpoints import Checkpointable
from ray.rllib.utils.metrics import (
    EPISODE_LEN_MEAN,
    EPISODE_RETURN_MEAN,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    WEIGHTS_SEQ_NO,
)
from torch import nn

from rlplat.algorithms.stacked.filters import SeedFilters, filter_pieces
from rlplat.engine.learner import state_requested
from rlplat.environments.array_runner import actions_for_env
from rlplat.environments.seeding import runner_seeds
from rlplat.health.reading import EPISODES_ENDED, EPISODES_TRUNCATED, HEALTH_KEY, OBS_ABS_SUM

STACKED_SEEDS = "stacked_seeds"  # model_config key: the stack's seeds, in order
SEED_RESULTS = "seeds"  # results of each seed, by its index in the stack
STOPPED_SEEDS = "num_stopped"  # under SEED_RESULTS: seeds stopped by a non-finite loss
SEED_STOPPED = "stopped"  # a seed's learner result: 1 once a non-finite loss stopped it
SEED_WINDOW = "window"  # a seed's env runner results over its last episodes (rlplat's window/)
BEFORE_LEARNING = "episodes_before_learning"
RECENT_EPISODES = "recent_episodes"  # the runner's state: each seed's window of episodes
OBSERVATION_FILTERS = "observation_filters"  # the runner's state: each seed's filter statistics


def as_rllib_mlp(layers: nn.Sequential) -> nn.Module:
    """``layers`` where RLlib's MLP encoders and heads keep theirs (``<name>.net.mlp.<i>``)."""
    return nn.ModuleDict({"net": nn.ModuleDict({"mlp": layers})})


class StackedSettings:
    """What a stacked algorithm's config tells ``StackedEnvRunner`` (a mixin before its
    config's class), and ``stacked``, which makes the config a stack's. The config samples with
    ``StackedEnvRunner``, builds ``stacked_module`` and learns with ``stacked_learner``; a seed's
    checkpoint holds ``seed_module`` (with ``seed_catalog``), the RLlib module a run of that
    seed alone builds."""

    stacked_module: type  # the stacked RL module
    stacked_learner: type  # its learner, owning the stack's update
    seed_module: type  # one seed's RL module, as a run of it alone builds it
    seed_catalog: type | None = None
    stacked_env_creator: Any = None
    stacked_evaluation_env_creator: Any = None

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class)
        self.env_runners(num_env_runners=0, env_runner_cls=StackedEnvRunner)

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=self.stacked_module)

    def get_default_learner_class(self) -> type:
        return self.stacked_learner

    def stacked(
        self, *, seeds: list[int], env_creator: Any = None, evaluation_env_creator: Any = None
    ) -> Any:
        """Train ``seeds`` side by side in this process; each env made by ``env_creator``
        (called with ``env_config``, as RLlib calls a registered creator; else
        ``gymnasium.make(config.env)``), each evaluation env by ``evaluation_env_creator``
        (else ``env_creator``)."""
        self.rl_module(model_config={**self.model_config, STACKED_SEEDS: [int(s) for s in seeds]})
        self.stacked_env_creator = env_creator
        self.stacked_evaluation_env_creator = evaluation_env_creator
        self.env_runners(num_env_runners=0)
        self.learners(num_learners=0)
        return self

    def stacked_steps_per_sample(self) -> int:
        """Vector steps of one ``sample`` call (each seed's envs step this many times)."""
        raise NotImplementedError

    def stacked_learning_starts(self) -> int:
        """Env steps of one seed sampled before its first update."""
        raise NotImplementedError

    def single_seed_module_spec(self, observation_space: gym.Space, action_space: gym.Space,
                                model_config: dict[str, Any]) -> RLModuleSpec:  # fmt: skip
        """The RLlib module one seed of the stack is, as a run of it alone would build it."""
        return RLModuleSpec(
            module_class=self.seed_module,
            catalog_class=self.seed_catalog,
            observation_space=observation_space,
            action_space=action_space,
            model_config=model_config,
        )


class StackedRollout:
    """``steps`` vector steps of N seeds x E envs each, as tensors (N, steps, E, ...): what each
    env observed, did and got, and the observation after each step (the final one where an
    episode ended there). ``env_steps`` counts one seed's: the env steps each seed's trial
    reports. (A plain class: RLlib's sampling helpers flatten lists of samples with ``tree``
    and keep it whole.)"""

    def __init__(self, columns: dict[str, torch.Tensor]):
        self.columns = columns

    def env_steps(self) -> int:
        _, steps, envs = self.columns["rewards"].shape
        return steps * envs

    def agent_steps(self) -> int:
        return self.env_steps()


class StackedEnvRunner(EnvRunner, Checkpointable):
    """RLlib's ``EnvRunner`` interface for a stack of seeds: N x E envs stepped one by one in
    seed-major order, seed i's E envs seeded as a run of seed i alone seeds its local runner's
    (``runner_seeds``), one forward pass of the stacked module per vector step for all of them.
    An env whose episode ends is reset at once; its final observation stays in the rollout for
    the value bootstrap. With the experiment's ``mean_std_filter`` every seed's observations
    pass through that seed's own running filter (``SeedFilters``) before anything sees them.
    Metrics are per seed (``SEED_RESULTS``/<i>/...) and, under RLlib's names, over all seeds'
    episodes; env steps count one seed's."""

    def __init__(self, *, config: AlgorithmConfig, **kwargs: Any):
        super().__init__(config=config, **kwargs)
        self.seeds = [int(seed) for seed in config.model_config[STACKED_SEEDS]]
        self.envs_per_seed = int(config.num_envs_per_env_runner)
        self.window = int(config.metrics_num_episodes_for_smoothing)
        self._weights_seq_no = 0
        self._single_module: Any = None  # see _single_seed_module
        self.make_env()
        self.make_module()

    # -- set-up

    def make_env(self) -> None:
        config = self.config
        creator = getattr(config, "stacked_env_creator", None)
        if config.in_evaluation:  # evaluation plays the env without training-only wrappers
            creator = getattr(config, "stacked_evaluation_env_creator", None) or creator
        make = creator or (lambda _: gym.make(config.env))
        count = len(self.seeds) * self.envs_per_seed
        self.envs = [make(dict(config.env_config)) for _ in range(count)]
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self.discrete = isinstance(self.action_space, gym.spaces.Discrete)
        self.for_env = actions_for_env(
            self.action_space, config.normalize_actions, config.clip_actions
        )
        first = self._start_episodes(seeded=True)
        self._evaluated = False  # an evaluation runner's first evaluation starts seeded
        spaces = {INPUT_ENV_SINGLE_SPACES: (self.observation_space, self.action_space)}
        self.pipelines = {  # what a seed's checkpoint holds besides its module
            COMPONENT_ENV_TO_MODULE_CONNECTOR: config.build_env_to_module_connector(spaces=spaces),
            COMPONENT_MODULE_TO_ENV_CONNECTOR: config.build_module_to_env_connector(spaces=spaces),
        }
        pieces = list(filter_pieces(self.pipelines[COMPONENT_ENV_TO_MODULE_CONNECTOR]))
        size = gym.spaces.flatdim(self.observation_space)
        self.filters = SeedFilters(len(self.seeds), size, pieces[0]) if pieces else None
        self.obs = self.filters(first) if self.filters else first
        self.running_returns = np.zeros(len(self.envs))
        self.running_lengths = np.zeros(len(self.envs), dtype=np.int64)
        self.running_abs = np.zeros(len(self.envs))  # each episode's sum of mean |observation|
        # (return, length, before learning) of each seed's last episodes, and of this call's
        self.recent = [deque(maxlen=self.window) for _ in self.seeds]
        self.ended: list[list[tuple[float, int, bool]]] = [[] for _ in self.seeds]

    def _start_episodes(self, seeded: bool) -> np.ndarray:
        """Every env's first observation of a new episode, flat (N x E, obs); ``seeded``: from
        the seeds a run of each seed alone gives its local env runner's (or evaluation
        runner's) envs."""
        starts: list[int | None] = [None] * len(self.envs)
        if seeded:
            in_evaluation, envs = self.config.in_evaluation, self.envs_per_seed
            starts = [start for seed in self.seeds
                      for start in runner_seeds(seed, 0, in_evaluation, envs)[1]]  # fmt: skip
        return np.stack([np.asarray(env.reset(seed=start)[0], dtype=np.float32).ravel()
                         for env, start in zip(self.envs, starts, strict=True)])  # fmt: skip

    def make_module(self) -> None:
        self.module = RLModuleSpec(
            module_class=self.config.stacked_module,
            observation_space=self.observation_space,
            action_space=self.action_space,
            model_config=dict(self.config.model_config),
        ).build()

    def get_spaces(self) -> dict[str, tuple[gym.Space, gym.Space]]:
        spaces = (self.observation_space, self.action_space)
        return {
            INPUT_ENV_SPACES: spaces,
            INPUT_ENV_SINGLE_SPACES: spaces,
            DEFAULT_MODULE_ID: spaces,
        }

    def assert_healthy(self) -> None:
        assert self.envs and self.module is not None

    # -- sampling

    def sample(self, num_episodes: int | None = None, **kwargs: Any) -> list[Any]:
        """One rollout of ``stacked_steps_per_sample`` vector steps; as an evaluation runner
        (RLlib's evaluation config), each seed's ``num_episodes`` greedy episodes instead."""
        if self.config.in_evaluation:
            return self._evaluate(int(num_episodes or 1))
        return self._rollout()

    def _rollout(self) -> list[StackedRollout]:
        # Episodes ended in this call were played before any update.
        lifetime = self.num_env_steps_sampled_lifetime
        self._before_learning = lifetime < max(1, self.config.stacked_learning_starts())
        steps = self.config.stacked_steps_per_sample()
        count = len(self.envs)
        obs_rows, actions, logps, rewards, terminated, truncated, next_obs = ([] for _ in range(7))
        for step in range(steps):
            with torch.no_grad():
                action, logp = self._act(lifetime + step * self.envs_per_seed)
            if logp is not None:
                logps.append(logp)
            actions.append(action)
            played = self.for_env(action.numpy())
            if self.discrete:  # Python ints: a Discrete space checks them without numpy's dtypes
                played = played.tolist()
            self.running_abs += np.abs(self.obs).mean(axis=1)
            step_rewards = np.zeros(count, dtype=np.float32)
            ended = np.zeros((2, count), dtype=bool)
            after, current = np.empty_like(self.obs), np.empty_like(self.obs)
            restarted = []
            for k, env in enumerate(self.envs):
                o, r, term, trunc, _ = env.step(played[k])
                after[k] = np.ravel(o)
                step_rewards[k], ended[0, k], ended[1, k] = r, term, trunc
                if term or trunc:
                    restarted.append(k)
                    o, _ = env.reset()
                current[k] = np.ravel(o)
            if self.filters:  # each env's next observation (or final one), then new episodes'
                after = self.filters(after)
                current, raw = after.copy(), current
                if restarted:
                    new = np.zeros(count, dtype=bool)
                    new[restarted] = True
                    current[restarted] = self.filters(raw, new)[restarted]
            self.running_returns += step_rewards
            self.running_lengths += 1
            for k in restarted:
                self._episode_ended(k, bool(ended[1, k] and not ended[0, k]))
            obs_rows.append(self.obs)
            next_obs.append(after)
            self.obs = current
            rewards.append(step_rewards)
            terminated.append(ended[0])
            truncated.append(ended[1])
        columns = {
            Columns.OBS: self._by_seed(torch.from_numpy(np.stack(obs_rows))),
            Columns.NEXT_OBS: self._by_seed(torch.from_numpy(np.stack(next_obs))),
            Columns.ACTIONS: self._by_seed(torch.stack(actions)),
            "rewards": self._by_seed(torch.from_numpy(np.stack(rewards))),
            "terminateds": self._by_seed(torch.from_numpy(np.stack(terminated))),
            "truncateds": self._by_seed(torch.from_numpy(np.stack(truncated))),
        }
        if logps:
            columns[Columns.ACTION_LOGP] = self._by_seed(torch.stack(logps))
        rollout = StackedRollout(columns)
        self._log_steps(rollout.env_steps())
        return [rollout]

    def _evaluate(self, episodes: int) -> list[StackedRollout]:
        """Each seed's first ``episodes`` greedy episodes to end, its envs starting new
        episodes (at the first evaluation from the seeds a run of that seed alone gives its
        evaluation runner's envs); observations pass each seed's filter without updating it. Logs
        RLlib's episode results over all seeds and each seed's under ``SEED_RESULTS``/<i>;
        returns nothing to learn from."""
        obs = self._start_episodes(seeded=not self._evaluated)
        self._evaluated = True
        returns, lengths = np.zeros(len(obs)), np.zeros(len(obs), dtype=np.int64)
        ended: list[list[tuple[float, int]]] = [[] for _ in self.seeds]
        while any(len(done) < episodes for done in ended):
            shown = self.filters.normalise(obs) if self.filters else obs
            with torch.no_grad():
                played = self.for_env(self._greedy(shown).numpy())
            for k, env in enumerate(self.envs):
                seed_index = k // self.envs_per_seed
                if len(ended[seed_index]) >= episodes:
                    continue  # this seed has its episodes: its envs wait
                o, r, term, trunc, _ = env.step(played[k].item() if self.discrete else played[k])
                returns[k] += r
                lengths[k] += 1
                if term or trunc:
                    ended[seed_index].append((float(returns[k]), int(lengths[k])))
                    returns[k], lengths[k] = 0.0, 0
                    o, _ = env.reset()
                obs[k] = np.ravel(o)
        log = self.metrics.log_value
        played_episodes = [done[:episodes] for done in ended]
        for key, position in ((EPISODE_RETURN_MEAN, 0), (EPISODE_LEN_MEAN, 1)):
            every = [episode[position] for done in played_episodes for episode in done]
            log(key, float(np.mean(every)), window=1)
            for index, done in enumerate(played_episodes):
                mean = float(np.mean([episode[position] for episode in done]))
                log((SEED_RESULTS, str(index), key), mean, window=1)
        log(NUM_EPISODES, len(self.seeds) * episodes, window=1)
        for index in range(len(self.seeds)):
            log((SEED_RESULTS, str(index), NUM_EPISODES), episodes, window=1)
        return []

    def _greedy(self, obs: np.ndarray) -> torch.Tensor:
        """Every row's greedy action: the module's own, or its inference distribution's
        deterministic one (a Categorical's argmax, a Gaussian's mean)."""
        out = self.module.forward_inference({Columns.OBS: torch.from_numpy(obs)})
        if Columns.ACTIONS in out:
            return out[Columns.ACTIONS]
        dist_class = self.module.get_inference_action_dist_cls()
        return dist_class.from_logits(out[Columns.ACTION_DIST_INPUTS]).to_deterministic().sample()

    def _act(self, t: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Every env's action for the current observations at env step ``t`` (one seed's), and
        its log-probability where the module's distribution gives one: the module's own action
        where its exploration draws it (SAC's uniform warm-up), else a draw from its
        exploration distribution."""
        out = self.module.forward_exploration({Columns.OBS: torch.from_numpy(self.obs)}, t=t)
        if Columns.ACTIONS in out:
            return out[Columns.ACTIONS], out.get(Columns.ACTION_LOGP)
        dist_class = self.module.get_exploration_action_dist_cls()
        dist = dist_class.from_logits(out[Columns.ACTION_DIST_INPUTS])
        action = dist.sample()
        return action, dist.logp(action)

    def _by_seed(self, tensor: torch.Tensor) -> torch.Tensor:
        """(steps, N x E, ...) seed-major rows as (N, steps, E, ...)."""
        steps, rows = tensor.shape[:2]
        shaped = tensor.reshape(steps, len(self.seeds), rows // len(self.seeds), *tensor.shape[2:])
        return shaped.transpose(0, 1).contiguous()

    def _episode_ended(self, env_index: int, truncated: bool) -> None:
        seed_index = env_index // self.envs_per_seed
        length = int(self.running_lengths[env_index])
        episode = (float(self.running_returns[env_index]), length, self._before_learning)
        self.recent[seed_index].append(episode)
        self.ended[seed_index].append(episode)
        log = self.metrics.log_value
        log(NUM_EPISODES, 1, reduce="sum")
        seed = (SEED_RESULTS, str(seed_index))
        log((*seed, NUM_EPISODES), 1, reduce="sum")
        # What the training-health diagnoses read of each seed's episodes (rlplat.health).
        obs_abs = float(self.running_abs[env_index]) / max(length, 1)
        for key, value in ((EPISODES_ENDED, 1), (EPISODES_TRUNCATED, int(truncated)),
                           (OBS_ABS_SUM, obs_abs)):  # fmt: skip
            log((*seed, HEALTH_KEY, key), value, reduce="sum")
        self.running_returns[env_index], self.running_lengths[env_index] = 0.0, 0
        self.running_abs[env_index] = 0.0

    def _log_steps(self, steps: int) -> None:
        """This call's env steps; each seed's mean return and length over the episodes it
        finished in this call (RLlib's ``episode_return_mean``), and over its last
        ``metrics_num_episodes_for_smoothing`` episodes (``window``: kept from call to call, as
        rlplat's ``window/`` results are)."""
        self.num_env_steps_sampled_lifetime += steps
        self.metrics.log_value(NUM_ENV_STEPS_SAMPLED, steps, reduce="sum")
        self.metrics.log_value(NUM_ENV_STEPS_SAMPLED_LIFETIME, steps, reduce="lifetime_sum")
        every = [episode for ended in self.ended for episode in ended]
        for key, position in ((EPISODE_RETURN_MEAN, 0), (EPISODE_LEN_MEAN, 1)):
            if every:
                self.metrics.log_value(key, float(np.mean([e[position] for e in every])), window=1)
            for index, (ended, recent) in enumerate(zip(self.ended, self.recent, strict=True)):
                if ended:
                    mean = float(np.mean([episode[position] for episode in ended]))
                    self.metrics.log_value((SEED_RESULTS, str(index), key), mean, window=1)
                if recent:
                    mean = float(np.mean([episode[position] for episode in recent]))
                    self.metrics.log_value(
                        (SEED_RESULTS, str(index), SEED_WINDOW, key), mean, window=1
                    )
        for index, recent in enumerate(self.recent):
            if recent:
                window = (SEED_RESULTS, str(index), SEED_WINDOW)
                self.metrics.log_value((*window, NUM_EPISODES), len(recent), window=1)
                before = sum(episode[2] for episode in recent)
                self.metrics.log_value((*window, BEFORE_LEARNING), before, window=1)
        self.ended = [[] for _ in self.seeds]

    def get_metrics(self) -> Any:
        return self.metrics.reduce()

    # -- one seed as a policy

    def save_seed(self, index: int, path: Path) -> None:
        """The stack's ``index``-th seed as the parts of a checkpoint that acting restores
        (``rlplat.policy.restore``: ``rlplat eval``, ``export``, ``serve``): its module as the
        single-seed module of the config (``single_seed_module_spec``) holding its slice of
        the stacked weights, the config's env-to-module pipeline (its observation filter with
        the seed's statistics) and module-to-env pipeline, and the env steps it sampled."""
        single = self._single_seed_module()
        single.load_state_dict(single.state_dict() | self.module.seed_module_state(index))
        modules = path / COMPONENT_LEARNER_GROUP / COMPONENT_LEARNER / COMPONENT_RL_MODULE
        single.save_to_path(modules / DEFAULT_MODULE_ID)
        if self.filters:
            for piece in filter_pieces(self.pipelines[COMPONENT_ENV_TO_MODULE_CONNECTOR]):
                piece.set_state(self.filters.seed_state(index, piece))
        runner = path / COMPONENT_ENV_RUNNER
        for name, pipeline in self.pipelines.items():
            # With its state given, a pipeline writes only its pieces that have state, as an
            # env runner's checkpoint does (asked for its own, it asks each stateless piece).
            pipeline.save_to_path(runner / name, state=pipeline.get_state())
        steps = {NUM_ENV_STEPS_SAMPLED_LIFETIME: self.num_env_steps_sampled_lifetime}
        (runner / "state.pkl").write_bytes(pickle.dumps(steps))

    def _single_seed_module(self) -> Any:
        """The module of one seed, built once (a checkpoint of 16 seeds would build it 16 times)
        and given each seed's weights."""
        if self._single_module is None:
            model_config = {k: v for k, v in self.config.model_config.items()
                            if k != STACKED_SEEDS}  # fmt: skip
            spec = self.config.single_seed_module_spec(
                self.observation_space, self.action_space, model_config
            )
            with torch.random.fork_rng():  # building draws weights: not from the seeds' stream
                self._single_module = spec.build()
        return self._single_module

    # -- state

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> dict[str, Any]:
        state: dict[str, Any] = {
            NUM_ENV_STEPS_SAMPLED_LIFETIME: self.num_env_steps_sampled_lifetime,
            RECENT_EPISODES: [list(recent) for recent in self.recent],
        }
        if self.filters:
            state[OBSERVATION_FILTERS] = self.filters.get_state()
        if state_requested(COMPONENT_RL_MODULE, components, not_components):
            state[COMPONENT_RL_MODULE] = self.module.get_state()
            state[WEIGHTS_SEQ_NO] = self._weights_seq_no
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        if COMPONENT_RL_MODULE in state:
            seq_no = state.get(WEIGHTS_SEQ_NO, 0)
            if seq_no == 0 or self._weights_seq_no < seq_no:
                module_state = state[COMPONENT_RL_MODULE]
                if DEFAULT_MODULE_ID in module_state:
                    module_state = module_state[DEFAULT_MODULE_ID]
                self.module.set_state(module_state)
            self._weights_seq_no = max(self._weights_seq_no, seq_no)
        if NUM_ENV_STEPS_SAMPLED_LIFETIME in state:
            self.num_env_steps_sampled_lifetime = state[NUM_ENV_STEPS_SAMPLED_LIFETIME]
        if self.filters and OBSERVATION_FILTERS in state:
            self.filters.set_state(state[OBSERVATION_FILTERS])
        if RECENT_EPISODES in state:  # a resumed stack's window goes on from its checkpoint's
            self.recent = [deque(map(tuple, saved), maxlen=self.window)
                           for saved in state[RECENT_EPISODES]]  # fmt: skip

    def get_ctor_args_and_kwargs(self) -> tuple[tuple, dict[str, Any]]:
        return (), {"config": self.config}

    def get_checkpointable_components(self) -> list[tuple[str, Any]]:
        return [(COMPONENT_RL_MODULE, self.module)]

    def stop(self) -> None:
        for env in self.envs:
            env.close()
