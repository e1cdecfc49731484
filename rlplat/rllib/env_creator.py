"""The env as training and evaluation build it: the experiment's env; for a team algorithm
(QMIX) that multi-agent env seen as one team (``rlplat.environments.team``); for one with
centralised critics (MAPPO) the env with the critic's input in its infos
(``rlplat.environments.critic_state``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlplat.algorithms.registry import has_central_critic, is_team_algorithm
from rlplat.environments.make import EnvCreator, build_env
from rlplat.environments.team import TEAM_SETTINGS, TeamEnvCreator
from rlplat.experiment.schema import Experiment


def _view_settings(experiment: Experiment) -> dict[str, Any] | None:
    """The settings of the view the algorithm takes of the env: the team view's (QMIX), the
    central critic's global state (MAPPO, MASAC), or None when the env is used as it is."""
    if has_central_critic(experiment.algorithm):
        return {"global_state": experiment.training.get("global_state", "auto")}
    if is_team_algorithm(experiment.algorithm):
        return {key: value for key, value in experiment.training.items() if key in TEAM_SETTINGS}
    return None


def env_creator_for(
    experiment: Experiment, *, evaluation: bool = False
) -> Callable[[dict[str, Any] | None], Any]:
    """The env factory training and evaluation use: the env as the experiment names it, or, for
    a team algorithm (QMIX), that multi-agent env seen as one team. ``evaluation``: without the
    chain's training-only wrappers. An EnvPool backend gets as many threads as the process that
    steps it has CPUs: a remote env runner, or with none the algorithm's own process."""
    resources = experiment.resources
    remote = bool(resources.env_runners.count)
    cpus = resources.env_runners.cpus if remote else resources.driver.cpus
    threads = max(1, int(cpus or 1))
    creator = EnvCreator(experiment.env, evaluation=evaluation, threads=threads)
    settings = _view_settings(experiment)
    if settings is None:
        return creator
    if has_central_critic(experiment.algorithm):
        # Ray's MultiAgentEnv, loaded for a multi-agent training only: evaluating an ONNX
        # export needs neither Ray nor torch.
        from rlplat.environments.critic_state import CriticStateCreator  # noqa: PLC0415

        return CriticStateCreator(creator, **settings)
    return TeamEnvCreator(creator, **settings)


def rllib_env_name(experiment: Experiment) -> str:
    """The name under which the env's creator is registered with Tune.

    Tune's registry is shared by every process of the cluster: trials of a search that build the
    env differently (searched kwargs, team settings) need names of their own.
    """
    view = _view_settings(experiment)
    recipe = json.dumps([experiment.env.model_dump(mode="json"), view], sort_keys=True)
    return f"rlplat/{experiment.env.label}/{hashlib.sha1(recipe.encode()).hexdigest()[:10]}"


def rebuild_env(experiment: Experiment, render_mode: str | None, source: Path) -> Any:
    """Build a run's environment again for evaluation, with ``render_mode`` if given."""
    return build_env(
        env_creator_for(experiment, evaluation=True), experiment.env, render_mode, source
    )
