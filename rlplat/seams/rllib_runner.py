"""RLlib env runners' and episodes' private parts that rlplat's sampling loops use.

rlplat's env runners are RLlib's (registered with ``env_runners(env_runner_cls=...)``) with
their sampling loop replaced or trimmed: rlplat's single-agent array loop, sampling without
timers or the train/eval switch, independent env seeds, a whole vector of envs from a backend.
RLlib's ``EnvRunner`` keeps the loop's state and steps (its connector pipelines, ongoing
episodes, the env step with its failure handling, the metrics of a ``sample`` call, the seed of
the first reset) in private attributes and methods; the public ``sample`` has no hook for
another loop.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.tune.registry import ENV_CREATOR, _global_registry

__all__ = [
    "RunnerHooks",
    "skip_mode_switch",
    "episode_started",
    "registered_env_creator",
    "set_reset_seed",
    "stamp_episode_step",
]


class RunnerHooks:
    """Env-runner mixin (before RLlib's ``SingleAgentEnvRunner`` or ``MultiAgentEnvRunner``):
    the runner's private state and steps under public names, and its sampling loop
    (``_sample``) as ``sample_episodes``, RLlib's until a subclass overrides it."""

    def _sample(self, **kwargs: Any) -> Any:
        return self.sample_episodes(**kwargs)

    def sample_episodes(self, **kwargs: Any) -> Any:
        """The episodes of one ``sample`` call (RLlib's ``_sample``)."""
        return super()._sample(**kwargs)  # type: ignore[misc]

    @property
    def env_to_module(self) -> Any:
        """The env-to-module connector pipeline (``_env_to_module``)."""
        return self._env_to_module  # type: ignore[attr-defined]

    @env_to_module.setter
    def env_to_module(self, pipeline: Any) -> None:
        self._env_to_module = pipeline

    @property
    def module_to_env(self) -> Any:
        """The module-to-env connector pipeline (``_module_to_env``)."""
        return self._module_to_env  # type: ignore[attr-defined]

    @module_to_env.setter
    def module_to_env(self, pipeline: Any) -> None:
        self._module_to_env = pipeline

    @property
    def callbacks(self) -> list[Any]:
        """The RLlib callbacks the runner calls (``_callbacks``)."""
        return self._callbacks  # type: ignore[attr-defined]

    @property
    def needs_initial_reset(self) -> bool:
        """Whether the next sample starts with a reset of every env (``_needs_initial_reset``)."""
        return self._needs_initial_reset  # type: ignore[attr-defined]

    @needs_initial_reset.setter
    def needs_initial_reset(self, value: bool) -> None:
        self._needs_initial_reset = value

    @property
    def ongoing_episodes(self) -> list[Any]:
        """The episode each env is in (``_ongoing_episodes``)."""
        return self._ongoing_episodes  # type: ignore[attr-defined]

    @ongoing_episodes.setter
    def ongoing_episodes(self, value: list[Any]) -> None:
        self._ongoing_episodes = value

    @property
    def cached_to_module(self) -> Any:
        """The module's input for the next step, made after the last (``_cached_to_module``)."""
        return self._cached_to_module  # type: ignore[attr-defined]

    @cached_to_module.setter
    def cached_to_module(self, value: Any) -> None:
        self._cached_to_module = value

    @property
    def weights_seq_no(self) -> int:
        """The version of the weights the runner acts with (``_weights_seq_no``)."""
        return self._weights_seq_no  # type: ignore[attr-defined]

    def reset_envs_and_episodes(self, explore: bool) -> None:
        """Reset every env and start a new episode in each (``_reset_envs_and_episodes``)."""
        self._reset_envs_and_episodes(explore)  # type: ignore[attr-defined]

    def try_env_step(self, actions: Any) -> Any:
        """One vector step, or RLlib's failure marker after an env failed and was restarted
        (``_try_env_step``)."""
        return self._try_env_step(actions)  # type: ignore[attr-defined]

    def new_episode(self, env_index: int, episodes: list[Any]) -> None:
        """A fresh episode for env ``env_index`` in ``episodes`` (``_new_episode``)."""
        self._new_episode(env_index, episodes)  # type: ignore[attr-defined]

    def episode_callback(self, which: str, env_index: int, episodes: list[Any]) -> None:
        """Call the ``which`` episode callback (``_make_on_episode_callback``)."""
        self._make_on_episode_callback(which, env_index, episodes)  # type: ignore[attr-defined]

    def track_ongoing(self, episode: Any) -> None:
        """Keep an ongoing episode's chunk for the episode metrics, as RLlib's loop does
        (``_ongoing_episodes_for_metrics``)."""
        self._ongoing_episodes_for_metrics[episode.id_].append(episode)  # type: ignore[attr-defined]

    def record_sampled(self, finished: list[Any], env_steps: int) -> None:
        """Record one call's finished episodes and env steps as RLlib's loop does: the episodes
        for the episode metrics (``_done_episodes_for_metrics``), the env steps and episodes
        counted (``_log_env_steps``, ``_metrics_num_env_steps_sampled``,
        ``_increase_sampled_metrics``)."""
        self._done_episodes_for_metrics.extend(finished)  # type: ignore[attr-defined]
        self._log_env_steps(  # type: ignore[attr-defined]
            metric=self._metrics_num_env_steps_sampled,  # type: ignore[attr-defined]
            num_steps=env_steps,
        )
        self._increase_sampled_metrics(env_steps, len(finished))  # type: ignore[attr-defined]


def set_reset_seed(runner: Any, seed: Any) -> None:
    """The seed (or one per env) of the envs' first reset: RLlib's env runners hand
    ``_seed`` to the vector env's first reset, and their config carries no seed of its own."""
    runner._seed = seed


def skip_mode_switch(module: Any) -> None:
    """``module`` (a torch RLModule that computes the same in train and eval mode, already in
    eval mode) acts without RLlib's switch to eval and back around every forward pass: its
    public ``forward_exploration``/``forward_inference`` become the ``_forward_*`` passes they
    wrap, on this instance only."""
    module.forward_exploration = module._forward_exploration
    module.forward_inference = module._forward_inference


def stamp_episode_step(episode: SingleAgentEpisode, when: float, first: bool) -> None:
    """The step's wall-clock time ``when`` (and, ``first``, the episode's start), as
    ``add_env_step`` stamps them when it runs during the episode: RLlib reports episodes'
    durations from ``_start_time`` and ``_last_step_time``, which have no setter."""
    episode._last_step_time = when
    if first:
        episode._start_time = when


def episode_started(episode: SingleAgentEpisode) -> bool:
    """Whether the episode has its start time (``_start_time``)."""
    return episode._start_time is not None


def registered_env_creator(name: str) -> Any:
    """The env creator registered with Tune under ``name`` (``register_env``): Tune's registry
    object ``_global_registry`` is private, and RLlib's public ``_get_env_creator`` helpers are
    private too."""
    return _global_registry.get(ENV_CREATOR, name)
