"""The QMIX training loop: collect whole episodes, replay batches of them, sync the env runners.

One ``training_step``: every env runner plays complete episodes (greedy w.p. 1 - epsilon), they
are stored whole, then ``updates_per_episode`` learner updates per new episode are made on
batches of ``batch_episodes`` stored episodes, and the new weights go to the env runners.
``min_sample_timesteps_per_iteration`` groups many such steps into one reported iteration.
"""

from __future__ import annotations

from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.execution.rollout_ops import synchronous_parallel_sample
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    LEARNER_RESULTS,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    REPLAY_BUFFER_RESULTS,
)

from rlplat.algorithms.qmix.config import QMIXConfig
from rlplat.algorithms.qmix.episode_store import EpisodeStore


class QMIX(Algorithm):
    """QMIX / VDN / IQL on RLlib's new API stack (see ``QMIXConfig`` for the settings)."""

    config: QMIXConfig

    @classmethod
    def get_default_config(cls) -> QMIXConfig:
        return QMIXConfig(cls)

    def setup(self, config: QMIXConfig) -> None:
        super().setup(config)
        self.episode_store = EpisodeStore(config.buffer_episodes, seed=config.seed)
        self._owed_updates = 0.0

    def training_step(self) -> None:
        config = self.config
        episodes, runner_metrics = synchronous_parallel_sample(
            worker_set=self.env_runner_group,
            concat=True,
            sample_timeout_s=config.sample_timeout_s,
            _uses_new_env_runners=True,
            _return_metrics=True,
        )
        self.metrics.aggregate(runner_metrics, key=ENV_RUNNER_RESULTS)
        self.episode_store.add(episodes)
        self.metrics.log_dict(
            {
                "episodes_stored": len(self.episode_store),
                "steps_stored": self.episode_store.env_steps,
            },
            key=REPLAY_BUFFER_RESULTS,
            window=1,
        )
        if len(self.episode_store) < config.learning_starts_episodes:
            return
        self._owed_updates += len(episodes) * config.updates_per_episode
        updates, self._owed_updates = divmod(self._owed_updates, 1.0)
        env_steps = self.metrics.peek(
            (ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME), default=0
        )
        for _ in range(int(updates)):
            arrays = self.episode_store.sample(config.batch_episodes)
            batch = MultiAgentBatch(
                {DEFAULT_MODULE_ID: SampleBatch(arrays)}, env_steps=int(arrays["filled"].sum())
            )
            results = self.learner_group.update(
                batch=batch, timesteps={NUM_ENV_STEPS_SAMPLED_LIFETIME: env_steps}
            )
            self.metrics.aggregate(results, key=LEARNER_RESULTS)
        if updates:
            self.env_runner_group.sync_weights(
                from_worker_or_learner_group=self.learner_group, inference_only=True
            )
