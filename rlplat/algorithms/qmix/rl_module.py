"""The QMIX RL module: one agent network shared by all agents, and a mixer over their Q-values.

The module acts for the whole team (see ``rlplat.environments.team``): its observation holds
every agent's observation, action mask and previous action, and the global state. Acting
computes all agents' Q-values in one batched pass; training unrolls the agent network over whole
episodes from a zero hidden state, so the hidden state is reset at every episode start in both.
"""

from __future__ import annotations

from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn
from torch.nn import functional as F

from rlplat.algorithms.base import TargetNetworks, WithoutModeSwitch

HIDDEN = "h"
Q_VALUES = "q_values"  # (B, T+1, n_agents, n_actions): every agent's Q for every action
Q_TOTAL = "q_total"  # (B, T, k): mixed Q of the actions taken (k = 1, or n_agents without mixer)


class AgentNetwork(nn.Module):
    """Linear -> ReLU -> GRU cell (or Linear -> ReLU) -> Linear to one Q-value per action."""

    def __init__(self, input_dim: int, hidden_dim: int, n_actions: int, recurrent: bool):
        super().__init__()
        self.recurrent = recurrent
        self.fc1 = nn.Linear(input_dim, hidden_dim)
        self.core = (
            nn.GRUCell(hidden_dim, hidden_dim) if recurrent else nn.Linear(hidden_dim, hidden_dim)
        )
        self.fc2 = nn.Linear(hidden_dim, n_actions)

    def forward(
        self, inputs: torch.Tensor, hidden: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        x = F.relu(self.fc1(inputs))
        if self.recurrent:
            shape = x.shape
            hidden = self.core(x.reshape(-1, shape[-1]), hidden.reshape(-1, shape[-1]))
            hidden = hidden.reshape(shape)
            return self.fc2(hidden), hidden
        return self.fc2(F.relu(self.core(x))), None


def _hypernet(state_dim: int, out_dim: int, embed_dim: int, layers: int) -> nn.Module:
    if layers == 1:
        return nn.Linear(state_dim, out_dim)
    return nn.Sequential(nn.Linear(state_dim, embed_dim), nn.ReLU(), nn.Linear(embed_dim, out_dim))


class QMixer(nn.Module):
    """Q_tot = w2 . elu(w1 . q + b1) + V(s) with w1, w2 >= 0 produced from the state s.

    Non-negative mixing weights make Q_tot monotonic in every agent's Q, so each agent's greedy
    action is also greedy for the team (Rashid et al. 2018).
    """

    def __init__(self, n_agents: int, state_dim: int, embed_dim: int, hyper_dim: int, layers: int):
        super().__init__()
        self.n_agents, self.embed_dim = n_agents, embed_dim
        self.hyper_w1 = _hypernet(state_dim, embed_dim * n_agents, hyper_dim, layers)
        self.hyper_b1 = nn.Linear(state_dim, embed_dim)
        self.hyper_w2 = _hypernet(state_dim, embed_dim, hyper_dim, layers)
        self.value = nn.Sequential(
            nn.Linear(state_dim, embed_dim), nn.ReLU(), nn.Linear(embed_dim, 1)
        )

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        lead = q.shape[:-1]
        q = q.reshape(-1, 1, self.n_agents)
        state = state.reshape(-1, state.shape[-1])
        w1 = self.hyper_w1(state).abs().view(-1, self.n_agents, self.embed_dim)
        b1 = self.hyper_b1(state).view(-1, 1, self.embed_dim)
        hidden = F.elu(torch.bmm(q, w1) + b1)
        w2 = self.hyper_w2(state).abs().view(-1, self.embed_dim, 1)
        total = torch.bmm(hidden, w2) + self.value(state).view(-1, 1, 1)
        return total.view(*lead, 1)


class SumMixer(nn.Module):
    """VDN: Q_tot = sum of the agents' Qs."""

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return q.sum(dim=-1, keepdim=True)


class NoMixer(nn.Module):
    """Independent Q-learning: each agent's Q is fitted to the team's target on its own."""

    def forward(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return q


def masked_argmax(q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return q.masked_fill(mask <= 0, float("-inf")).argmax(dim=-1)


class QMIXModule(WithoutModeSwitch, TorchRLModule, TargetNetworks):
    """Shared agent network + mixer (+ their target copies, made by the learner)."""

    TARGET_NETWORKS = ("agent", "mixer")
    TARGET_PREFIX = "_target_"
    greedy_actions = staticmethod(masked_argmax)  # each agent's, among its legal actions

    def setup(self) -> None:
        config = self.model_config
        spaces = self.observation_space.spaces
        self.n_agents, obs_dim = spaces["obs"].shape
        self.n_actions = spaces["action_mask"].shape[1]
        state_dim = spaces["state"].shape[0]
        self.recurrent = bool(config["recurrent"])
        self.hidden_dim = int(config["agent_hidden_dim"])
        self.obs_agent_id = bool(config["obs_agent_id"])
        self.obs_last_action = bool(config["obs_last_action"])
        input_dim = (
            obs_dim + self.n_actions * self.obs_last_action + self.n_agents * self.obs_agent_id
        )
        self.agent = AgentNetwork(input_dim, self.hidden_dim, self.n_actions, self.recurrent)
        # One-hot ids, made once (acting is per step); moved with the module, not in its state.
        self.register_buffer("_agent_ids", torch.eye(self.n_agents), persistent=False)
        if config["mixer"] == "qmix":
            self.mixer: nn.Module = QMixer(
                self.n_agents,
                state_dim,
                config["mixing_embed_dim"],
                config["hypernet_embed_dim"],
                config["hypernet_layers"],
            )
        else:
            self.mixer = SumMixer() if config["mixer"] == "vdn" else NoMixer()
        self.epsilon_start = float(config["epsilon_start"])
        self.epsilon_finish = float(config["epsilon_finish"])
        self.epsilon_anneal_steps = int(config["epsilon_anneal_steps"])

    # -- acting ------------------------------------------------------------------------------

    def get_initial_state(self) -> dict[str, Any]:
        if not self.recurrent:
            return {}
        return {HIDDEN: torch.zeros(self.n_agents, self.hidden_dim)}

    def epsilon(self, t: int | None) -> float:
        """Linear schedule over env steps ``t`` from epsilon_start to epsilon_finish."""
        fraction = min(1.0, (t or 0) / max(1, self.epsilon_anneal_steps))
        return self.epsilon_start + fraction * (self.epsilon_finish - self.epsilon_start)

    def _act(self, batch: dict[str, Any], epsilon: float) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        if self.recurrent:  # the env runner adds a time axis of 1 for stateful modules
            obs = {key: value[:, 0] for key, value in obs.items()}
            hidden = batch[Columns.STATE_IN][HIDDEN]
        else:
            hidden = None
        q, hidden = self.agent(self._inputs(obs["obs"], obs["prev_actions"]), hidden)
        mask = obs["action_mask"]
        actions = masked_argmax(q, mask)
        if epsilon > 0.0:
            explore = torch.rand(actions.shape, device=actions.device) < epsilon
            if explore.any():
                # The argmax of uniform noise over the allowed actions is uniform among them.
                random_actions = masked_argmax(torch.rand_like(q), mask)
                actions = torch.where(explore, random_actions, actions)
        if not self.recurrent:
            return {Columns.ACTIONS: actions}
        return {Columns.ACTIONS: actions[:, None], Columns.STATE_OUT: {HIDDEN: hidden}}

    # Acting runs once per env step. TorchRLModule's forward_* switch the module to eval mode and
    # back around each call, which walks every submodule twice per step; nothing here (no dropout,
    # no batch norm) behaves differently in either mode, so acting skips the switch.
    def forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward_inference(batch, **kwargs)

    def forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward_exploration(batch, **kwargs)

    @torch.no_grad()
    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._act(batch, 0.0)

    @torch.no_grad()
    def _forward_exploration(
        self, batch: dict[str, Any], t: int | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        return self._act(batch, self.epsilon(t))

    # -- training ----------------------------------------------------------------------------

    def _inputs(self, obs: torch.Tensor, prev_actions: torch.Tensor) -> torch.Tensor:
        """Each agent's network input: observation (+ previous action) (+ one-hot id)."""
        parts = [obs]
        if self.obs_last_action:
            parts.append(prev_actions)
        if self.obs_agent_id:
            ids = self._agent_ids.to(dtype=obs.dtype)
            parts.append(ids.expand(*obs.shape[:-2], self.n_agents, self.n_agents))
        return torch.cat(parts, dim=-1)

    def unroll(self, agent: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Q-values (B, T+1, n, A) of ``agent`` over whole episodes, hidden state from zero.

        ``batch``: obs (B, T+1, n, obs_dim) and actions (B, T, n) of the episodes.
        """
        obs, actions = batch["obs"], batch["actions"].long()
        prev = F.one_hot(actions, self.n_actions).to(obs.dtype)
        prev = torch.cat([torch.zeros_like(prev[:, :1]), prev], dim=1)  # nothing before t=0
        inputs = self._inputs(obs, prev)
        if not self.recurrent:
            return agent(inputs, None)[0]
        batch_size, steps = obs.shape[:2]
        hidden = obs.new_zeros(batch_size, self.n_agents, self.hidden_dim)
        q_values = []
        for t in range(steps):
            q, hidden = agent(inputs[:, t], hidden)
            q_values.append(q)
        return torch.stack(q_values, dim=1)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        q_values = self.unroll(self.agent, batch)
        taken = q_values[:, :-1].gather(-1, batch["actions"].long()[..., None]).squeeze(-1)
        return {Q_VALUES: q_values, Q_TOTAL: self.mixer(taken, batch["state"][:, :-1])}

    # -- target networks ---------------------------------------------------------------------

    def forward_target(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Q_VALUES: self.unroll(self._target_agent, batch)}

    def mix_target(self, q: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return self._target_mixer(q, state)
