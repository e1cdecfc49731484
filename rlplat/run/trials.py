"""The class each trial runs: its algorithm's class with ``ExperimentTrial`` before it.

Written out, one per algorithm ``algorithm:`` accepts, so that Tune's trial actors and every Ray
worker unpickle them by name and a reader finds the class that ran in a file. An algorithm
registered elsewhere names its own (``register_algorithm(..., trial="module.path:Class")``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ray.rllib.algorithms.appo import APPO
from ray.rllib.algorithms.bc import BC
from ray.rllib.algorithms.impala import IMPALA
from ray.rllib.algorithms.iql import IQL
from ray.rllib.algorithms.marwil import MARWIL
from ray.rllib.algorithms.ppo import PPO

from rlplat.algorithms.cql import CQL
from rlplat.algorithms.crossq import CrossQ
from rlplat.algorithms.maddpg import MADDPG
from rlplat.algorithms.mappo import MAPPO
from rlplat.algorithms.masac import MASAC
from rlplat.algorithms.pqn import PQN
from rlplat.algorithms.qmix import QMIX
from rlplat.algorithms.registry import algorithm_record, canonical_name
from rlplat.algorithms.sac import SAC
from rlplat.algorithms.stacked.crossq import StackedCrossQ
from rlplat.algorithms.stacked.dqn import StackedDQN
from rlplat.algorithms.stacked.ppo import StackedPPO
from rlplat.algorithms.stacked.pqn import StackedPQN
from rlplat.algorithms.stacked.sac import StackedSAC
from rlplat.algorithms.stacked.td3 import StackedTD3
from rlplat.algorithms.td3 import DDPG, TD3
from rlplat.algorithms.transition_loop import DQN
from rlplat.checkpoints import GreedyEvaluation
from rlplat.errors import UserError
from rlplat.run.seed_results import seed_result
from rlplat.run.trainable import ExperimentTrial
from rlplat.util.imports import import_object

with warnings.catch_warnings():
    # RLlib's DreamerV3 module builds and steps a debugging env of RLlib's on import, whose
    # Gymnasium warnings concern no run.
    warnings.simplefilter("ignore", UserWarning)
    from ray.rllib.algorithms.dreamerv3 import DreamerV3


class APPOTrial(ExperimentTrial, APPO):
    registered_name = "APPO"


class BCTrial(ExperimentTrial, BC):
    registered_name = "BC"


class CQLTrial(ExperimentTrial, CQL):
    registered_name = "CQL"


class CrossQTrial(ExperimentTrial, CrossQ):
    registered_name = "CrossQ"


class DDPGTrial(ExperimentTrial, DDPG):
    registered_name = "DDPG"


class DQNTrial(ExperimentTrial, DQN):
    registered_name = "DQN"


class DreamerV3Trial(ExperimentTrial, DreamerV3):
    registered_name = "DreamerV3"


class IMPALATrial(ExperimentTrial, IMPALA):
    registered_name = "IMPALA"


class IQLTrial(ExperimentTrial, IQL):
    registered_name = "IQL"


class MADDPGTrial(ExperimentTrial, MADDPG):
    registered_name = "MADDPG"


class MAPPOTrial(ExperimentTrial, MAPPO):
    registered_name = "MAPPO"


class MARWILTrial(ExperimentTrial, MARWIL):
    registered_name = "MARWIL"


class MASACTrial(ExperimentTrial, MASAC):
    registered_name = "MASAC"


class PPOTrial(ExperimentTrial, PPO):
    registered_name = "PPO"


class PQNTrial(ExperimentTrial, PQN):
    registered_name = "PQN"


class QMIXTrial(ExperimentTrial, QMIX):
    registered_name = "QMIX"


class SACTrial(ExperimentTrial, SAC):
    registered_name = "SAC"


class TD3Trial(ExperimentTrial, TD3):
    registered_name = "TD3"


TRIALS: dict[str, type[ExperimentTrial]] = {
    cls.registered_name: cls
    for cls in ExperimentTrial.__subclasses__()
    if cls.__module__ == __name__
}


class StackedParts:
    """A stacked trial's checkpoints (before ``ExperimentTrial`` and a stacked algorithm)."""

    _latest_evaluation: dict[str, Any] | None = None

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """RLlib's greedy evaluation (each seed's, ``StackedEnvRunner``), kept for the seeds'
        checkpoints."""
        self._latest_evaluation = super().evaluate(*args, **kwargs)  # type: ignore[misc]
        return self._latest_evaluation

    def save_part(self, checkpoint: str, seeds: list[tuple[int, str]]) -> None:
        """The stack's checkpoint at ``checkpoint`` (which evaluates every seed unless this
        iteration did), and each (its index in this stack, path) of ``seeds`` as that seed's
        policy checkpoint (``StackedEnvRunner.save_seed``) with that seed's greedy episodes of
        this iteration, which score it as a separate seed's checkpoint is scored."""
        self.save(checkpoint)  # type: ignore[attr-defined]
        played, iteration = self._latest_evaluation, self.iteration  # type: ignore[attr-defined]
        for index, path in seeds:
            self.env_runner.save_seed(index, Path(path))  # type: ignore[attr-defined]
            if played is not None:
                own = seed_result({"evaluation": played}, index)["evaluation"]
                GreedyEvaluation.from_result(own, iteration).write(Path(path))


class StackedPPOTrial(StackedParts, ExperimentTrial, StackedPPO):
    """The seeds of a ``stacked: true`` PPO experiment, trained as one (rlplat.run.stacked_loop
    runs it; it is no Tune trial)."""

    registered_name = "PPO"


class StackedSACTrial(StackedParts, ExperimentTrial, StackedSAC):
    """The seeds of a ``stacked: true`` SAC experiment, trained as one."""

    registered_name = "SAC"


class StackedTD3Trial(StackedParts, ExperimentTrial, StackedTD3):
    """The seeds of a ``stacked: true`` TD3 experiment, trained as one."""

    registered_name = "TD3"


class StackedDQNTrial(StackedParts, ExperimentTrial, StackedDQN):
    """The seeds of a ``stacked: true`` DQN experiment, trained as one."""

    registered_name = "DQN"


class StackedPQNTrial(StackedParts, ExperimentTrial, StackedPQN):
    """The seeds of a ``stacked: true`` PQN experiment, trained as one."""

    registered_name = "PQN"


class StackedCrossQTrial(StackedParts, ExperimentTrial, StackedCrossQ):
    """The seeds of a ``stacked: true`` CrossQ experiment, trained as one."""

    registered_name = "CrossQ"


STACKED_TRIALS: dict[str, type[ExperimentTrial]] = {
    cls.registered_name: cls
    for cls in (
        StackedCrossQTrial,
        StackedPPOTrial,
        StackedPQNTrial,
        StackedSACTrial,
        StackedTD3Trial,
        StackedDQNTrial,
    )
}


def trainable_for(algorithm: str, *, stacked: bool = False) -> type[ExperimentTrial]:
    """The class a trial of ``algorithm`` (its registered name, any case) runs; with
    ``stacked``, the class that trains a stack of its seeds."""
    name = canonical_name(algorithm)
    if stacked:
        return STACKED_TRIALS[name]
    path = algorithm_record(name).trial
    if path is not None:
        return import_object(path)
    if name not in TRIALS:
        raise UserError(
            f"algorithm {name!r} has no trial class: write one, "
            f"`class {name}Trial(ExperimentTrial, {name})` with `registered_name = {name!r}` "
            "(rlplat.run.trainable.ExperimentTrial), and name it in its registration: "
            f"register_algorithm({name!r}, ..., trial='module.path:{name}Trial')."
        )
    return TRIALS[name]
