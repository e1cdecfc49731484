"""rlplat's replay memory for the transition loop: single-agent transitions in preallocated arrays.

RLlib's ``EpisodeReplayBuffer`` deep-copies every episode chunk it is given, concatenates chunks
of one episode, keeps a Python list of (episode, step) pairs and rebuilds that list whenever it
evicts an episode; on DQN CartPole that was 2.2 ms per sampling call of 16 env steps, more than
SB3 spends on its whole update. Where the learner reads only transition columns
(``rlplat.algorithms.transition_loop``), ``TransitionMemory`` stores each env step once, as a row
of arrays written in a ring (the oldest rows are overwritten first), and draws train batches
with a few array operations.

An n-step transition is read from the row's episode, row by row: every row keeps the row of its
episode's next step (an episode's chunks arrive interleaved with other envs' chunks). The values
are those of ``rlplat.algorithms.replay.transition``: the rewards of up to ``n`` steps summed
with their discounts, stopping at the episode's end or at the newest stored step, the observation
after the last of them, terminated only where those steps end a terminated episode, and
``n_step`` the number of rewards summed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from rlplat.algorithms.base import ReplayMemory

NO_ROW = -1


class TransitionMemory(ReplayMemory):
    """The last ``capacity`` env steps of a single-agent run; ``sample_batch`` draws n-step
    transitions uniformly. ``add`` takes the episodes (or chunks of ongoing episodes) an env
    runner returned, in the order it returned them, and keeps no reference to them."""

    def __init__(self, capacity: int, seed: int | None = None):
        super().__init__(seed)
        self.capacity = int(capacity)
        self.rows: dict[str, np.ndarray] = {}  # allocated at the first add
        self.size = 0
        self.next = 0  # the row the next step is written to
        self.open: dict[str, int] = {}  # unfinished episode's id -> its newest step's row
        self.episode_ids: dict[int, str] = {}  # a row's episode number -> the episode's id
        self.spaces: tuple[Any, Any] | None = None  # (observation, action) of the episodes
        self.added_steps = 0
        self.added_episodes = 0
        self.sampled_steps = 0

    def __len__(self) -> int:
        return self.size

    def get_num_timesteps(self) -> int:
        return self.size

    def stats(self) -> dict[str, int]:
        return {
            "num_env_steps_stored": self.size,
            "num_env_steps_added_lifetime": self.added_steps,
            "num_episodes_added_lifetime": self.added_episodes,
            "num_env_steps_sampled_lifetime": self.sampled_steps,
        }

    def add(self, episodes: list[Any]) -> None:
        for episode in episodes:
            if len(episode):
                self._add_episode(episode)

    def _add_episode(self, episode: Any) -> None:
        observations = np.asarray(episode.get_observations())
        actions = np.asarray(episode.get_actions())
        rewards = np.asarray(episode.get_rewards(), dtype=np.float64)
        count = len(actions)
        if self.spaces is None:
            self.spaces = (episode.observation_space, episode.action_space)
        if not self.rows:
            self._allocate(observations[0], actions[0])
        start = max(0, count - self.capacity)  # only the newest steps fit
        rows = (self.next + np.arange(count - start)) % self.capacity
        self._forget_overwritten(rows)
        previous = self.open.pop(episode.id_, None)
        if previous is None:
            number = self.added_episodes  # episodes are numbered in the order they came
            self.added_episodes += 1
            self.episode_ids[number] = episode.id_
        else:
            number = int(self.rows["episode"][previous])
        columns = self.rows
        columns["obs"][rows] = observations[start:count]
        columns["new_obs"][rows] = observations[start + 1 : count + 1]
        columns["actions"][rows] = actions[start:]
        columns["rewards"][rows] = rewards[start:]
        columns["episode"][rows] = number
        columns["t"][rows] = episode.t_started + np.arange(start, count)
        columns["terminated"][rows] = False
        columns["ends"][rows] = False
        columns["following"][rows[:-1]] = rows[1:]
        columns["following"][rows[-1]] = NO_ROW
        if episode.is_done:
            columns["ends"][rows[-1]] = True
            columns["terminated"][rows[-1]] = bool(episode.is_terminated)
        else:
            self.open[episode.id_] = int(rows[-1])
        if previous is not None:
            columns["following"][previous] = rows[0]
        self.next = int((self.next + len(rows)) % self.capacity)
        self.size = min(self.capacity, self.size + len(rows))
        self.added_steps += count

    def _allocate(self, observation: np.ndarray, action: np.ndarray) -> None:
        def column(example: np.ndarray) -> np.ndarray:
            dtype = np.float32 if example.dtype.kind == "f" else example.dtype
            return np.zeros((self.capacity, *example.shape), dtype)

        self.rows = {
            "obs": column(observation),
            "new_obs": column(observation),
            "actions": column(action),
            "rewards": np.zeros(self.capacity, np.float64),
            "episode": np.zeros(self.capacity, np.int64),
            "t": np.zeros(self.capacity, np.int64),
            "terminated": np.zeros(self.capacity, bool),
            "ends": np.zeros(self.capacity, bool),  # the episode ended at this step
            "following": np.full(self.capacity, NO_ROW, np.int64),  # its next step's row
        }

    def _forget_overwritten(self, rows: np.ndarray) -> None:
        """An unfinished episode whose newest row is about to be overwritten continues as a new
        episode (its older steps are gone already: rows are overwritten oldest first)."""
        if self.size + len(rows) <= self.capacity or not self.open:
            return
        overwritten = set(rows.tolist())
        for episode_id, row in list(self.open.items()):
            if row in overwritten:
                del self.open[episode_id]

    def sample_batch(self, num_items: int, n_step: int, gamma: float) -> dict[str, np.ndarray]:
        """``num_items`` uniformly drawn n-step transitions as the learner's train batch columns
        (float observations and rewards as float32)."""
        return self.transitions(self.draw_rows(num_items), n_step, gamma)

    def draw_rows(self, num_items: int) -> np.ndarray:
        """``num_items`` stored rows drawn uniformly, counted as sampled."""
        self.sampled_steps += num_items
        return self.rng.integers(self.size, size=num_items)

    def transitions(self, rows: np.ndarray, n_step: int, gamma: float) -> dict[str, np.ndarray]:
        """The n-step transitions from the steps at ``rows`` (see the module's docstring)."""
        columns = self.rows
        rewards = columns["rewards"][rows].copy()
        last = rows
        summed = np.ones(len(rows), np.int64)
        for k in range(1, n_step):
            following = columns["following"][last]
            going_on = ~columns["ends"][last] & (following != NO_ROW)
            if not going_on.any():
                break
            last = np.where(going_on, following, last)
            rewards += np.where(going_on, gamma**k * columns["rewards"][last], 0.0)
            summed += going_on
        ends = columns["ends"][last]
        terminated = columns["terminated"][last]
        return {
            "obs": columns["obs"][rows],
            "new_obs": columns["new_obs"][last],
            "actions": columns["actions"][rows],
            "rewards": rewards.astype(np.float32),
            "terminateds": terminated,
            "truncateds": ends & ~terminated,
            "n_step": summed,
            "weights": np.ones(len(rows), np.float32),  # uniform replay
        }

    def episodes(self) -> Iterator[tuple[str, int, list[int]]]:
        """Each stored episode (or its stored part) as (episode id, its first stored step's
        number in the episode, its rows in step order), oldest first."""
        columns = self.rows
        seen: set[int] = set()
        for row in self._oldest_first().tolist():
            number = int(columns["episode"][row])
            if number in seen:
                continue
            seen.add(number)
            chain = [row]
            while (row := int(columns["following"][row])) != NO_ROW:
                chain.append(row)
            yield self.episode_ids[number], int(columns["t"][chain[0]]), chain

    def _oldest_first(self) -> np.ndarray:
        """The stored rows in the order they were written."""
        oldest = self.next if self.size == self.capacity else 0
        return (oldest + np.arange(self.size)) % self.capacity

    def contents(self) -> dict[str, Any]:
        """The rows oldest first (``following`` renumbered to match), the unfinished episodes,
        the counters and the spaces."""
        order = self._oldest_first()
        position = np.full(self.capacity, NO_ROW, np.int64)
        position[order] = np.arange(self.size)
        rows = {key: value[order] for key, value in self.rows.items()}
        if rows:
            following = rows["following"]
            rows["following"] = np.where(following == NO_ROW, NO_ROW, position[following])
        numbers = set(rows["episode"].tolist()) if rows else set()
        return {
            "rows": rows,
            "open": {key: int(position[row]) for key, row in self.open.items()},
            "episode_ids": {n: self.episode_ids[n] for n in numbers},
            "spaces": self.spaces,
            "counters": [self.added_steps, self.added_episodes, self.sampled_steps],
            "capacity": self.capacity,
        }

    def restore(self, contents: dict[str, Any]) -> None:
        rows, open_rows = dict(contents["rows"]), dict(contents["open"])
        size = len(rows["episode"]) if rows else 0
        dropped = max(0, size - self.capacity)  # a smaller memory keeps the newest rows
        self.rows, self.size, self.next = {}, 0, 0
        self.episode_ids = dict(contents["episode_ids"])
        self.spaces = contents["spaces"]
        self.added_steps, self.added_episodes, self.sampled_steps = contents["counters"]
        self.open = {key: row - dropped for key, row in open_rows.items() if row >= dropped}
        if not size:
            return
        kept = {key: value[dropped:] for key, value in rows.items()}
        following = kept["following"]
        kept["following"] = np.where(following == NO_ROW, NO_ROW, following - dropped)
        self._allocate(kept["obs"][0], kept["actions"][0])
        for key, value in kept.items():
            self.rows[key][: len(value)] = value
        self.size = size - dropped
        self.next = self.size % self.capacity

    def set_state(self, state: dict[str, Any]) -> None:
        if "episodes" in state:  # RLlib's episode buffer's state, from a run before this memory
            from ray.rllib.env.single_agent_episode import SingleAgentEpisode  # noqa: PLC0415

            self.add([SingleAgentEpisode.from_state(item) for item in state["episodes"]])
            return
        super().set_state(state)
