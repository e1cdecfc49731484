"""Replay of whole team episodes, sampled as zero-padded batches (pymarl's episode buffer).

RLlib's multi-agent replay buffers sample each agent's transitions independently and cannot
sample sequences; a mixer needs all agents at the same steps and the GRU needs whole episodes.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from rlplat.algorithms.base import ReplayMemory

# Per-step keys of the team observation stored with each episode (see rlplat.environments.team).
OBS_KEYS = ("obs", "action_mask", "state")


def episode_arrays(episode: Any) -> dict[str, np.ndarray]:
    """A finished SingleAgentEpisode of a TeamEnv as arrays: L+1 observations, L steps."""
    observations = episode.get_observations(slice(0, len(episode) + 1))
    arrays = {key: np.asarray(observations[key], np.float32) for key in OBS_KEYS}
    arrays["actions"] = np.asarray(episode.get_actions(slice(0, len(episode))), np.int64)
    arrays["rewards"] = np.asarray(episode.get_rewards(slice(0, len(episode))), np.float32)
    terminated = np.zeros(len(episode), np.float32)
    terminated[-1] = float(episode.is_terminated)
    arrays["terminated"] = terminated
    return arrays


class EpisodeStore(ReplayMemory):
    """The last ``capacity`` episodes; ``sample`` draws distinct episodes uniformly."""

    def __init__(self, capacity: int, seed: int | None = None):
        super().__init__(seed)
        self.episodes: deque[dict[str, np.ndarray]] = deque(maxlen=capacity)
        self.env_steps = 0  # steps in the stored episodes

    def __len__(self) -> int:
        return len(self.episodes)

    def get_num_timesteps(self) -> int:
        return self.env_steps

    def stats(self) -> dict[str, int]:
        return {"episodes_stored": len(self), "steps_stored": self.env_steps}

    def contents(self) -> dict[str, Any]:
        return {"episodes": list(self.episodes), "env_steps": self.env_steps}

    def restore(self, contents: dict[str, Any]) -> None:
        self.episodes = deque(contents["episodes"], maxlen=self.episodes.maxlen)
        self.env_steps = contents["env_steps"]

    def add(self, episodes: list[Any]) -> None:
        for episode in episodes:
            if episode.t_started != 0 or not episode.is_done or len(episode) == 0:
                continue  # only whole episodes (complete_episodes sampling gives only those)
            if len(self.episodes) == self.episodes.maxlen:
                self.env_steps -= len(self.episodes[0]["actions"])
            arrays = episode_arrays(episode)
            self.episodes.append(arrays)
            self.env_steps += len(arrays["actions"])

    def sample(self, count: int) -> dict[str, np.ndarray]:
        """``count`` distinct stored episodes as one padded batch (``padded_batch``)."""
        picked = [self.episodes[i] for i in self.rng.choice(len(self), count, replace=False)]
        return padded_batch(picked)


def padded_batch(episodes: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Episodes' arrays (``episode_arrays``) zero-padded to the longest; ``filled`` marks real
    steps."""
    count, steps = len(episodes), max(len(e["actions"]) for e in episodes)
    batch: dict[str, np.ndarray] = {}
    for key, value in episodes[0].items():
        length = steps + 1 if key in OBS_KEYS else steps
        # Padded action masks allow every action, so maxima over them stay finite.
        fill = 1.0 if key == "action_mask" else 0
        batch[key] = np.full((count, length, *value.shape[1:]), fill, value.dtype)
    batch["filled"] = np.zeros((count, steps), np.float32)
    for row, episode in enumerate(episodes):
        for key, value in episode.items():
            batch[key][row, : len(value)] = value
        batch["filled"][row, : len(episode["actions"])] = 1.0
    return batch
