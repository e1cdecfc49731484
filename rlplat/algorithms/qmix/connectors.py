"""The env runner's connectors for the QMIX team module: one piece each way.

The team env (``rlplat.environments.team``) gives every vector sub-env one Dict observation
holding all agents, and takes one MultiDiscrete action for all of them. For that, RLlib's eleven
default pieces (per-item batching, time-rank padding, state lookup, tensor conversion, then the
reverse and action clipping) come down to stacking each episode's newest observation and
splitting the actions again. Run once per env step, the generic pieces and their per-piece
timers cost more than the team module's forward pass; these two do the same work in one call
each, with the same results (same keys, shapes, dtypes and recurrent state handling).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import tree
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.utils.numpy import convert_to_numpy
from ray.rllib.utils.torch_utils import convert_to_torch_tensor


class TeamObservationsToModule(ConnectorV2):
    """The newest observation of every episode, batched to tensors (B, ...).

    For a recurrent module, also a time axis of 1 and STATE_IN: the episode's last STATE_OUT,
    or the module's initial state when the episode has just started (as RLlib's
    ``AddStatesFromEpisodesToBatch`` decides it).
    """

    def __init__(self, *args: Any, device: torch.device | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._device = device

    def __call__(
        self, *, rl_module: RLModule, batch: dict[str, Any], episodes: list, **kwargs: Any
    ) -> dict[str, Any]:
        newest = [episode.get_observations(-1) for episode in episodes]
        # The team env's observation is one flat Dict of arrays: stacked key by key.
        obs = {key: np.stack([o[key] for o in newest]) for key in newest[0]}
        if rl_module.is_stateful():
            initial = None
            states = []
            for episode in episodes:
                if (episode.t_started == 0 and len(episode) == 0) or (
                    Columns.STATE_OUT not in episode.extra_model_outputs
                ):
                    if initial is None:
                        initial = convert_to_numpy(rl_module.get_initial_state())
                    states.append(initial)
                else:
                    states.append(
                        episode.get_extra_model_outputs(key=Columns.STATE_OUT, indices=-1)
                    )
            batch[Columns.STATE_IN] = tree.map_structure(lambda *s: np.stack(s), *states)
            batch[Columns.OBS] = {key: value[:, None] for key, value in obs.items()}
            return convert_to_torch_tensor(batch, device=self._device)
        batch[Columns.OBS] = {
            key: torch.from_numpy(value).to(self._device) for key, value in obs.items()
        }
        return batch


class TeamActionsToEnv(ConnectorV2):
    """The module's actions as one numpy array (B, n_agents) for the vector env; STATE_OUT as
    one item per episode for the env runner to store with each step."""

    def __call__(
        self, *, rl_module: RLModule, batch: dict[str, Any], episodes: list, **kwargs: Any
    ) -> dict[str, Any]:
        out = convert_to_numpy(batch)
        if Columns.STATE_OUT not in out:
            return out
        out[Columns.ACTIONS] = out[Columns.ACTIONS][:, 0]  # the time axis of 1
        states = out[Columns.STATE_OUT]
        out[Columns.STATE_OUT] = [
            tree.map_structure(lambda s, i=i: s[i], states) for i in range(len(episodes))
        ]
        return out
