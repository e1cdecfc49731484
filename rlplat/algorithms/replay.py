"""A transition-level sampler for RLlib's episode replay buffer (DQN, SAC).

RLlib's ``EpisodeReplayBuffer`` samples an n-step transition by slicing its episode into a new
episode (every column, a lookback buffer each), hashing the item for a metric, and building a
second one-step episode from the slice: 9.5 ms of a 30 ms DQN update on 128 items here.
``TransitionEpisodeReplayBuffer`` stores episodes exactly as RLlib does and draws the same items
with the same random numbers, but reads each transition's few values directly.

It also ends n-step transitions correctly at an episode's end. RLlib marks a transition
terminated only when ``t + n`` lands exactly on the episode's last step, so the last ``n - 1``
transitions of a terminated episode bootstrap from its terminal observation; and a transition
cut short by the end of the stored data is discounted as if it had all ``n`` rewards. Here a
transition whose n steps reach a terminated episode's end is terminated, and ``n_step`` (the
exponent of the bootstrap's discount) is the number of rewards it summed. Extra model outputs
(``include_extra_model_outputs``) are those of step ``t``; RLlib's sampler returns the
episode's first step's for every item.

Runs whose learners read only the transition columns keep their steps in
``rlplat.algorithms.transition_memory.TransitionMemory`` instead, which reads the same values
from arrays.

Select it with ``training.replay_buffer_config.type: TransitionEpisodeReplayBuffer`` (single-agent
DQN and SAC); sequence sampling (``batch_length_T``, stateful modules) and random n-step ranges
use RLlib's own sampler. RLlib's config validation accepts only its own buffer names, so the
RLlib config carries ``EpisodeReplayBuffer`` and each trial builds this class in its place.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.env.utils.infinite_lookback_buffer import InfiniteLookbackBuffer

from rlplat.seams.rllib_algorithm import EpisodeReplayHooks

TRANSITION_SAMPLER = "TransitionEpisodeReplayBuffer"


def transition_sampler_requested(replay_buffer_config: dict[str, Any] | None) -> bool:
    """Whether an experiment's ``training.replay_buffer_config`` asks for this sampler."""
    return (replay_buffer_config or {}).get("type") == TRANSITION_SAMPLER


class TransitionEpisodeReplayBuffer(EpisodeReplayHooks):
    """``EpisodeReplayBuffer`` whose n-step samples are read transition by transition."""

    def draw_episodes(
        self,
        num_items: int | None = None,
        *,
        batch_size_B: int | None = None,
        batch_length_T: int | None = None,
        n_step: int | tuple | None = None,
        gamma: float = 0.99,
        include_infos: bool = False,
        include_extra_model_outputs: bool = False,
        to_numpy: bool = False,
        lookback: int = 1,
        min_batch_length_T: int = 0,
        **kwargs: Any,
    ) -> list[SingleAgentEpisode]:
        if batch_length_T or min_batch_length_T or not isinstance(n_step, int):
            return super().draw_episodes(
                num_items,
                batch_size_B=batch_size_B,
                batch_length_T=batch_length_T,
                n_step=n_step,
                gamma=gamma,
                include_infos=include_infos,
                include_extra_model_outputs=include_extra_model_outputs,
                to_numpy=to_numpy,
                lookback=lookback,
                min_batch_length_T=min_batch_length_T,
                **kwargs,
            )
        assert num_items is None or batch_size_B is None, "give num_items or batch_size_B"
        batch_size_B = num_items or batch_size_B or self.batch_size_B
        self.forget_last_sampled()
        index, evicted = self.step_index, self.get_num_episodes_evicted()
        sampled: list[SingleAgentEpisode] = []
        steps: set[tuple[Any, int]] = set()
        episode_indices: set[int] = set()
        count = 0
        while count < batch_size_B:
            # The same draw as RLlib's sampler: a uniform (episode, timestep) index.
            episode_idx, t = index[self.rng.integers(len(index))]
            episode_idx -= evicted
            episode = self.episodes[episode_idx]
            sampled.append(
                transition(episode, t, n_step, gamma, lookback, include_extra_model_outputs)
            )
            steps.add((episode.id_, t))
            episode_indices.add(episode_idx)
            # RLlib's item count, kept as it is so that the same draws give the same batch
            # (near an episode's end it can add 0 or less, so a batch may hold a few more items).
            window_end = min(t + n_step - 1, len(episode))
            count += (window_end - t - (n_step - 1) + 1) or 1
        mean_n_step = float(np.mean([item.extra_model_outputs["n_step"][0] for item in sampled]))
        self._record_sample(batch_size_B, len(episode_indices), len(steps), mean_n_step)
        return sampled

    def _record_sample(
        self, items: int, episodes: int, distinct_steps: int, mean_n_step: float
    ) -> None:
        """Count one single-agent draw (no resampling) and log RLlib's sample metrics for it."""
        self.sampled_timesteps += items
        self.update_sample_metrics(
            num_env_steps_sampled=items,
            num_episodes_per_sample=episodes,
            num_env_steps_per_sample=distinct_steps,
            sampled_n_step=mean_n_step,
            num_resamples=0,
            agent_to_num_steps_sampled={DEFAULT_AGENT_ID: items},
            agent_to_num_episodes_per_sample={DEFAULT_AGENT_ID: episodes},
            agent_to_num_steps_per_sample={DEFAULT_AGENT_ID: distinct_steps},
            agent_to_sampled_n_step={DEFAULT_AGENT_ID: mean_n_step},
            agent_to_num_resamples={DEFAULT_AGENT_ID: 0},
            module_to_num_steps_sampled={DEFAULT_MODULE_ID: items},
            module_to_num_episodes_per_sample={DEFAULT_MODULE_ID: episodes},
            module_to_num_steps_per_sample={DEFAULT_MODULE_ID: distinct_steps},
            module_to_sampled_n_step={DEFAULT_MODULE_ID: mean_n_step},
            module_to_num_resamples={DEFAULT_MODULE_ID: 0},
        )


def transition(
    episode: SingleAgentEpisode,
    t: int,
    n_step: int,
    gamma: float,
    lookback: int,
    include_extra_model_outputs: bool,
) -> SingleAgentEpisode:
    """The n-step transition from step ``t`` as a one-step episode, as RLlib's learners read it:
    ``(o_t, a_t, sum_k gamma^k r_(t+k), o_(t+m))`` with ``m = min(n, steps left)``, terminated
    when those steps end a terminated episode, and ``n_step = m``."""
    end = min(t + n_step, len(episode))
    rewards = np.asarray(episode.get_rewards(slice(t, end)))
    # The discounted sum as RLlib computes it (same floating-point result).
    import scipy.signal  # noqa: PLC0415 - a second of every rlplat process's start otherwise

    discounted = scipy.signal.lfilter([1], [1, -gamma], rewards[::-1], axis=0)[-1]
    reaches_end = end == len(episode)
    summed = end - t
    extra = (
        {k: [episode.get_extra_model_outputs(k, t)] for k in episode.extra_model_outputs}
        if include_extra_model_outputs
        else {}
    )
    item = SingleAgentEpisode(
        id_=episode.id_,
        agent_id=episode.agent_id,
        module_id=episode.module_id,
        observation_space=episode.observation_space,
        action_space=episode.action_space,
        observations=[episode.get_observations(t), episode.get_observations(end)],
        actions=[episode.get_actions(t)],
        rewards=[discounted],
        infos=[episode.get_infos(t), episode.get_infos(end)],
        terminated=episode.is_terminated and reaches_end,
        truncated=episode.is_truncated and reaches_end,
        extra_model_outputs=extra,
        t_started=t,
        len_lookback_buffer=0,
    )
    item.extra_model_outputs["n_step"] = InfiniteLookbackBuffer(
        np.full((1 + lookback,), summed), lookback=lookback
    )
    item.extra_model_outputs["weights"] = InfiniteLookbackBuffer(
        np.ones((1 + lookback,)), lookback=lookback
    )
    return item
