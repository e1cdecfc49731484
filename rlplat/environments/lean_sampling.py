"""Sampling without RLlib's per-step bookkeeping that changes nothing sampled.

Profiled on HalfCheetah-v5 (PPO, one env, 0.66 ms per env step), a third of an env runner's time
per step went to two things that do not touch the episodes:

- RLlib's torch modules switch to eval mode before every forward pass and back after it, a walk
  over all submodules each way. An env runner's module never trains: a module whose layers
  compute the same in both modes (no dropout, batch or instance norm) is put in eval mode once
  and acts without the switch.
- The connector pipelines time each of their pieces and count episode lengths into the metrics on
  every step (16 timers per step for PPO's default pipelines). Pipelines made of RLlib's and
  rlplat's own pieces, which log no metrics of their own, run without them; a pipeline with any
  other piece (a user's connector may log) keeps them: the runner builds such pipelines once, as
  rlplat's quiet pipeline classes, from the same pieces. Their timers
  (``env_to_module_connector/timers/...``) then leave the results.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.connectors.env_to_module import EnvToModulePipeline
from ray.rllib.connectors.module_to_env import ModuleToEnvPipeline
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModule
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import nn

from rlplat.seams.rllib_runner import RunnerHooks, skip_mode_switch

# Layers that compute differently in train and eval mode (RNNs and attention only with dropout).
MODE_DEPENDENT = (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._NormBase)
DROPOUT_WHEN_TRAINING = (nn.RNNBase, nn.MultiheadAttention)
QUIET_PIECES = ("ray.rllib.", "rlplat.")  # the modules of connector pieces that log nothing


def mode_free(module: nn.Module) -> bool:
    """Whether ``module`` computes the same in train and eval mode."""
    for layer in module.modules():
        if isinstance(layer, MODE_DEPENDENT) or type(layer).train is not nn.Module.train:
            return False
        if isinstance(layer, DROPOUT_WHEN_TRAINING) and layer.dropout:
            return False
    return True


def act_without_mode_switch(module: Any) -> None:
    """Put each torch module of an env runner (a MultiRLModule's: each of its modules) that is
    :func:`mode_free` in eval mode, and let it act without switching modes."""
    modules = (
        [module[key] for key in module.keys()] if isinstance(module, MultiRLModule) else [module]
    )
    for each in modules:
        if isinstance(each, TorchRLModule) and mode_free(each):
            each.eval()
            skip_mode_switch(each)


class QuietEnvToModule(EnvToModulePipeline):
    """RLlib's env-to-module pipeline without its per-piece timers."""

    def __call__(self, **kwargs: Any) -> Any:
        return super().__call__(**{**kwargs, "metrics": None})


class QuietModuleToEnv(ModuleToEnvPipeline):
    """RLlib's module-to-env pipeline without its per-piece timers."""

    def __call__(self, **kwargs: Any) -> Any:
        return super().__call__(**{**kwargs, "metrics": None})


QUIET = {EnvToModulePipeline: QuietEnvToModule, ModuleToEnvPipeline: QuietModuleToEnv}


def quiet(pipeline: Any) -> Any:
    """``pipeline`` rebuilt, from the same pieces, as its quiet class where its pieces are all
    quiet ones (see the module's docstring); else ``pipeline`` itself."""
    quiet_class = QUIET.get(type(pipeline))
    if quiet_class is None or not all(
        type(piece).__module__.startswith(QUIET_PIECES) for piece in pipeline.connectors
    ):
        return pipeline
    return quiet_class(
        pipeline.input_observation_space,
        pipeline.input_action_space,
        connectors=list(pipeline.connectors),
    )


class LeanSampling(RunnerHooks):
    """Env-runner mixin (before RLlib's env runner class): see the module's docstring."""

    module: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env_to_module = quiet(self.env_to_module)
        self.module_to_env = quiet(self.module_to_env)

    def make_module(self) -> None:
        super().make_module()  # type: ignore[misc]
        if self.module is not None:
            act_without_mode_switch(self.module)


class EpisodesToNumpyOnce(RunnerHooks):
    """Multi-agent env-runner mixin: each episode of a ``sample`` call is turned to numpy once,
    after the call. RLlib's multi-agent loop turns every episode finished so far in the call to
    numpy again at each env step, so a call's cost grows with the square of its episodes: leduc
    hold'em (hands of 2-4 steps) sampled 81 env steps/s, 82% of the time in ``to_numpy``.
    ``to_numpy`` is idempotent and works in place, so the episodes returned, and those the runner
    keeps for its metrics, are the same objects in the same form."""

    episodes_to_numpy: bool

    def sample_episodes(self, **kwargs: Any) -> Any:
        wanted = self.episodes_to_numpy
        self.episodes_to_numpy = False
        try:
            episodes = super().sample_episodes(**kwargs)
        finally:
            self.episodes_to_numpy = wanted
        if wanted:
            for episode in episodes:
                episode.to_numpy()
        return episodes
