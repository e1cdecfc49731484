"""The learner connector piece that gives MAPPO's critic its input."""

from __future__ import annotations

from typing import Any

from ray.rllib.connectors.connector_v2 import ConnectorV2

from rlplat.environments.global_state import CRITIC_STATE


class CriticStateToBatch(ConnectorV2):
    """Each agent step's critic input (``info[CRITIC_STATE]``, which
    ``rlplat.environments.global_state.CriticStateEnv`` wrote) as the batch column
    ``CRITIC_STATE``, row for row beside the observations (the same episodes, the same steps,
    the bootstrap step included)."""

    def __call__(self, *, rl_module: Any, batch: dict, episodes: list, **kwargs: Any) -> dict:
        if CRITIC_STATE in batch:
            return batch
        for episode in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False):
            steps = len(episode)
            infos = episode.get_infos(slice(0, steps))
            self.add_n_batch_items(
                batch, CRITIC_STATE, [info[CRITIC_STATE] for info in infos], steps, episode
            )
        return batch
