"""``training.optimizer``: which torch optimizer an RLlib learner steps, with its settings.

RLlib's new stack gives each module of PPO, APPO, IMPALA, DQN, BC and MARWIL one Adam
(``TorchLearner.configure_optimizers_for_module``) and reads ``AlgorithmConfig.optimizer`` only
on its old stack. rlplat gives that key a meaning on the new one:
``optimizer: {type: sgd, lr: 0.01, momentum: 0.9}`` builds ``torch.optim.SGD(params,
momentum=0.9)`` at learning rate 0.01 (``lr`` left out: ``training.lr``, schedules included).
Each other key is an argument of the torch optimizer (rlplat's learner builds it:
``rlplat.engine.learner``). Algorithms that set up their own
optimizers (SAC, CQL, IQL, TD3 with actor and critic rates; QMIX with ``optimizer: adam |
rmsprop``) are refused with the key to use instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlplat.algorithms.registry import algorithm_record, algorithm_records
from rlplat.engine.learner import sets_up_own_optimizers
from rlplat.engine.optimizers import OPTIMIZERS, optimizer_arguments
from rlplat.errors import ConfigError, not_among


def check_optimizer(
    spec: Any, algorithm: str, learner_class: type, locate: Callable[[str], str]
) -> None:
    """``training.optimizer`` names a known optimizer with arguments it takes, for a learner
    that uses RLlib's one default optimizer per module."""
    key = "training.optimizer"
    if not spec:
        return
    if not isinstance(spec, dict) or "type" not in spec:
        raise ConfigError(
            f"training.optimizer is a mapping with a type ({', '.join(OPTIMIZERS)}) and that "
            f"optimizer's settings, e.g. {{type: sgd, lr: 0.01, momentum: 0.9}}; got {spec!r}.",
            location=locate(key),
            key=key,
        )
    kind = spec["type"]
    if kind not in OPTIMIZERS:
        raise ConfigError(
            f"unknown optimizer type {kind!r}." + not_among(str(kind), list(OPTIMIZERS)),
            location=locate(f"{key}.type"),
            key=f"{key}.type",
        )
    allowed = optimizer_arguments(kind)
    for name in spec:
        if name not in ("type", "lr", *allowed):
            raise ConfigError(
                f"torch.optim.{OPTIMIZERS[kind].__name__} takes no argument {name!r}."
                + not_among(name, ["lr", *allowed]),
                location=locate(f"{key}.{name}"),
                key=f"{key}.{name}",
            )
    if sets_up_own_optimizers(learner_class):
        rates = algorithm_record(algorithm).own_rates or "its own learning-rate keys"
        one_optimizer = [r.name for r in algorithm_records() if r.rllib and not r.own_rates]
        raise ConfigError(
            f"{algorithm}'s learner sets up its own optimizers: set {rates} in training instead. "
            "training.optimizer applies to learners with RLlib's one optimizer per module: "
            f"{', '.join(one_optimizer)}.",
            location=locate(key),
            key=key,
        )

