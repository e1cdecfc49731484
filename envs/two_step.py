"""The two-step cooperative matrix game of the QMIX paper (Rashid et al., 2018, section 6.1).

Two agents, two actions each, two steps. In the first state, agent_0's action picks the second
state (0 -> 2A, 1 -> 2B); nobody is rewarded. In 2A every joint action pays 7; in 2B the payoff is

                 agent_1: 0   agent_1: 1
    agent_0: 0        0            1
    agent_0: 1        1            8

so the optimal return is 8 (go to 2B, then both play 1). A value decomposition that is only
additive (VDN) cannot represent 2B's payoff well enough to prefer it and settles for 7; QMIX's
monotonic mixing can. Both agents see the state (one-hot) and receive the same (common) reward.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

STATE_1, STATE_2A, STATE_2B = 0, 1, 2
PAYOFF_2B = np.array([[0.0, 1.0], [1.0, 8.0]], dtype=np.float32)
PAYOFF_2A = 7.0
STATE_NAMES = ("1", "2A", "2B", "end")
ONE_HOT_STATE = spaces.Box(0.0, 1.0, (3,), np.float32)


class TwoStepGame(ParallelEnv):
    metadata = {"name": "two_step_v0", "render_modes": ["ansi"], "is_parallelizable": True}

    def __init__(self, render_mode: str | None = None):
        self.possible_agents = ["agent_0", "agent_1"]
        self.agents: list[str] = []
        self.render_mode = render_mode
        self.state_space = ONE_HOT_STATE
        self._state = STATE_1
        self._last = ""

    def observation_space(self, agent: str) -> spaces.Space:
        return ONE_HOT_STATE

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def state(self) -> np.ndarray:
        one_hot = np.zeros(3, np.float32)
        if self._state < 3:
            one_hot[self._state] = 1.0
        return one_hot

    def _observations(self) -> dict[str, np.ndarray]:
        return {agent: self.state() for agent in self.possible_agents}

    def reset(self, seed: int | None = None, options: dict | None = None):
        self.agents = list(self.possible_agents)
        self._state = STATE_1
        self._last = ""
        return self._observations(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]):
        a0, a1 = int(actions["agent_0"]), int(actions["agent_1"])
        if self._state == STATE_1:
            reward, done = 0.0, False
            self._state = STATE_2A if a0 == 0 else STATE_2B
        else:
            reward = PAYOFF_2A if self._state == STATE_2A else float(PAYOFF_2B[a0, a1])
            done = True
        self._last = f"state {STATE_NAMES[self._state if not done else 3]}, actions ({a0}, {a1})"
        self._last += f", reward {reward:g}"
        observations = self._observations()
        rewards = dict.fromkeys(self.agents, reward)
        terminations = dict.fromkeys(self.agents, done)
        truncations = dict.fromkeys(self.agents, False)
        infos: dict[str, dict] = {agent: {} for agent in self.agents}
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last or f"state {STATE_NAMES[self._state]}"
        return None


def parallel_env(**kwargs: Any) -> TwoStepGame:
    return TwoStepGame(**kwargs)
