"""The base of the algorithms rlplat writes (QMIX/VDN/IQL, TD3/DDPG, MADDPG).

An algorithm declares what is its own and the base does the rest:

- ``OwnAlgorithmConfig``: its RL module and learner classes (``MODULE_CLASS``,
  ``LEARNER_CLASS``), and its settings, once, as annotated class attributes (the default, and the
  type rlplat checks YAML values against); ``training()`` takes each of them; ``problems()`` lists
  what is wrong with them (``validate()`` raises them together); ``MODULE_KEYS`` go to the RL
  module's ``model_config``. ``RandomWarmupConfig`` adds ``random_steps``, uniformly random
  actions before the policy acts.
- ``ReplayLoopAlgorithm``: its replay memory, how many updates new data earns and one replayed
  batch (its config's ``LEARNING_STARTS`` names the setting that says when the memory is full
  enough); the loop (sample, store, update, sync weights) is the base's.
- ``TargetNetworkLearner``: its losses per optimizer and when a module's target networks are due
  an update; building them and moving them ``tau`` towards the online ones is the base's.
- ``TargetNetworks``: the RL module names its networks that have target copies;
  ``WithoutModeSwitch`` skips RLlib's train/eval switch around each forward pass.
"""

# No ``from __future__ import annotations``: the settings' annotations are read at run time.
import copy
import inspect
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, get_origin

import numpy as np
import torch
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig, NotProvided
from ray.rllib.core.learner.utils import make_target_network
from ray.rllib.core.rl_module.apis import TargetNetworkAPI
from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec
from ray.rllib.policy.sample_batch import MultiAgentBatch
from ray.rllib.utils.metrics import REPLAY_BUFFER_RESULTS
from ray.rllib.utils.typing import ModuleID, ParamDict
from torch import nn

from rlplat.algorithms.loop import OwedUpdates, sample_round, update_and_sync
from rlplat.engine.learner import RlplatLearner
from rlplat.environments.array_runner import other_pieces
from rlplat.seams.rllib_parts import ModelConfigIncludes


class OwnAlgorithmConfig(ModelConfigIncludes):
    """A config whose own settings are annotated class attributes::

        class TD3Config(OwnAlgorithmConfig):
            policy_delay: int = 2  # critic updates per actor update

    Each instance starts with a copy of every default; ``training(policy_delay=3)`` sets it, and
    passes the base settings on. A subclass changes a default by assigning the attribute again.
    """

    MODULE_CLASS: ClassVar[type]  # the RL module
    LEARNER_CLASS: ClassVar[type]  # the learner
    MODULE_KEYS: ClassVar[tuple[str, ...]] = ()  # settings the RL module reads
    # For a replay loop: the setting that says how full (``len``) the memory must be to learn.
    LEARNING_STARTS: ClassVar[str | None] = None
    MERGED_SETTINGS: ClassVar[tuple[str, ...]] = ()  # dicts that ``training()`` updates
    settings: ClassVar[dict[str, Any]] = {}  # name -> annotation, over the class hierarchy
    _own_settings: ClassVar[dict[str, Any]] = {}  # those this class declares itself

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = inspect.get_annotations(cls, eval_str=True)
        own = {
            n: a for n, a in declared.items() if a is not ClassVar and get_origin(a) is not ClassVar
        }
        cls._own_settings = own
        cls.settings = {  # over every base, so configs can combine setting groups
            name: annotation
            for klass in reversed(cls.__mro__)
            for name, annotation in vars(klass).get("_own_settings", {}).items()
        }
        if own:
            cls.training = _training_method(cls, own)

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class)
        for name in self.settings:
            setattr(self, name, copy.deepcopy(getattr(type(self), name)))

    def problems(self) -> list[str]:
        """What is wrong with the settings, one sentence each (nothing: an empty list)."""
        return []

    def fit_to_env(self, env: Any, policy_of: Callable[[str], Any]) -> None:
        """Settings that come from the env itself (``env``: what the env check found, with
        ``agents`` and spaces by agent; ``policy_of``: agent -> policy), set after the YAML's
        settings; nothing by default."""

    def validate(self) -> None:
        super().validate()
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def get_default_rl_module_spec(self) -> RLModuleSpec:
        return RLModuleSpec(module_class=self.MODULE_CLASS)

    def get_default_learner_class(self) -> type:
        return self.LEARNER_CLASS

    def module_settings(self) -> dict[str, Any]:
        """The settings the RL module reads from its ``model_config``."""
        return {k: getattr(self, k) for k in self.MODULE_KEYS}

    def model_config_includes(self) -> dict[str, Any]:
        return self.module_settings()


def _training_method(cls: type, own: dict[str, Any]) -> Any:
    """``cls.training``: sets the provided settings of ``own`` after the base ones, with a
    signature of keyword-only parameters typed as declared (what rlplat checks YAML against)."""

    def training(self: Any, **kwargs: Any) -> Any:
        provided = {name: kwargs.pop(name) for name in own if name in kwargs}
        super(cls, self).training(**kwargs)
        for name, value in provided.items():
            if value is NotProvided:
                continue
            if name in self.MERGED_SETTINGS:
                value = {**getattr(self, name), **value}
            setattr(self, name, value)
        return self

    keyword = inspect.Parameter.KEYWORD_ONLY
    training.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            *(
                inspect.Parameter(n, keyword, default=NotProvided, annotation=a)
                for n, a in own.items()
            ),
            inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD, annotation=Any),
        ],
        return_annotation=cls,
    )
    training.__module__ = cls.__module__
    training.__qualname__ = f"{cls.__qualname__}.training"
    training.__doc__ = f"{cls.__name__}'s own settings ({', '.join(own)}), then the base ones."
    return training


class RandomWarmupConfig(OwnAlgorithmConfig):
    """An off-policy config whose RL module acts uniformly at random for its first
    ``random_steps`` env steps (it reads ``random_steps`` from its ``model_config``), as
    Stable-Baselines3 and CleanRL do before ``learning_starts`` and the TD3 reference code before
    ``start_timesteps``: the first replayed data covers the action space evenly."""

    # Uniformly random actions for this many env steps; None: as many as
    # num_steps_sampled_before_learning_starts.
    random_steps: int | None = None

    def problems(self) -> list[str]:
        problems = super().problems()
        if self.random_steps is not None:
            problems += not_negative(self, ["random_steps"])
        return problems

    def module_settings(self) -> dict[str, Any]:
        return super().module_settings() | {"random_steps": self.warmup_steps()}

    def warmup_steps(self) -> int:
        """Env steps acted uniformly at random before the policy takes over: ``random_steps``,
        or when that is None as many as ``num_steps_sampled_before_learning_starts``."""
        if self.random_steps is None:
            return self.num_steps_sampled_before_learning_starts or 0
        return self.random_steps


class ReplayMemory:
    """Base of rlplat's own replay memories: sampling draws from a seeded RNG, and the state a
    checkpoint keeps (``get_state``) holds the contents and that RNG, so a resumed run samples
    the same batches."""

    def __init__(self, seed: int | None):
        self.rng = np.random.default_rng(seed)

    def contents(self) -> dict[str, Any]:
        """What the memory holds, for a checkpoint."""
        raise NotImplementedError

    def restore(self, contents: dict[str, Any]) -> None:
        """Hold what ``contents()`` returned (in this or an earlier process)."""
        raise NotImplementedError

    def stats(self) -> dict[str, int]:
        """Counts for the results' replay section."""
        raise NotImplementedError

    def get_num_timesteps(self) -> int:
        """Env steps stored (the name RLlib's replay buffers use)."""
        raise NotImplementedError

    def get_state(self) -> dict[str, Any]:
        return {**self.contents(), "rng": self.rng.bit_generator.state}

    def set_state(self, state: dict[str, Any]) -> None:
        self.restore(state)
        self.rng.bit_generator.state = state["rng"]


class ReplayLoopAlgorithm(Algorithm):
    """One ``training_step``: every env runner samples, the episodes go into the replay memory,
    and once it is ready to learn, the learner updates the new data earned (a fractional rate is
    carried over) are made on replayed batches; then the env runners get the new weights."""

    config_class: ClassVar[type["OwnAlgorithmConfig"]]
    config: "OwnAlgorithmConfig"
    replay_memory: ReplayMemory

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if getattr(cls.config_class, "LEARNING_STARTS", None) is None:
            raise TypeError(f"{cls.__name__}'s config_class must name its LEARNING_STARTS setting")

    @classmethod
    def get_default_config(cls) -> "OwnAlgorithmConfig":
        return cls.config_class(cls)

    def setup(self, config: AlgorithmConfig) -> None:
        super().setup(config)
        self.replay_memory = self.make_replay_memory()
        self._owed_updates = OwedUpdates()

    def training_step(self) -> None:
        episodes = sample_round(self)
        self.replay_memory.add(episodes)
        self.metrics.log_dict(self.replay_memory.stats(), key=REPLAY_BUFFER_RESULTS, window=1)
        if len(self.replay_memory) < getattr(self.config, self.config.LEARNING_STARTS):
            return
        updates = self._owed_updates.add(self.updates_earned(episodes))
        update_and_sync(self, (self.replayed_batch() for _ in range(updates)))

    def make_replay_memory(self) -> ReplayMemory:
        """The empty replay memory, from ``self.config``."""
        raise NotImplementedError

    def updates_earned(self, episodes: list[Any]) -> float:
        """Learner updates (possibly fractional) that these newly sampled episodes earn."""
        raise NotImplementedError

    def replayed_batch(self) -> MultiAgentBatch:
        """One learner update's batch, drawn from the replay memory."""
        raise NotImplementedError


class TargetNetworkLearner(RlplatLearner):
    """A learner whose modules have target networks: it builds them, and after each optimizer
    step moves those of every module whose update is due (``target_update_due``, each
    algorithm's cadence) ``tau`` of the way towards the online ones (1.0: a copy).

    A subclass computes its losses in ``module_losses``, one per optimizer name."""

    LOG_TARGET_UPDATES: ClassVar[bool] = False  # count them in the results (learners/<module>)

    def build(self) -> None:
        super().build()
        self._losses: dict[ModuleID, dict[str, torch.Tensor]] = {}
        self.module.foreach_module(
            lambda mid, module: (
                module.make_target_networks() if isinstance(module, TargetNetworkAPI) else None
            )
        )

    def module_losses(
        self, module_id: ModuleID, config: AlgorithmConfig, batch: dict, fwd_out: dict
    ) -> dict[str, torch.Tensor]:
        """The module's loss for each of its optimizers, by optimizer name."""
        raise NotImplementedError

    def compute_loss_for_module(self, *, module_id: ModuleID, **kwargs: Any) -> torch.Tensor:
        losses = self.module_losses(module_id, kwargs["config"], kwargs["batch"], kwargs["fwd_out"])
        self._losses[module_id] = losses
        return sum(losses.values()) if len(losses) > 1 else next(iter(losses.values()))

    def compute_gradients(
        self, loss_per_module: dict[ModuleID, torch.Tensor], **kwargs: Any
    ) -> ParamDict:
        self._losses.clear()  # one optimizer per module: the total loss's gradients
        return super().compute_gradients(loss_per_module, **kwargs)

    def target_update_due(self, module_id: ModuleID) -> bool:
        """Whether the module's target networks move after this optimizer step."""
        raise NotImplementedError

    def apply_gradients(self, gradients_dict: ParamDict) -> None:
        super().apply_gradients(gradients_dict)
        for module_id in self.module.keys():
            module = self.module[module_id].unwrapped()
            if not isinstance(module, TargetNetworkAPI) or not self.target_update_due(module_id):
                continue
            tau = self.config.get_config_for_module(module_id).tau
            for main, target in module.get_target_network_pairs():
                move_towards(main, target, tau)
            if self.LOG_TARGET_UPDATES:
                self.metrics.log_value((module_id, "target_updates"), 1, reduce="lifetime_sum")


@torch.no_grad()
def move_towards(main: nn.Module, target: nn.Module, tau: float) -> None:
    """Polyak update ``target <- tau * main + (1 - tau) * target`` (``tau`` 1.0: a copy), in place
    with one fused call per network (RLlib's rebuilds and loads a state dict: 4x the time)."""
    targets, mains = list(target.parameters()), list(main.parameters())
    if targets and tau == 1.0:  # (VDN's sum mixer has no weights)
        torch._foreach_copy_(targets, mains)
    elif targets:
        torch._foreach_lerp_(targets, mains, tau)
    for target_buffer, main_buffer in zip(target.buffers(), main.buffers(), strict=True):
        target_buffer.copy_(main_buffer)


class WithoutModeSwitch:
    """RL module mixin (before ``TorchRLModule``) for networks without dropout or batch norm,
    whose train and eval modes compute the same: RLlib's torch modules switch mode around every
    forward pass, a walk over all submodules that costs more than a small network's forward
    pass; these modules skip it."""

    def forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward_inference(batch, **kwargs)

    def forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._forward_exploration(batch, **kwargs)

    def forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return RLModule.forward_train(self, batch, **kwargs)  # (it refuses inference-only ones)


class TargetNetworks(TargetNetworkAPI):
    """RL module mixin: a target copy ``<TARGET_PREFIX><name>`` of each network attribute named
    in ``TARGET_NETWORKS`` (one that is None has a None copy and no pair)."""

    TARGET_NETWORKS: ClassVar[tuple[str, ...]] = ()
    TARGET_PREFIX: ClassVar[str] = "target_"

    def make_target_networks(self) -> None:
        for name in self.TARGET_NETWORKS:
            online = getattr(self, name)
            target = make_target_network(online) if online is not None else None
            setattr(self, self.TARGET_PREFIX + name, target)

    def get_target_network_pairs(self) -> list[tuple[nn.Module, nn.Module]]:
        pairs = (
            (getattr(self, n), getattr(self, self.TARGET_PREFIX + n)) for n in self.TARGET_NETWORKS
        )
        return [(main, target) for main, target in pairs if main is not None]


def at_least_one(config: AlgorithmConfig, names: Iterable[str]) -> list[str]:
    """A problem for each setting of ``names`` that is below one."""
    return [
        f"training.{name} must be at least 1, got {getattr(config, name)}"
        for name in names
        if getattr(config, name) < 1
    ]


def not_negative(config: AlgorithmConfig, names: Iterable[str]) -> list[str]:
    """A problem for each setting of ``names`` that is below zero."""
    return [
        f"training.{name} must not be negative, got {getattr(config, name)}"
        for name in names
        if getattr(config, name) < 0
    ]


def pieces_within(pipeline: Any, names: frozenset[str]) -> bool:
    """Whether every piece of a connector pipeline is one of RLlib's classes named in ``names``:
    no piece that the experiment's ``connectors:`` or a config's custom connector added."""
    return not other_pieces(pipeline.connectors, names)
