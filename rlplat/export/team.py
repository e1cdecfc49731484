"""A team algorithm (QMIX, VDN, IQL) exports its agent network: decentralised execution, one
agent at a time.

The mixer only trains; acting is each agent's greedy action over its legal actions from its own
observation and memory. The graph takes one agent's observation (as the multi-agent env returns
it, before the team view flattens it), its action mask when the env has one, and ``state_in``
(an ``action_mask`` input in any case: all ones when the env has no mask):

    state_in = [GRU hidden (recurrent) | one-hot previous action (obs_last_action)
                | one-hot agent id (obs_agent_id)]

and returns ``action``, the Q-values as ``action_dist_inputs`` and ``state_out`` in the same
layout (new hidden state, the action just taken, the same id). The runtime starts every agent
from zeros with its own id set.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from torch import nn
from torch.nn import functional as F

from rlplat.environments.kinds import ACTION_MASK, masked_observation_key
from rlplat.export.graph import (
    GraphParts,
    Input,
    Unsupported,
    describe_action,
    flatten_tensor,
    observation_inputs,
    rebuild_observation,
)
from rlplat.runtime import StatePart, StateSpec


class AgentGraph(nn.Module):
    """One agent's step of a team module's agent network: the module's ``agent`` network (a
    GRU when ``recurrent``), its ``greedy_actions`` and the inputs its settings name
    (``obs_last_action``, ``obs_agent_id``)."""

    def __init__(
        self,
        module: Any,
        observation_space: gym.Space,
        inputs: list[Input],
        layout: list[StatePart],
    ):
        super().__init__()
        self.agent = module.agent
        self.greedy_actions = module.greedy_actions
        self.recurrent = module.recurrent
        self.n_actions = module.n_actions
        self.observation_space = observation_space
        self.observation_inputs = [i for i in inputs if i.name not in (ACTION_MASK, "state_in")]
        self.observation_key = masked_observation_key(observation_space)
        self.layout = {part.name: (part.start, part.size) for part in layout}

    def _part(self, state: torch.Tensor, name: str) -> torch.Tensor:
        start, size = self.layout[name]
        return state[:, start : start + size]

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        count = len(self.observation_inputs)
        leaves = list(inputs[:count])
        mask = inputs[count]
        state = inputs[-1] if self.layout else None
        space = self.observation_space
        if self.observation_key is not None:
            obs = flatten_tensor(space[self.observation_key], leaves[0])
        else:
            obs = flatten_tensor(space, rebuild_observation(space, leaves, self.observation_inputs))
        parts = [obs]
        if "previous_action" in self.layout:
            parts.append(self._part(state, "previous_action"))
        if "agent_id" in self.layout:
            parts.append(self._part(state, "agent_id"))
        hidden = self._part(state, "hidden") if self.recurrent else None
        q, hidden = self.agent(torch.cat(parts, dim=-1), hidden)
        action = self.greedy_actions(q, mask)
        if state is None:
            return action, q
        out = []
        if self.recurrent:
            out.append(hidden)
        if "previous_action" in self.layout:
            out.append(F.one_hot(action, self.n_actions).float())
        if "agent_id" in self.layout:
            out.append(self._part(state, "agent_id"))
        return action, q, torch.cat(out, dim=-1)


def agent_graph(module: Any, team_env: Any) -> GraphParts:
    """The acting graph of a team algorithm's module (QMIX, VDN, IQL) for the agents of
    ``team_env``."""
    members = list(team_env.members)
    spaces = [team_env.env.observation_spaces[agent] for agent in members]
    if any(space != spaces[0] for space in spaces):
        raise Unsupported(
            "the agents' observation spaces differ; one exported agent network needs the same "
            "observation space for every agent (pad them with pad_observations_v0)"
        )
    space = spaces[0]
    inputs = observation_inputs(space)
    if not any(entry.name == ACTION_MASK for entry in inputs):
        # The team view masks every agent (an agent that is gone may only take action 0); the
        # env has no mask of its own, so the runtime passes all ones unless told otherwise.
        inputs.append(Input(ACTION_MASK, None, (module.n_actions,)))
    layout: list[StatePart] = []
    position = 0
    for name, size, present in (
        ("hidden", module.hidden_dim, module.recurrent),
        ("previous_action", module.n_actions, module.obs_last_action),
        ("agent_id", module.n_agents, module.obs_agent_id),
    ):
        if present:
            layout.append(StatePart(name, position, size, members if name == "agent_id" else None))
            position += size
    if layout:
        inputs.append(Input("state_in", None, (position,)))
    graph = AgentGraph(module, space, inputs, layout).eval()
    outputs = ["action", "action_dist_inputs", *(["state_out"] if layout else [])]
    return GraphParts(
        graph=graph,
        inputs=inputs,
        outputs=outputs,
        action=describe_action(gym.spaces.Discrete(module.n_actions)),
        state=StateSpec(position, layout) if layout else None,
    )
