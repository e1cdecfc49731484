"""Build the environment an experiment names, the same way in training and in ``rlplat eval``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from rlplat.config.schema import EnvSpec
from rlplat.errors import ConfigError, UserError, allowed_list, did_you_mean


def import_object(path: str) -> Any:
    """Import ``module.path:attr`` (``attr`` may be dotted)."""
    module_name, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class EnvCreator:
    """Picklable env creator handed to RLlib: ``creator(env_config) -> env``.

    RLlib passes its ``EnvContext`` (the kwargs plus worker/vector indices); only the kwargs reach
    the environment.
    """

    def __init__(self, spec: EnvSpec):
        self.spec = spec

    def __call__(self, env_config: dict[str, Any] | None = None) -> gym.Env:
        kwargs = dict(self.spec.kwargs)
        kwargs.update(dict(env_config or {}))
        if self.spec.id is not None:
            return gym.make(self.spec.id, **kwargs)
        factory: Callable[..., gym.Env] = import_object(self.spec.factory)
        return factory(**kwargs)


def rllib_env_name(spec: EnvSpec) -> str:
    """The name under which the creator is registered with Tune."""
    return f"rlplat/{spec.id or spec.factory}"


def check_env(
    spec: EnvSpec, locate: Callable[[str], str], *, needs_frames: bool = False
) -> tuple[gym.Space, gym.Space]:
    """Fail early (before Ray starts) on an unknown id, a bad import path or kwargs the env rejects.

    The environment is built once and closed: this is what catches a misspelt kwarg.
    ``needs_frames``: videos are requested, so the env must offer ``rgb_array`` rendering.
    Returns the env's observation and action spaces.
    """
    if spec.id is not None:
        if spec.id not in gym.registry:
            raise ConfigError(
                f"unknown Gymnasium environment {spec.id!r}."
                + did_you_mean(spec.id, gym.registry)
                + " Use a registered id (e.g. CartPole-v1, Pendulum-v1) or "
                "'factory: module:callable' for a custom environment.",
                location=locate("env.id"),
                key="env.id",
            )
    else:
        module_name, _, attr = spec.factory.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(
                f"cannot import module {module_name!r} ({exc}). Custom environments live in envs/ "
                "(e.g. 'envs.corridor:Corridor') or in any importable package.",
                location=locate("env.factory"),
                key="env.factory",
            ) from None
        if not hasattr(module, attr.split(".")[0]):
            names = [n for n in dir(module) if not n.startswith("_")]
            raise ConfigError(
                f"module {module_name!r} has no attribute {attr!r}; it has: "
                f"{allowed_list(names)}." + did_you_mean(attr, names),
                location=locate("env.factory"),
                key="env.factory",
            )
    try:
        env = EnvCreator(spec)()
    except TypeError as exc:
        raise ConfigError(
            f"the environment rejected its arguments: {exc}",
            location=locate("env.kwargs"),
            key="env.kwargs",
        ) from None
    except Exception as exc:  # noqa: BLE001 - any failure to build is the user's env problem
        raise ConfigError(
            f"building the environment failed: {type(exc).__name__}: {exc}",
            location=locate("env"),
            key="env",
        ) from None
    env.close()
    if needs_frames and "rgb_array" not in render_modes(env):
        raise ConfigError(
            f"videos need rgb_array frames, but {spec.id or spec.factory!r} renders only: "
            f"{allowed_list(render_modes(env)) or 'nothing'}. Set video.every to 0.",
            location=locate("video.every"),
            key="video.every",
        )
    return env.observation_space, env.action_space


def rebuild_env(spec: EnvSpec, render_mode: str | None, source: Path) -> gym.Env:
    """Build a run's environment again (for evaluation), with ``render_mode`` if given."""
    try:
        return EnvCreator(spec)({"render_mode": render_mode} if render_mode else {})
    except Exception as exc:  # noqa: BLE001 - any failure here means the env cannot be rebuilt
        hint = (
            " The environment may not accept a render_mode argument."
            if render_mode and isinstance(exc, TypeError)
            else ""
        )
        raise UserError(
            f"cannot rebuild the environment {spec.id or spec.factory!r} described in {source}: "
            f"{type(exc).__name__}: {exc}.{hint} Its package must be installed and importable "
            "here (custom environments from the directory you train in, e.g. envs/)."
        ) from None


def render_modes(env: gym.Env) -> list[str]:
    return list(env.metadata.get("render_modes") or [])
