"""The learners of the RLlib algorithms rlplat runs as RLlib ships them: each is RLlib's torch
learner for the algorithm's loss, on ``RlplatLearner`` (``rlplat.engine.learner``); PPO's also
logs how far each update moves the policy (``PolicyChangeStats``). The registry names each
(``learner=``), and ``rlplat.rllib.build`` gives it to the algorithm's config. DreamerV3's is in
``rlplat.algorithms.dreamerv3`` (importing RLlib's DreamerV3 makes a debugging env, whose
warnings no other run should print)."""

from ray.rllib.algorithms.appo.torch.appo_torch_learner import APPOTorchLearner
from ray.rllib.algorithms.impala.torch.impala_torch_learner import IMPALATorchLearner
from ray.rllib.algorithms.iql.torch.iql_torch_learner import IQLTorchLearner
from ray.rllib.algorithms.marwil.torch.marwil_torch_learner import MARWILTorchLearner
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner

from rlplat.algorithms.policy_change import PolicyChangeStats
from rlplat.engine.learner import RlplatLearner


class PPOLearner(PolicyChangeStats, RlplatLearner, PPOTorchLearner):
    """PPO's clipped loss (RLlib's), with ``approx_kl`` and ``clip_fraction`` logged."""


class APPOLearner(RlplatLearner, APPOTorchLearner):
    """APPO's loss (RLlib's)."""


class IMPALALearner(RlplatLearner, IMPALATorchLearner):
    """IMPALA's V-trace loss (RLlib's)."""


class MARWILLearner(RlplatLearner, MARWILTorchLearner):
    """MARWIL's loss (RLlib's), BC's too (MARWIL at beta 0)."""


class IQLLearner(RlplatLearner, IQLTorchLearner):
    """IQL's expectile losses (RLlib's)."""
