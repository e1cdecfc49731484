"""TD3 and DDPG: ``TD3Config`` (every setting) and ``TD3`` (the training loop), in one module as
RLlib keeps an algorithm and its config.

TD3 (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic Methods")
is DDPG with three changes: twin critics whose minimum is the target (``twin_q``), noise on the
target action (``target_noise``, ``target_noise_clip``) and an actor and target update only
every ``policy_delay`` critic updates. Turning all three off gives DDPG (Lillicrap et al. 2016)
as Fujimoto et al. ran it ("OurDDPG" in their code): ``DDPGConfig`` is exactly that.

Defaults are those of the authors' reference code (github.com/sfujim/TD3, ``main.py`` and
``TD3.py``) unless a comment says otherwise; the YAML sets them under ``training:``.

The loop is DQN's (and SAC's): sample from the env runners into the replay buffer, then make
``training_intensity``-paced learner updates on replayed batches and send the weights back.
"""

# No ``from __future__ import annotations``: rlplat checks YAML values against these signatures.
from ray.rllib.algorithms.dqn.dqn import DQN

from rlplat.algorithms.actor_critic import DeterministicActorCriticConfig
from rlplat.algorithms.base import at_least_one, not_negative
from rlplat.algorithms.td3.learner import TD3TorchLearner
from rlplat.algorithms.td3.rl_module import TD3Module
from rlplat.algorithms.transition_loop import TransitionBatchLoop, TransitionReplayConfig


class TD3Config(TransitionReplayConfig, DeterministicActorCriticConfig):
    """Twin Delayed DDPG for continuous (Box) actions; DDPG by its three switches."""

    MODULE_CLASS = TD3Module
    LEARNER_CLASS = TD3TorchLearner
    MODULE_KEYS = (
        *DeterministicActorCriticConfig.MODULE_KEYS,
        "twin_q",
        "target_noise",
        "target_noise_clip",
    )

    twin_q: bool = True  # two critics, the smaller target value is used
    policy_delay: int = 2  # critic updates per actor (and target) update
    target_noise: float = 0.2  # std of the target action's noise, in [-1, 1] action units
    target_noise_clip: float = 0.5

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or TD3)

    def problems(self) -> list[str]:
        problems = super().problems()
        problems += at_least_one(self, ["policy_delay"])
        problems += not_negative(self, ["target_noise", "target_noise_clip"])
        return problems


class DDPGConfig(TD3Config):
    """DDPG: TD3 with one critic, no target smoothing and an actor update every update."""

    twin_q = False
    policy_delay = 1
    target_noise = 0.0

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or DDPG)


class TD3(TransitionBatchLoop, DQN):
    """TD3 on RLlib's new API stack (see ``TD3Config`` for the settings); DQN's loop."""

    config: TD3Config

    @classmethod
    def get_default_config(cls) -> TD3Config:
        return TD3Config(cls)


class DDPG(TD3):
    """DDPG, as ``DDPGConfig`` sets TD3's switches."""

    @classmethod
    def get_default_config(cls) -> DDPGConfig:
        return DDPGConfig(cls)
