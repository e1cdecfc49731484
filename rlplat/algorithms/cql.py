"""CQL: RLlib's CQL (offline SAC with the conservative Q penalty) whose learner keeps its learned
temperature in its checkpoints (``TemperatureState``); RLlib's leaves it out, so a resumed run
would restart at alpha = 1."""

from ray.rllib.algorithms.cql.cql import CQL as RLlibCQL
from ray.rllib.algorithms.cql.cql import CQLConfig as RLlibCQLConfig
from ray.rllib.algorithms.cql.torch.cql_torch_learner import CQLTorchLearner

from rlplat.algorithms.sac import TemperatureState


class CQLLearner(TemperatureState, CQLTorchLearner):
    """RLlib's CQL torch learner with ``TemperatureState``."""


class CQLConfig(RLlibCQLConfig):
    """RLlib's ``CQLConfig`` whose torch learner is ``CQLLearner``."""

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or CQL)

    def get_default_learner_class(self) -> type:
        return CQLLearner


class CQL(RLlibCQL):
    """RLlib's CQL with ``CQLConfig``."""

    @classmethod
    def get_default_config(cls) -> CQLConfig:
        return CQLConfig(cls)
