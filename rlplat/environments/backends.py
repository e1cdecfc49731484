"""``env.backend``: what steps a training env runner's envs, as one object per backend that
checks the env spec, makes the vector of envs, and says which RLlib settings it needs.

``gymnasium``: RLlib vectorises single envs that ``EnvCreator`` builds (the default).
``envpool``: EnvPool steps the whole vector of Atari games in C++ threads; RLlib asks the
creator for the vector at once (``gym_env_vectorize_mode: vector_entry_point``) and evaluation
stays on Gymnasium's envs.
``vmas``: each training env runner's envs are the worlds of one VMAS batch
(``rlplat.environments.vmas_worlds``), made at once as EnvPool's vector is; evaluation plays
single worlds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlplat.environments.envpool_atari import (
    EnvPoolAtari,
    NotTranslatable,
    envpool_options,
    envpool_task,
)
from rlplat.errors import ConfigError
from rlplat.experiment.schema import EnvSpec


class GymnasiumBackend:
    """Single envs, vectorised by RLlib's env runner."""

    def check(self, spec: EnvSpec, locate: Callable[[str], str]) -> None:
        """Nothing beyond building and stepping the env, which every backend's env gets."""

    def make_vector(self, spec: EnvSpec, num_envs: int, threads: int) -> Any | None:
        return None

    def rllib_settings(self) -> dict[str, dict[str, Any]]:
        """Settings for RLlib's ``env_runners`` and the evaluation's ``evaluation_config``."""
        return {}


class EnvPoolBackend(GymnasiumBackend):
    """EnvPool's vector of Atari games for the training env runners."""

    def check(self, spec: EnvSpec, locate: Callable[[str], str]) -> None:
        """EnvPool is installed, knows the game and can run the env's chain: one pool is made."""
        try:
            EnvPoolAtari(envpool_task(spec.id), 1, 1, envpool_options(spec)).close()
        except NotTranslatable as exc:
            problem = f"it cannot run this chain: {exc}. Use the atari preset's chain as it is"
        except ImportError as exc:
            problem = (
                f"the envpool package cannot be imported ({exc}). Install the envpool extra: pip "
                "install -e '.[envpool]'"
            )
        except Exception as exc:  # noqa: BLE001 - EnvPool raises bare errors for unknown games
            problem = f"making {envpool_task(spec.id)!r} failed: {type(exc).__name__}: {exc}"
        else:
            return
        raise ConfigError(
            f"env.backend 'envpool' steps {spec.label!r} with EnvPool, but {problem}, or set "
            "backend: gymnasium.",
            location=locate("env.backend"),
            key="env.backend",
        )

    def make_vector(self, spec: EnvSpec, num_envs: int, threads: int) -> Any | None:
        return EnvPoolAtari(envpool_task(spec.id), num_envs, threads, envpool_options(spec))

    def rllib_settings(self) -> dict[str, dict[str, Any]]:
        return {
            "env_runners": {"gym_env_vectorize_mode": "vector_entry_point"},
            "evaluation_config": {"gym_env_vectorize_mode": "sync"},
        }


class VmasBackend(GymnasiumBackend):
    """VMAS's batched worlds for the training env runners (multi-agent)."""

    def make_vector(self, spec: EnvSpec, num_envs: int, threads: int) -> Any | None:
        from rlplat.environments.vmas_worlds import VmasWorlds  # noqa: PLC0415 - torch, vmas

        return VmasWorlds(num_envs=num_envs, **spec.kwargs)

    def rllib_settings(self) -> dict[str, dict[str, Any]]:
        return EnvPoolBackend().rllib_settings()


BACKENDS: dict[str, GymnasiumBackend] = {
    "gymnasium": GymnasiumBackend(),
    "envpool": EnvPoolBackend(),
    "vmas": VmasBackend(),
}


def backend_for(spec: EnvSpec) -> GymnasiumBackend:
    return BACKENDS[spec.backend]
