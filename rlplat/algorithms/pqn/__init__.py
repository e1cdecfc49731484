"""PQN (parallelised Q-learning with lambda-returns, no replay and no target network), for
Discrete actions."""

from rlplat.algorithms.pqn.pqn import PQN, PQNConfig

__all__ = ["PQN", "PQNConfig"]
