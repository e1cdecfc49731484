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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from ray.rllib.connectors.connector_pipeline_v2 import ConnectorPipelineV2
from ray.rllib.core import (
    COMPONENT_ENV_RUNNER,
    COMPONENT_ENV_TO_MODULE_CONNECTOR,
    COMPONENT_LEARNER,
    COMPONENT_LEARNER_GROUP,
    COMPONENT_MODULE_TO_ENV_CONNECTOR,
    COMPONENT_RL_MODULE,
    DEFAULT_MODULE_ID,
)
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from rlplat.checkpoints import RLLIB_MARKER
from rlplat.errors import UserError

MODULES_DIR = Path(COMPONENT_LEARNER_GROUP, COMPONENT_LEARNER, COMPONENT_RL_MODULE)
ENV_RUNNER_STATE = Path(COMPONENT_ENV_RUNNER, "state.pkl")


@dataclass
class Policy:
    """An RLModule with the connectors that turn episodes into its input and its output into
    environment actions, exactly as RLlib's env runners use them."""

    module: RLModule
    env_to_module: ConnectorPipelineV2
    module_to_env: ConnectorPipelineV2
    env_steps_trained: int

    @classmethod
    def from_checkpoint(cls, checkpoint: Path, module_id: str = DEFAULT_MODULE_ID) -> Policy:
        checkpoint = checkpoint.resolve()
        modules_dir = checkpoint / MODULES_DIR
        module_dir = modules_dir / module_id
        if not module_dir.is_dir() and modules_dir.is_dir():
            found = sorted(p.name for p in modules_dir.iterdir() if p.is_dir())
            raise UserError(
                f"{checkpoint} holds the modules {', '.join(found) or 'none'} but no "
                f"{module_id!r}; it looks like a multi-agent checkpoint, which this command "
                "cannot evaluate yet."
            )
        module = _restore(RLModule, checkpoint, module_dir, "policy weights")
        module.eval()
        return cls(
            module=module,
            env_to_module=_restore(
                ConnectorPipelineV2,
                checkpoint,
                checkpoint / COMPONENT_ENV_RUNNER / COMPONENT_ENV_TO_MODULE_CONNECTOR,
                "env-to-module connectors",
            ),
            module_to_env=_restore(
                ConnectorPipelineV2,
                checkpoint,
                checkpoint / COMPONENT_ENV_RUNNER / COMPONENT_MODULE_TO_ENV_CONNECTOR,
                "module-to-env connectors",
            ),
            env_steps_trained=_env_steps_trained(checkpoint),
        )

    @torch.inference_mode()
    def act(
        self, episode: SingleAgentEpisode, explore: bool, shared_data: dict[str, Any]
    ) -> tuple[Any, Any, dict[str, Any]]:
        """(action for the env, action as the module produced it, extra module outputs).

        The extra outputs (recurrent state, logits, ...) must go into the episode with the step,
        as the env runner does: the next call's connectors read the recurrent state from there.
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
        return env_action, action, {key: value[0] for key, value in to_env.items()}


def _restore(kind: Any, checkpoint: Path, path: Path, what: str) -> Any:
    if not path.is_dir():
        raise UserError(
            f"the checkpoint {checkpoint} is incomplete: its {what} "
            f"({path.relative_to(checkpoint)}) are missing. It may have been copied partially "
            "or deleted while being written; pick another checkpoint of the run "
            "(rlplat eval <trial dir> picks the best one left)."
        )
    try:
        return kind.from_checkpoint(str(path))
    except Exception as exc:  # noqa: BLE001 - unpickling and torch.load raise many types
        raise UserError(
            f"cannot load the {what} of checkpoint {checkpoint} from "
            f"{path.relative_to(checkpoint)}: {type(exc).__name__}: {exc}. The files are "
            f"damaged, or were written by a different version of Ray ({_written_by(checkpoint)}) "
            "or with custom classes that cannot be imported here."
        ) from None


def _written_by(checkpoint: Path) -> str:
    import ray

    try:
        written = json.loads((checkpoint / RLLIB_MARKER).read_text()).get("ray_version", "unknown")
    except (OSError, ValueError):
        written = "unknown"
    return f"checkpoint: Ray {written}; installed: Ray {ray.__version__}"


def _env_steps_trained(checkpoint: Path) -> int:
    try:
        with open(checkpoint / ENV_RUNNER_STATE, "rb") as handle:
            return int(pickle.load(handle).get("num_env_steps_sampled_lifetime", 0))
    except Exception:  # noqa: BLE001 - only used for exploration schedules; 0 is a safe default
        return 0
