"""An ONNX export (``rlplat export``) playing episodes through ``rlplat.runtime``: no torch, no Ray.

The export's graphs take observations as the multi-agent env returns them, per agent. QMIX trains
on the team view of that env (``rlplat.environments.team``), which flattens every agent's
observation into one array: :class:`TeamExportActor` takes those apart again
(``gymnasium.spaces.unflatten``) and lets each agent's network act with its own memory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlplat import runtime
from rlplat.environments.kinds import ACTION_MASK, masked_observation_key
from rlplat.environments.make import EnvCreator
from rlplat.environments.team import TeamEnvCreator
from rlplat.errors import UserError
from rlplat.experiment.schema import EnvSpec


class ExportActor:
    """An exported policy as a ``rollout.Actor`` (greedy only: the graph's ``action``)."""

    def __init__(self, directory: Path, manifest: runtime.Manifest):
        self.directory = directory
        self.manifest = manifest
        try:
            self.policy = runtime.load(directory)
        except runtime.ExportError as exc:
            raise UserError(f"cannot load the export {directory}: {exc}.") from None
        self.multi_agent = manifest.multi_agent and not manifest.team
        self.mapping = (manifest.agents or {}).get if self.multi_agent else None

    def reset(self, env: Any, observation: Any, info: Any, seed: int) -> None:
        self.policy.reset()
        self.policy.seed(seed)

    def act(self, observation: Any, explore: bool) -> Any:
        try:
            return self._act(observation)
        except runtime.ExportError as exc:
            raise UserError(
                f"the export {self.directory} cannot act on this env's observations: {exc}. "
                "Was it exported from a run of this experiment?"
            ) from None

    def _act(self, observation: Any) -> Any:
        return self.policy.act(observation)

    def observe(
        self, observation: Any, reward: Any, terminated: Any, truncated: Any, info: Any
    ) -> None:
        """The runtime keeps what it needs (recurrent state, frames) itself."""


class TeamExportActor(ExportActor):
    """A QMIX/VDN/IQL export acting in the team view: one agent network call per member."""

    def reset(self, env: Any, observation: Any, info: Any, seed: int) -> None:
        super().reset(env, observation, info, seed)
        self.members: list[str] = list(env.members)
        self.spaces = [env.env.observation_spaces[agent] for agent in self.members]

    def _act(self, observation: Any) -> np.ndarray:
        actions = []
        for index, agent in enumerate(self.members):
            obs, mask = agent_observation(self.spaces[index], observation, index)
            actions.append(self.policy.policy_for(agent).act(obs, action_mask=mask))
        return np.asarray(actions, dtype=np.int64)


def agent_observation(space: gym.Space, team_observation: dict, index: int) -> tuple[Any, Any]:
    """Agent ``index``'s observation as the multi-agent env gave it, and its action mask."""
    mask = team_observation[ACTION_MASK][index]
    key = masked_observation_key(space)
    if key is not None:
        inner = gym.spaces.unflatten(space[key], team_observation["obs"][index])
        return {key: inner, ACTION_MASK: mask}, mask
    return gym.spaces.unflatten(space, team_observation["obs"][index]), mask


def export_env_creator(manifest: runtime.Manifest, spec: EnvSpec) -> Callable[[dict], Any]:
    """The env as the export's policy acts in it: the experiment's env, or its team view (QMIX)
    with the settings recorded in the manifest."""
    creator = EnvCreator(spec, evaluation=True)
    team = manifest.env.team if manifest.env else None
    return creator if team is None else TeamEnvCreator(creator, **team)


def is_export(path: Path) -> bool:
    """A directory written by ``rlplat export``."""
    return (path / runtime.MANIFEST).is_file()


def export_actor(directory: Path, manifest: runtime.Manifest) -> ExportActor:
    return (TeamExportActor if manifest.team else ExportActor)(directory, manifest)
