"""Replay of time-aligned joint transitions: every agent's observation, action, reward, next
observation and termination at the same env step.

MADDPG's centralised critics read all agents at once, so a sampled row must hold every agent's
data from the same step. RLlib's multi-agent replay buffers sample each agent's transitions on
their own, so MADDPG keeps this store instead: a ring buffer of ``capacity`` env steps per agent.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlplat.algorithms.base import ReplayMemory

FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated")


def column(field: str, index: int) -> str:
    """The batch column of agent ``index`` (its place in the joint layout) for ``field``."""
    return f"{field}_{index}"


def joint_transitions(episode: Any, agents: list[str]) -> dict[str, np.ndarray] | None:
    """A MultiAgentEpisode chunk's steps as joint transitions (columns ``obs_<i>`` ...), or None
    when its agents did not all act at every step (then no aligned row exists)."""
    pieces = [episode.agent_episodes.get(agent) for agent in agents]
    if any(piece is None for piece in pieces):
        return None
    steps = {len(piece) for piece in pieces}
    if len(steps) != 1 or 0 in steps:
        return None
    [length] = steps
    arrays: dict[str, np.ndarray] = {}
    for index, piece in enumerate(pieces):
        observations = np.asarray(piece.get_observations(slice(0, length + 1)), np.float32)
        observations = observations.reshape(length + 1, -1)
        actions = np.asarray(piece.get_actions(slice(0, length)))
        terminated = np.zeros(length, np.float32)
        terminated[-1] = float(piece.is_terminated)
        arrays[column("obs", index)] = observations[:-1]
        arrays[column("next_obs", index)] = observations[1:]
        arrays[column("actions", index)] = (
            actions.reshape(length, -1).astype(np.float32)
            if actions.dtype.kind == "f"
            else actions.reshape(length).astype(np.int64)
        )
        arrays[column("rewards", index)] = np.asarray(
            piece.get_rewards(slice(0, length)), np.float32
        )
        arrays[column("terminated", index)] = terminated
    return arrays


class JointReplay(ReplayMemory):
    """The last ``capacity`` joint transitions; ``sample`` draws rows uniformly."""

    def __init__(self, capacity: int, agents: list[str], seed: int | None = None):
        super().__init__(seed)
        self.capacity = capacity
        self.agents = list(agents)
        self.columns: dict[str, np.ndarray] = {}
        self.size = 0
        self.next = 0  # where the next row is written
        self.skipped_steps = 0  # steps of chunks whose agents were not aligned

    def __len__(self) -> int:
        return self.size

    def get_num_timesteps(self) -> int:
        return self.size

    def stats(self) -> dict[str, int]:
        return {"steps_stored": self.size, "steps_not_aligned": self.skipped_steps}

    def add(self, episodes: list[Any]) -> None:
        for episode in episodes:
            arrays = joint_transitions(episode, self.agents)
            if arrays is None:
                self.skipped_steps += episode.env_steps()
                continue
            self._write(arrays)

    def _write(self, arrays: dict[str, np.ndarray]) -> None:
        if not self.columns:
            self.columns = {
                key: np.zeros((self.capacity, *value.shape[1:]), value.dtype)
                for key, value in arrays.items()
            }
        count = len(next(iter(arrays.values())))
        rows = (self.next + np.arange(count)) % self.capacity
        for key, value in arrays.items():
            self.columns[key][rows] = value
        self.next = int((self.next + count) % self.capacity)
        self.size = min(self.capacity, self.size + count)

    def sample(self, count: int) -> dict[str, np.ndarray]:
        rows = self.rng.integers(0, self.size, size=count)
        return {key: value[rows] for key, value in self.columns.items()}

    def contents(self) -> dict[str, Any]:
        return {
            "columns": {key: value[: self.size] for key, value in self.columns.items()},
            "next": self.next,
            "size": self.size,
            "capacity": self.capacity,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.columns, self.size, self.next = {}, 0, 0
        columns = state["columns"]
        if columns and state.get("capacity") == self.capacity:
            self._write(columns)
            self.next, self.size = state["next"], state["size"]
        elif columns:  # a new capacity: write oldest first, so a smaller store keeps the newest
            order = np.roll(np.arange(state["size"]), -state["next"])
            self._write({key: value[order] for key, value in columns.items()})
