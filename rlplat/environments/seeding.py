"""Independent env streams: every env of every env runner seeded from one ``SeedSequence(seed)``.

RLlib seeds env ``i`` of env runner ``w`` with ``seed + w + i`` (as Gymnasium's vector envs do
with an int seed). Seeds 0 and 1 of an 8-env run then share 7 of their 8 env streams, and within
one run env 1 of runner 0 replays env 0 of runner 1. Comparisons over seeds need seeds whose
episodes have nothing in common, so rlplat's env runners derive each env's seed, and a remote
runner's own seed for ``random``, numpy and torch (action sampling), from
``SeedSequence(seed, spawn_key=(role, runner, env))``: training and evaluation runners are
distinct roles. (The local runner shares the algorithm's process, whose generators the learner
seeds with ``seed`` after it.) One seed still reproduces itself exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.utils.debug import update_global_seed_if_necessary

from rlplat.environments.array_runner import ArraySampling
from rlplat.environments.lean_sampling import EpisodesToNumpyOnce, LeanSampling
from rlplat.environments.vector_runner import WholeVector
from rlplat.seams.rllib_runner import set_reset_seed

TRAINING_ROLE, EVALUATION_ROLE = 0, 1


def runner_seeds(seed: int, runner: int, evaluation: bool, num_envs: int) -> tuple[int, list[int]]:
    """The env runner's own seed and one seed per env, each from its own spawned sequence."""
    role = EVALUATION_ROLE if evaluation else TRAINING_ROLE
    # SeedSequence takes non-negative entropy only; a negative seed maps to its two's complement.
    runner_sequence = np.random.SeedSequence(seed % 2**64, spawn_key=(role, runner))
    env_sequences = runner_sequence.spawn(num_envs)
    return _as_int(runner_sequence), [_as_int(each) for each in env_sequences]


def _as_int(sequence: np.random.SeedSequence) -> int:
    """A seed below 2**31: envs in C++ (PettingZoo's Hanabi) take a signed 32-bit seed and
    raise on a larger one, so a full 32-bit seed broke half of their env runners."""
    return int(sequence.generate_state(1, dtype=np.uint32)[0] >> 1)


class IndependentSeeds:
    """Env-runner mixin: after RLlib's set-up, re-seed with :func:`runner_seeds`.

    RLlib passes that seed to the vector env's first reset, which takes one seed per env.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = self.config  # type: ignore[attr-defined]
        if config.seed is None:
            return
        own_seed, env_seeds = runner_seeds(
            config.seed,
            self.worker_index or 0,  # type: ignore[attr-defined]
            config.in_evaluation,
            config.num_envs_per_env_runner,
        )
        set_reset_seed(self, env_seeds)
        update_global_seed_if_necessary(framework=config.framework_str, seed=own_seed)


class SeededSingleAgentEnvRunner(IndependentSeeds, LeanSampling, SingleAgentEnvRunner):
    """RLlib's single-agent env runner with independent env streams, sampling lean."""


class ArrayEnvRunner(IndependentSeeds, LeanSampling, ArraySampling, SingleAgentEnvRunner):
    """rlplat's single-agent env runner: independent env streams, the array loop where it
    applies (``rlplat.environments.array_runner``), RLlib's loop elsewhere."""


class SeededMultiAgentEnvRunner(
    IndependentSeeds, WholeVector, EpisodesToNumpyOnce, LeanSampling, MultiAgentEnvRunner
):
    """RLlib's multi-agent env runner with independent env streams, sampling lean (episodes
    turned to numpy once per call), stepping a backend's whole vector where it makes one (VMAS's
    batched worlds)."""


def seeded_env_runner_class(multi_agent: bool) -> type:
    """The env runner rlplat gives an algorithm that does not bring its own."""
    return SeededMultiAgentEnvRunner if multi_agent else ArrayEnvRunner
