"""MAPPO: ``MAPPOConfig`` (every setting) and ``MAPPO`` (PPO's training loop), in one module as
RLlib keeps an algorithm and its config.

MAPPO (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent Games")
is PPO whose value function sees the global state: actors act on their own observations (shared
or per-agent, from ``multi_agent.policies``), each policy's critic values the team's situation.
Centralised values lower the variance of each agent's advantage in cooperative tasks; the critic
is used only in training, so the exported and served policy is the actors'.

The critic's input (``training.global_state``): ``env`` the env's own ``state()``, ``observations``
the agents' observations concatenated, ``auto`` the first where the env has one; followed by the
agent's one-hot place among the env's agents (EPyMARL's central-V critic). Every other setting
is PPO's, with PPO's defaults.
"""

# No ``from __future__ import annotations``: rlplat checks YAML values against these signatures.
from collections.abc import Callable
from typing import Any, Literal

from ray.rllib.algorithms.ppo import PPO, PPOConfig

from rlplat.algorithms.base import OwnAlgorithmConfig
from rlplat.algorithms.mappo.learner import MAPPOLearner
from rlplat.algorithms.mappo.rl_module import CRITIC_STATE_SIZE, MAPPOModule
from rlplat.environments.global_state import GlobalStateError, critic_state_size, resolve_source


class MAPPOConfig(OwnAlgorithmConfig, PPOConfig):
    """PPO with a centralised critic, for simultaneous-move multi-agent envs."""

    MODULE_CLASS = MAPPOModule
    LEARNER_CLASS = MAPPOLearner
    MODULE_KEYS = (CRITIC_STATE_SIZE,)

    global_state: Literal["auto", "env", "observations"] = "auto"

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or MAPPO)
        # The critic's input length; rlplat sets it from the env. Not a YAML setting.
        self.critic_state_size: int | None = None

    def fit_to_env(self, env: Any, policy_of: Callable[[str], Any]) -> None:
        if not env.multi_agent:
            return  # the env check refuses it, saying why
        try:
            source = resolve_source(self.global_state, env.state_space)
        except GlobalStateError:
            return  # the env check refuses it, saying why
        self.critic_state_size = critic_state_size(source, env.state_space, env.observation_spaces)

    def problems(self) -> list[str]:
        problems = super().problems()
        if not self.critic_state_size:
            problems.append("critic_state_size is missing (rlplat sets it from a multi-agent env)")
        if self.model_config.get("use_lstm"):
            problems.append(
                "rl_module.model_config.use_lstm: MAPPO's actors and critic are feed-forward "
                "(the critic already sees the team's state); use PPO for recurrent policies"
            )
        return problems


class MAPPO(PPO):
    """PPO's training loop on ``MAPPOConfig``."""

    @classmethod
    def get_default_config(cls) -> MAPPOConfig:
        return MAPPOConfig(cls)
