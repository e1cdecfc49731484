"""Multi-agent env runners whose backend simulates all their envs at once (``env.backend: vmas``).

RLlib's multi-agent env runner builds its vector of envs itself, one ``MultiAgentEnv`` per env
(Gymnasium's "sync" mode, the only one it has for multi-agent envs). Where the experiment's
backend makes the whole vector (``gym_env_vectorize_mode: vector_entry_point``, as EnvPool's is
made for single-agent runners), this runner asks the registered env creator for it, passing
``num_envs`` in the env config.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.callbacks.utils import make_callback
from ray.rllib.env.env_context import EnvContext

from rlplat.seams.rllib_runner import RunnerHooks, registered_env_creator

WHOLE_VECTOR = "vector_entry_point"


def makes_whole_vector(config: Any) -> bool:
    mode = config.gym_env_vectorize_mode
    return str(getattr(mode, "value", mode)).lower() == WHOLE_VECTOR


class WholeVector(RunnerHooks):
    """Multi-agent env-runner mixin: the env creator's whole vector where the backend makes one."""

    config: Any
    env: Any
    worker_index: int
    metrics: Any

    def make_env(self) -> None:
        if not makes_whole_vector(self.config):
            return super().make_env()  # type: ignore[misc]
        if self.env is not None:
            self.env.close()
        config = self.config
        creator = registered_env_creator(config.env)
        context = EnvContext(
            {**config.env_config, "num_envs": config.num_envs_per_env_runner},
            worker_index=self.worker_index,
            num_workers=config.num_env_runners,
        )
        self.env = creator(context)
        self.num_envs = self.env.num_envs
        self.needs_initial_reset = True
        make_callback(
            "on_environment_created",
            callbacks_objects=self.callbacks,
            callbacks_functions=config.callbacks_on_environment_created,
            kwargs={
                "env_runner": self,
                "metrics_logger": self.metrics,
                "env": self.env,
                "env_context": context,
            },
        )
        return None
