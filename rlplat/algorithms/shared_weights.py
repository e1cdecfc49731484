"""The env runner acting with the learner's own weights, where both live in one process.

After every training step RLlib copies the weights from the learner to the env runner, through
numpy and Ray's object store even when both are in the algorithm's process: 1.5-1.6 ms per
training step for DQN CartPole and SAC HalfCheetah (``benchmarks/offpolicy_cost.py``). Where the
algorithm samples with its one local env runner (no remote env runners) and learns with a local
learner, on the same device, and its learner updates only between sampling calls (the
registration's ``synchronous_learner``), the env runner's modules are given the learner's
parameter tensors themselves: what the learner updates is what the env runner acts with, and
rlplat's training loops skip the weight sync (:func:`sync_env_runners`). A module the learner does
not hold (an opponent snapshot, say), or one replaced later, keeps RLlib's copy. RLlib's own
loops (PPO's, DQN's where rlplat's does not apply) still sync once per training step: the copy
then writes each tensor onto itself.
"""

from __future__ import annotations

import weakref
from typing import Any

from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
from torch import nn

# Env runner groups whose local env runner was given its learner's tensors.
_SHARING: weakref.WeakSet[Any] = weakref.WeakSet()


def share_learner_weights(algo: Any) -> bool:
    """Give ``algo``'s local env runner its local learner's parameters, where it can (see the
    module's docstring); whether it did."""
    group = getattr(algo, "env_runner_group", None)
    learners = getattr(algo, "learner_group", None)
    if group is None or learners is None or group.num_remote_workers() or not learners.is_local:
        return False
    runner = group.local_env_runner
    if runner is None or runner.module is None:
        return False
    pairs = _module_pairs(runner.module, _local_learner(learners).module)
    if not pairs or not all(_shareable(acting, learning) for acting, learning in pairs):
        return False
    for acting, learning in pairs:
        _share(acting, learning)
    _SHARING.add(group)
    return True


def sync_env_runners(algo: Any) -> None:
    """The env runners get the learners' new weights, unless the one local env runner acts with
    the learner's own tensors (:func:`share_learner_weights`)."""
    if not _acts_with_learner_weights(algo):
        algo.env_runner_group.sync_weights(
            from_worker_or_learner_group=algo.learner_group, inference_only=True
        )


def _acts_with_learner_weights(algo: Any) -> bool:
    group = algo.env_runner_group
    if group not in _SHARING or group.num_remote_workers() or group.local_env_runner is None:
        return False
    learner = _local_learner(algo.learner_group)
    if learner is None:
        return False
    pairs = _module_pairs(group.local_env_runner.module, learner.module)
    return pairs is not None and _still_shared(pairs)


def _local_learner(learner_group: Any) -> Any:
    """The learner a local ``LearnerGroup`` holds in this process (None for remote learners):
    its public ``foreach_learner`` calls the function on that learner itself, no copy."""
    if not learner_group.is_local:
        return None
    [outcome] = learner_group.foreach_learner(lambda learner: learner)
    return outcome.get()


def _module_pairs(acting: Any, learning: Any) -> list[tuple[nn.Module, nn.Module]] | None:
    """(env runner module, learner module) per module id; None where the learner lacks one."""
    if isinstance(acting, MultiRLModule):
        if not set(acting.keys()) <= set(learning.keys()):
            return None
        return [(acting[key], learning[key]) for key in acting.keys()]
    if DEFAULT_MODULE_ID not in learning.keys():
        return None
    return [(acting, learning[DEFAULT_MODULE_ID])]


def _shareable(acting: Any, learning: Any) -> bool:
    """Every tensor of the acting module has its namesake in the learning one, alike."""
    if not (isinstance(acting, nn.Module) and isinstance(learning, nn.Module)):
        return False
    source = learning.state_dict(keep_vars=True)
    for key, tensor in acting.state_dict(keep_vars=True).items():
        other = source.get(key)
        if other is None or (other.shape, other.dtype, other.device) != (
            tensor.shape,
            tensor.dtype,
            tensor.device,
        ):
            return False
    return True


def _share(acting: nn.Module, learning: nn.Module) -> None:
    source = learning.state_dict(keep_vars=True)
    for key in acting.state_dict(keep_vars=True):
        path, _, name = key.rpartition(".")
        setattr(acting.get_submodule(path), name, source[key])


def _still_shared(pairs: list[tuple[Any, Any]]) -> bool:
    """Every acting module holds its learning module's tensors (a random policy, which is no
    torch module, holds none)."""
    for acting, learning in pairs:
        if not (isinstance(acting, nn.Module) and isinstance(learning, nn.Module)):
            return False
        source = learning.state_dict(keep_vars=True)
        if any(t is not source.get(k) for k, t in acting.state_dict(keep_vars=True).items()):
            return False
    return True

