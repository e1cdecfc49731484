"""DreamerV3's learner: RLlib's world-model, actor and critic losses, on ``RlplatLearner``."""

from ray.rllib.algorithms.dreamerv3.torch.dreamerv3_torch_learner import DreamerV3TorchLearner

from rlplat.engine.learner import RlplatLearner


class DreamerV3Learner(RlplatLearner, DreamerV3TorchLearner):
    """DreamerV3's losses (RLlib's)."""
