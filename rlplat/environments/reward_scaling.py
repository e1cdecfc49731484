"""``reward_scaling``: rewards divided by the running std of the discounted return, for learning.

What Stable-Baselines3's ``VecNormalize(norm_reward=True)`` and CleanRL's ``NormalizeReward`` do
for PPO on MuJoCo (Engstrom et al. 2020, "Implementation Matters", call it reward scaling): keep
``G <- gamma * G + r`` along every episode, track the running variance of ``G`` over all steps,
and learn from ``r / sqrt(var + epsilon)`` clipped to ``[-clip, clip]``. Value targets then stay
near unit scale whatever the env's reward scale.

rlplat applies it in the learner connector pipeline only, as the batch's reward column: the env
runners' episodes keep the env's rewards, so episode returns, evaluation and checkpoint scores
are in the env's units. The statistics and each unfinished episode's running return are the
piece's state, saved in the learner's checkpoint state (``rlplat.engine.learner``). Each
learner keeps its own (with several learners, the first one's is saved), and where IMPALA or
APPO run the learner pipeline in aggregator actors (``num_aggregator_actors_per_learner``) the
statistics live there and are not saved.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns

# Set by RLlib's AddOneTsToEpisodesAndTruncate (PPO's pipeline): every episode chunk then ends in
# an artificial bootstrap step (reward 0) and its id has "_<index>" appended.
ELONGATED = "_added_loss_mask_for_valid_episode_ts"
STALE_CALLS = 100


class RunningVariance:
    """Mean and variance of a stream of numbers, updated a batch at a time (Chan et al.)."""

    def __init__(self) -> None:
        self.mean, self.var, self.count = 0.0, 1.0, 0.0

    def update(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        batch_mean, batch_var, batch_count = float(values.mean()), float(values.var()), values.size
        total = self.count + batch_count
        delta = batch_mean - self.mean
        if self.count == 0:
            self.mean, self.var = batch_mean, batch_var
        else:
            self.mean += delta * batch_count / total
            squares = self.var * self.count + batch_var * batch_count
            self.var = (squares + delta**2 * self.count * batch_count / total) / total
        self.count = float(total)


class RewardScaling(ConnectorV2):
    """Learner piece: each chunk's rewards, scaled by the running std of the discounted return."""

    def __init__(
        self,
        input_observation_space: Any = None,
        input_action_space: Any = None,
        *,
        gamma: float = 0.99,
        clip: float = 10.0,
        epsilon: float = 1e-8,
        **kwargs: Any,
    ) -> None:
        super().__init__(input_observation_space, input_action_space, **kwargs)
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma is a discount in [0, 1], got {gamma}")
        if clip <= 0:
            raise ValueError(f"clip is a positive bound on scaled rewards, got {clip}")
        self.gamma, self.clip, self.epsilon = gamma, clip, epsilon
        self.returns = RunningVariance()
        # Episode id -> (G at the end of its newest chunk, the call that saw it): an episode's
        # next chunk may come in a later batch, or later in the same one.
        self.open_returns: dict[str, tuple[float, int]] = {}
        self.calls = 0

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: list[Any],
        shared_data: dict | None = None,
        **kwargs: Any,
    ) -> Any:
        elongated = bool((shared_data or {}).get(ELONGATED))
        chunks = list(self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False))
        rewards = [np.asarray(c.get_rewards(slice(0, len(c))), dtype=np.float64) for c in chunks]
        self.calls += 1
        discounted = []
        for chunk, chunk_rewards in zip(chunks, rewards, strict=True):
            key = chunk.id_.rsplit("_", 1)[0] if elongated else chunk.id_
            running = self.open_returns.get(key, (0.0, 0))[0] if chunk.t_started > 0 else 0.0
            for reward in chunk_rewards[:-1] if elongated else chunk_rewards:
                running = self.gamma * running + reward
                discounted.append(running)
            if chunk.is_terminated:
                self.open_returns.pop(key, None)
            else:  # cut by the batch (or truncated: a new episode starts again from 0)
                self.open_returns[key] = (float(running), self.calls)
        self._forget_stale()
        self.returns.update(np.asarray(discounted))
        scale = 1.0 / np.sqrt(self.returns.var + self.epsilon)
        for chunk, chunk_rewards in zip(chunks, rewards, strict=True):
            scaled = np.clip(chunk_rewards * scale, -self.clip, self.clip).astype(np.float32)
            self.add_n_batch_items(batch, Columns.REWARDS, list(scaled), len(chunk), chunk)
        return batch

    def _forget_stale(self) -> None:
        """Drop the running returns of episodes no batch continued for ``STALE_CALLS`` calls
        (ended by truncation: their next chunk never comes)."""
        oldest = self.calls - STALE_CALLS
        self.open_returns = {k: v for k, v in self.open_returns.items() if v[1] > oldest}

    def get_state(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        stats = self.returns
        return {
            "mean": stats.mean,
            "var": stats.var,
            "count": stats.count,
            "open_returns": {key: list(value) for key, value in self.open_returns.items()},
            "calls": self.calls,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self.returns.mean, self.returns.var = state["mean"], state["var"]
        self.returns.count = state["count"]
        self.open_returns = {key: tuple(value) for key, value in state["open_returns"].items()}
        self.calls = state["calls"]
