"""Hindsight experience replay (Andrychowicz et al. 2017, "Hindsight Experience Replay") over
rlplat's transition memory, for goal-conditioned envs as Gymnasium-Robotics defines them: Dict
observations with ``observation``, ``achieved_goal`` and ``desired_goal``, and the env's own
``compute_reward(achieved_goal, desired_goal, info)`` over batches of goals.

An episode that missed its goal still shows how to reach the goals it did reach. When a batch is
drawn, each transition is, with probability ``k / (k + 1)`` (``goals_per_transition`` k), given
another goal: the goal its own episode achieved later (``future``: at this step or a later one,
uniformly; ``final``: at the episode's last stored step). Its reward is recomputed by the env's
``compute_reward`` for the new goal, and its end by ``compute_terminated`` where the env has it
(a goal env that ends episodes on success, as bit flipping does); otherwise the stored end stays.
Goals are those of steps already stored, so a transition of an episode still running takes its
goal from the steps it has so far, and the relabelled ``info`` passed to the env is empty (the
envs of Gymnasium-Robotics read none).

The observation the networks see is the goal env's Dict flattened by ``FlatObservation``;
``rlplat.environments.goals.GoalLayout`` says where the achieved and the desired goal sit in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from rlplat.algorithms.transition_memory import NO_ROW, TransitionMemory
from rlplat.environments.goals import GoalFunctions, GoalLayout


@dataclass(frozen=True)
class HindsightSettings:
    """``replay.her``: which later goal a relabelled transition takes, and how many relabelled
    transitions per real one a batch holds on average."""

    strategy: Literal["future", "final"] = "future"
    goals_per_transition: int = 4

    @property
    def relabel_share(self) -> float:
        return self.goals_per_transition / (self.goals_per_transition + 1)


class HindsightMemory(TransitionMemory):
    """``TransitionMemory`` whose drawn batches are relabelled with hindsight goals (see the
    module's docstring). One-step transitions only: an n-step sum would need each of its
    rewards recomputed for the new goal."""

    def __init__(
        self,
        capacity: int,
        seed: int | None,
        settings: HindsightSettings,
        layout: GoalLayout,
        goal: GoalFunctions,
    ):
        super().__init__(capacity, seed)
        self.settings, self.layout, self.goal = settings, layout, goal
        self.relabelled_steps = 0

    def stats(self) -> dict[str, int]:
        return {**super().stats(), "num_relabelled_lifetime": self.relabelled_steps}

    def sample_batch(self, num_items: int, n_step: int, gamma: float) -> dict[str, np.ndarray]:
        if n_step != 1:
            raise ValueError(f"hindsight relabelling replays one-step transitions, not {n_step}")
        rows = self.draw_rows(num_items)
        batch = self.transitions(rows, n_step, gamma)
        relabel = self.rng.random(num_items) < self.settings.relabel_share
        if relabel.any():
            goal_rows = self._goal_rows(rows[relabel])
            self._relabel(batch, relabel, self.rows["new_obs"][goal_rows])
            self.relabelled_steps += int(relabel.sum())
        return batch

    def _goal_rows(self, rows: np.ndarray) -> np.ndarray:
        """For each row, the row whose reached goal it takes: a uniformly chosen one among it
        and its episode's later stored steps (``future``), or the last of them (``final``)."""
        following = self.rows["following"]
        ends = self.rows["ends"]
        later = np.zeros(len(rows), np.int64)  # stored steps after each row, in its episode
        walker = rows.copy()
        while True:
            going_on = ~ends[walker] & (following[walker] != NO_ROW)
            if not going_on.any():
                break
            walker = np.where(going_on, following[walker], walker)
            later += going_on
        if self.settings.strategy == "final":
            return walker
        steps = (self.rng.random(len(rows)) * (later + 1)).astype(np.int64)
        goal_rows = rows.copy()
        for _ in range(int(steps.max(initial=0))):
            moving = steps > 0
            goal_rows = np.where(moving, following[goal_rows], goal_rows)
            steps -= moving
        return goal_rows

    def _relabel(
        self, batch: dict[str, np.ndarray], which: np.ndarray, reached: np.ndarray
    ) -> None:
        layout = self.layout
        goals = reached[:, layout.achieved]
        for column in ("obs", "new_obs"):
            observations = batch[column][which]
            observations[:, layout.desired] = goals
            batch[column][which] = observations
        achieved = batch["new_obs"][which][:, layout.achieved]
        infos = [{} for _ in range(len(goals))]
        rewards = np.asarray(self.goal.compute_reward(achieved, goals, infos), np.float32)
        batch["rewards"][which] = rewards.reshape(-1)
        terminate = self.goal.compute_terminated
        if terminate is not None:
            ended = batch["terminateds"][which] | batch["truncateds"][which]
            terminated = np.asarray(terminate(achieved, goals, infos), bool).reshape(-1)
            batch["terminateds"][which] = terminated
            batch["truncateds"][which] = ended & ~terminated
