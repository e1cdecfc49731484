"""Restore only what acting needs from a checkpoint: the RLModule and its connector pipelines.

``Algorithm.from_checkpoint`` starts Ray and rebuilds learners and env runners (5.7 s to a
first CartPole episode on 2 CPU cores, against 2.5 s for the whole ``rlplat eval`` command).
Acting needs only the module's weights (``learner_group/learner/rl_module/<module>``) and the two
connector pipelines the env runners used (``env_runner/{env_to_module,module_to_env}_connector``),
which carry state such as observation filters, frame stacks and recurrent states. Restoring those
takes a fraction of a second and starts no Ray.
"""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import torch
from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.connectors.env_to_module.mean_std_filter import MeanStdFilter
from ray.rllib.core import (
    COMPONENT_ENV_RUNNER,
    COMPONENT_ENV_TO_MODULE_CONNECTOR,
    COMPONENT_EVAL_ENV_RUNNER,
    COMPONENT_LEARNER,
    COMPONENT_LEARNER_GROUP,
    COMPONENT_MODULE_TO_ENV_CONNECTOR,
    COMPONENT_RL_MODULE,
    DEFAULT_MODULE_ID,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rlplat.checkpoints import RLLIB_MARKER
from rlplat.errors import UserError, did_you_mean
from rlplat.rllib.modules import UniformRandomModule

MODULES_DIR = Path(COMPONENT_LEARNER_GROUP, COMPONENT_LEARNER, COMPONENT_RL_MODULE)


def env_runner_dir(checkpoint: Path) -> Path:
    """The env runner whose connectors acting uses: the training one, or for offline runs
    (BC, MARWIL, CQL, IQL: no training env runner) the evaluation one."""
    training = checkpoint / COMPONENT_ENV_RUNNER
    evaluation = checkpoint / COMPONENT_EVAL_ENV_RUNNER
    return evaluation if evaluation.is_dir() and not training.is_dir() else training


@dataclass
class Policy:
    """An RLModule with the connectors that turn episodes into its input and its output into
    environment actions, exactly as RLlib's env runners use them.

    Multi-agent checkpoints give the whole ``MultiRLModule`` (one module per policy) and the
    multi-agent pipelines; ``mapping`` says which policy acts for which agent.
    """

    module: RLModule
    env_to_module: ConnectorPipelineV2
    module_to_env: ConnectorPipelineV2
    env_steps_trained: int
    mapping: Callable[..., Any] | None = None  # agent id -> policy id; None: single-agent

    @property
    def multi_agent(self) -> bool:
        return self.mapping is not None

    @classmethod
    def from_checkpoint(
        cls,
        checkpoint: Path,
        mapping: Callable[..., Any] | None = None,
        random: list[str] | None = None,
    ) -> Policy:
        """Restore the policy; ``mapping`` (multi-agent runs) is the run's policy mapping. The
        policies named in ``random`` act uniformly at random instead of as trained (to measure
        the others against a random opponent or partner)."""
        checkpoint = checkpoint.resolve()
        modules_dir = checkpoint / MODULES_DIR
        found = (
            sorted(p.name for p in modules_dir.iterdir() if p.is_dir())
            if (modules_dir.is_dir())
            else []
        )
        if mapping is None and found and DEFAULT_MODULE_ID not in found:
            raise UserError(
                f"{checkpoint} holds the policies {', '.join(found)} but no "
                f"{DEFAULT_MODULE_ID!r}, yet its experiment describes a single-agent env: the "
                "checkpoint and experiment.yaml next to it do not belong together."
            )
        module_dir = modules_dir if mapping is not None else modules_dir / DEFAULT_MODULE_ID
        module = _restore(RLModule, checkpoint, module_dir, "policy weights")
        if random:
            _make_random(module if mapping is not None else None, random, checkpoint)
        for single in module.values() if mapping is not None else [module]:
            if isinstance(single, torch.nn.Module):  # random policies have no network
                single.eval()
        runner = env_runner_dir(checkpoint)
        env_to_module = _restore(
            ConnectorPipelineV2,
            checkpoint,
            runner / COMPONENT_ENV_TO_MODULE_CONNECTOR,
            "env-to-module connectors",
        )
        _freeze_statistics(env_to_module)
        return cls(
            module=module,
            env_to_module=env_to_module,
            module_to_env=_restore(
                ConnectorPipelineV2,
                checkpoint,
                runner / COMPONENT_MODULE_TO_ENV_CONNECTOR,
                "module-to-env connectors",
            ),
            env_steps_trained=_env_steps_trained(checkpoint),
            mapping=mapping,
        )

    def actor(self) -> CheckpointActor:
        """This policy as a ``rollout.Actor``."""
        return CheckpointActor(self)

    @torch.inference_mode()
    def act(
        self, episode: SingleAgentEpisode | MultiAgentEpisode, explore: bool, shared_data: dict
    ) -> tuple[Any, Any, dict[str, Any]]:
        """(action for the env, action as the module produced it, extra module outputs).

        The extra outputs (recurrent state, logits, ...) must go into the episode with the step,
        as the env runner does: the next call's connectors read the recurrent state from there.
        Multi-agent: each of the three is a dict by agent id, for the agents whose turn it is.
        """
        batch = self.env_to_module(
            rl_module=self.module,
            episodes=[episode],
            batch={},
            explore=explore,
            shared_data=shared_data,
        )
        if explore:
            # Exploration schedules (DQN's epsilon) read the step count: use the final value.
            output = self.module.forward_exploration(batch, t=self.env_steps_trained)
        else:
            output = self.module.forward_inference(batch)
        to_env = self.module_to_env(
            rl_module=self.module,
            batch=output,
            episodes=[episode],
            explore=explore,
            shared_data=shared_data,
        )
        # The pipelines batch over a list of envs; there is exactly one here.
        action = to_env.pop(Columns.ACTIONS)[0]
        env_action = to_env.pop(Columns.ACTIONS_FOR_ENV, [action])[0]
        if not self.multi_agent:
            return env_action, action, {key: value[0] for key, value in to_env.items()}
        extra: dict[str, dict[str, Any]] = {}
        for column, by_agent in to_env.items():
            for agent, value in by_agent[0].items():
                extra.setdefault(agent, {})[column] = value
        return env_action, action, extra


class CheckpointActor:
    """A restored policy playing episodes as RLlib's env runners do (see ``rollout.Actor``):
    the episode it keeps is what the connectors read (filters, frame stacks, recurrent state)."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self.multi_agent = policy.multi_agent
        self.mapping = policy.mapping
        self._pending: tuple[Any, dict[str, Any]] = (None, {})

    def reset(self, env: Any, observation: Any, info: Any, seed: int) -> None:
        torch.manual_seed(seed)
        self.shared_data: dict[str, Any] = {}
        if self.multi_agent:
            self.episode: Any = MultiAgentEpisode(
                observation_space=env.observation_space,
                action_space=env.action_space,
                agent_to_module_mapping_fn=self.mapping,
            )
            self.episode.add_env_reset(observations=observation, infos=info)
        else:
            self.episode = SingleAgentEpisode(
                observation_space=env.observation_space, action_space=env.action_space
            )
            self.episode.add_env_reset(observation=observation, infos=info)

    def act(self, observation: Any, explore: bool) -> Any:
        env_action, action, extra = self.policy.act(self.episode, explore, self.shared_data)
        self._pending = (action, extra)
        return env_action

    def last_scores(self) -> Any:
        """The action distribution inputs (logits, Q-values) of the last single-agent action,
        or None."""
        return None if self.multi_agent else self._pending[1].get(Columns.ACTION_DIST_INPUTS)

    def observe(
        self, observation: Any, reward: Any, terminated: Any, truncated: Any, info: Any
    ) -> None:
        action, extra = self._pending
        if self.multi_agent:
            self.episode.add_env_step(
                observations=observation,
                actions=action,
                rewards=reward,
                infos=info,
                terminateds=terminated,
                truncateds=truncated,
                extra_model_outputs=extra,
            )
        else:
            self.episode.add_env_step(
                observation=observation,
                action=action,
                reward=reward,
                infos=info,
                terminated=bool(terminated),
                truncated=bool(truncated),
                extra_model_outputs=extra,
            )


def _make_random(module: Any, policies: list[str], checkpoint: Path) -> None:
    """Swap each named policy of a multi-agent module for one acting uniformly at random."""
    if module is None:
        raise UserError(
            f"--random names policies of a multi-agent checkpoint; {checkpoint} has one "
            "single-agent policy."
        )
    known = sorted(module.keys())
    for policy in policies:
        if policy not in known:
            raise UserError(
                f"--random {policy!r}: {checkpoint} has no such policy; its policies are "
                f"{', '.join(known)}." + did_you_mean(policy, known)
            )
        trained = module[policy]
        module.add_module(
            policy,
            UniformRandomModule(
                observation_space=trained.observation_space, action_space=trained.action_space
            ),
            override=True,
        )


def _freeze_statistics(pipeline: ConnectorPipelineV2) -> None:
    """Observation filters keep the statistics the checkpoint holds: playing a policy must not
    change it (each evaluated episode would otherwise see a slightly different policy). A
    ``MeanStdFilter`` takes ``update_stats`` only when built, so each is replaced by its copy
    built with ``update_stats=False`` and given the same state."""
    for index, piece in enumerate(pipeline.connectors):
        if isinstance(piece, MeanStdFilter):
            args, kwargs = piece.get_ctor_args_and_kwargs()
            frozen = type(piece)(*args, **{**kwargs, "update_stats": False})
            frozen.input_action_space = piece.input_action_space
            frozen.input_observation_space = piece.input_observation_space
            frozen.set_state(piece.get_state())
            pipeline.connectors[index] = frozen


def _restore(kind: Any, checkpoint: Path, path: Path, what: str) -> Any:
    if not path.is_dir():
        raise UserError(
            f"the checkpoint {checkpoint} is incomplete: its {what} "
            f"({path.relative_to(checkpoint)}) are missing. It may have been copied partially "
            "or deleted while being written; pick another checkpoint of the run "
            "(rlplat eval <trial dir> picks the best one left)."
        )
    try:
        restored = kind.from_checkpoint(str(path))
    except Exception as exc:  # noqa: BLE001 - unpickling and torch.load raise many types
        raise UserError(load_failure(checkpoint, path, what, exc)) from None
    missing = _unimportable_classes(path)
    if missing:
        # RLlib then falls back to an empty base class with a warning, and fails later.
        error = ModuleNotFoundError(f"No module named {missing[0]!r}", name=missing[0])
        raise UserError(load_failure(checkpoint, path, what, error))
    return restored


def _unimportable_classes(path: Path) -> list[str]:
    """Modules named in the checkpoint's class files (``class_and_ctor_args.pkl``, its own and
    its sub-components') that cannot be imported here."""
    missing: list[str] = []

    class Probe(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            try:
                return super().find_class(module, name)
            except (ImportError, AttributeError):
                missing.append(module)
                return object

    for class_file in sorted(path.rglob("class_and_ctor_args.pkl")):
        try:
            with class_file.open("rb") as handle:
                Probe(handle).load()
        except Exception:  # noqa: BLE001 - damaged files are reported when RLlib reads them
            continue
    return missing


def load_failure(checkpoint: Path, path: Path, what: str, exc: BaseException) -> str:
    """Why a checkpoint did not load, and what to do: a class that cannot be imported here, a
    checkpoint of another Ray minor version, or damaged files."""
    where = f"the {what} of checkpoint {checkpoint} ({path.relative_to(checkpoint)})"
    written = _written_ray_version(checkpoint)
    missing = _missing_class(exc)
    if missing:
        return (
            f"cannot load {where}: it refers to {missing}, which cannot be imported here. "
            "Custom environments, modules and connectors are stored by reference: install the "
            "package that defines it, or run from the directory the run was started in (for "
            f"envs/...). Checkpoint written by Ray {written}; installed: Ray {ray.__version__}."
        )
    detail = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    if _minor(written) != _minor(ray.__version__):
        return (
            f"cannot load {where}: it was written by Ray {written}, and this is Ray "
            f"{ray.__version__}; RLlib checkpoints do not load across Ray minor versions. Load it "
            f"with the Ray it was written with (pip install 'ray[rllib,tune]=={written}'), or "
            f"train again with this one. ({detail})"
        )
    return (
        f"cannot load {where}: {detail}. The files are damaged (copied partially, or written to "
        f"a full disk); pick another checkpoint of the run (Ray {written} wrote it, Ray "
        f"{ray.__version__} is installed)."
    )


def _missing_class(exc: BaseException) -> str | None:
    """'module x' or 'class y in module x' when unpickling failed on an import."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return f"the module {exc.name!r}"
    match = re.search(r"Can't get attribute '([^']+)' on <module '([^']+)'", str(exc))
    return f"{match.group(1)!r} in the module {match.group(2)!r}" if match else None


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _written_ray_version(checkpoint: Path) -> str:
    try:
        return json.loads((checkpoint / RLLIB_MARKER).read_text()).get("ray_version", "unknown")
    except (OSError, ValueError):
        return "unknown"


def _env_steps_trained(checkpoint: Path) -> int:
    try:
        with open(env_runner_dir(checkpoint) / "state.pkl", "rb") as handle:
            return int(pickle.load(handle).get("num_env_steps_sampled_lifetime", 0))
    except Exception:  # noqa: BLE001 - only used for exploration schedules; 0 is a safe default
        return 0
