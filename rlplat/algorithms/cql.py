"""CQL: RLlib's CQL (offline SAC with the conservative Q penalty) whose learner keeps its learned
temperature in its checkpoints (``TemperatureState``); RLlib's leaves it out, so a resumed run
would restart at alpha = 1. Its training step also runs with one update per iteration, rlplat's
offline default."""

from ray.rllib.algorithms.cql.cql import CQL as RLlibCQL
from ray.rllib.algorithms.cql.cql import CQLConfig as RLlibCQLConfig
from ray.rllib.algorithms.cql.torch.cql_torch_learner import CQLTorchLearner
from ray.rllib.utils.metrics import (
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    OFFLINE_SAMPLING_TIMER,
    TIMERS,
)

from rlplat.algorithms.sac import FusedSACOptimizers, TemperatureState
from rlplat.engine.learner import RlplatLearner


class CQLLearner(TemperatureState, FusedSACOptimizers, RlplatLearner, CQLTorchLearner):
    """RLlib's CQL torch learner with ``TemperatureState`` and SAC's optimizers fused, on
    rlplat's learner."""


class CQLConfig(RLlibCQLConfig):
    """RLlib's ``CQLConfig`` whose torch learner is ``CQLLearner``."""

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or CQL)
        # RLlib's CQLConfig keeps AlgorithmConfig's lr, which its validate() refuses: CQL
        # learns at its three rates (actor_lr, critic_lr, alpha_lr) only.
        self.lr = None

    def get_default_learner_class(self) -> type:
        return CQLLearner


class CQL(RLlibCQL):
    """RLlib's CQL with ``CQLConfig``."""

    @classmethod
    def get_default_config(cls) -> CQLConfig:
        return CQLConfig(cls)

    def training_step(self) -> None:
        """RLlib's, except with one update per iteration on a learner in this process
        (``dataset_num_iters_per_learner: 1``, the offline default): RLlib's step then samples
        a batch and hands it to the learner as a data iterator, which fails (KeyError: 0)."""
        config = self.config
        if config.num_learners > 0 or config.dataset_num_iters_per_learner != 1:
            return super().training_step()
        with self.metrics.log_time((TIMERS, OFFLINE_SAMPLING_TIMER)):
            batch = self.offline_data.sample(
                num_samples=config.train_batch_size_per_learner, num_shards=0
            )
        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            results = self.learner_group.update(
                batch=batch, minibatch_size=config.train_batch_size_per_learner
            )
            self.metrics.aggregate(results, key=LEARNER_RESULTS)
        return None
