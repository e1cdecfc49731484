"""The experiment file as typed models: one class per YAML section, mirroring the file.

Our own sections are strict (unknown keys and wrong types fail here). The RLlib sections
(``training``, ``env_runners``, ...) are free-form mappings whose keys are checked against the
real ``AlgorithmConfig`` builder methods in :mod:`rlplat.rllib_sections`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rlplat.errors import did_you_mean
from rlplat.metrics import METRIC_ALIASES, is_known_metric


class Section(BaseModel):
    """Base of every section: unknown keys are errors, types are not coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)


class EnvSpec(Section):
    """Which environment to build, and with what arguments."""

    id: str | None = Field(None, description="A registered Gymnasium id, e.g. CartPole-v1.")
    factory: str | None = Field(
        None,
        description="'module:callable' returning a Gymnasium env, e.g. envs.corridor:Corridor.",
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for gymnasium.make or the factory."
    )

    @model_validator(mode="after")
    def _exactly_one_source(self) -> EnvSpec:
        given = [k for k in ("id", "factory") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'id' (a Gymnasium id) or 'factory' ('module:callable')"
                + (f", not both ({', '.join(given)})" if given else "")
            )
        if self.factory is not None and not re.fullmatch(r"[\w.]+:[\w.]+", self.factory):
            raise ValueError(f"factory must look like 'module.path:callable', got {self.factory!r}")
        return self


class RunnerResources(Section):
    """Env runners: rollout actors. ``count: 0`` samples inside the algorithm's own process."""

    count: int | None = Field(None, ge=0, description="Number of remote env runners.")
    cpus: float | None = Field(None, ge=0, description="CPUs per env runner.")
    gpus: float | None = Field(None, ge=0, description="GPUs per env runner.")
    custom: dict[str, float] = Field(
        default_factory=dict, description="Custom resources per env runner, e.g. {npu: 1}."
    )


class LearnerResources(Section):
    """Learners: the processes that compute gradients. ``count: 0`` learns in the driver actor."""

    count: int | None = Field(None, ge=0, description="Number of remote learners.")
    cpus: float | Literal["auto"] | None = Field(
        None, description="CPUs per learner (auto: RLlib decides)."
    )
    gpus: float | None = Field(None, ge=0, description="GPUs per learner.")
    custom: dict[str, float] = Field(
        default_factory=dict, description="Custom resources per learner."
    )


class Resources(Section):
    """Where the work runs. Empty fields take RLlib's defaults; the run records the values used."""

    env_runners: RunnerResources = Field(default_factory=RunnerResources)
    learners: LearnerResources = Field(default_factory=LearnerResources)


class StopSpec(Section):
    """When a trial stops: whichever condition is met first."""

    episode_return_mean: float | None = Field(None, description="Target mean episode return.")
    env_steps: int | None = Field(None, gt=0, description="Environment steps sampled.")
    iterations: int | None = Field(None, gt=0, description="Training iterations.")
    time_s: float | None = Field(None, gt=0, description="Wall-clock seconds of training.")

    @model_validator(mode="after")
    def _at_least_one(self) -> StopSpec:
        if all(v is None for v in self.model_dump().values()):
            raise ValueError(
                "give at least one stop condition: episode_return_mean, env_steps, iterations "
                "or time_s (otherwise the run never ends)"
            )
        return self


class CheckpointSpec(Section):
    """How often checkpoints are written and which ones are kept."""

    every: int = Field(10, ge=0, description="Checkpoint every N iterations (0: never).")
    keep: int | None = Field(3, ge=1, description="Keep the K best checkpoints (null: all).")
    at_end: bool = Field(True, description="Write a checkpoint when the trial stops.")
    score: str = Field(
        "episode_return_mean", description="Metric that ranks checkpoints (short name or path)."
    )
    mode: Literal["max", "min"] = Field("max", description="Whether a higher score is better.")

    @field_validator("score")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        if not is_known_metric(value):
            raise ValueError(
                f"unknown metric {value!r}; use one of {', '.join(METRIC_ALIASES)} "
                "or a full result path such as 'env_runners/episode_return_mean'"
            )
        return value


class VideoSpec(Section):
    """Greedy episodes recorded from checkpoints during training, shown in TensorBoard."""

    every: int = Field(
        0,
        ge=0,
        description="Record at every checkpoint whose iteration is a multiple of this (0: never).",
    )
    episodes: int = Field(1, ge=1, description="Episodes per recording, played one after another.")
    max_width: int = Field(320, ge=16, description="Wider frames are shrunk to this many pixels.")


RLLIB_SECTIONS = (
    "environment",
    "training",
    "env_runners",
    "learners",
    "rl_module",
    "evaluation",
    "reporting",
    "debugging",
    "fault_tolerance",
    "offline_data",
)
"""Experiment keys passed to the ``AlgorithmConfig`` builder method of the same name."""


class Experiment(Section):
    """One experiment file."""

    name: str = Field(description="Run directory name: <output_dir>/<name>/<timestamp>/.")
    algorithm: str = Field(description="PPO, DQN, SAC, or any registered algorithm.")
    seed: int | None = Field(0, description="Seed for RLlib, the envs and torch (null: random).")
    env: EnvSpec
    stop: StopSpec
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    connectors: list[str | dict[str, dict[str, Any]]] = Field(
        default_factory=list,
        description="Observation connectors, in order: mean_std_filter, "
        "frame_stack: {num_frames: N}. Their state is saved in checkpoints.",
    )
    video: VideoSpec = Field(default_factory=VideoSpec)
    resources: Resources = Field(default_factory=Resources)
    output_dir: str = Field("checkpoints", description="Where runs are written.")

    environment: dict[str, Any] = Field(default_factory=dict)
    training: dict[str, Any] = Field(default_factory=dict)
    env_runners: dict[str, Any] = Field(default_factory=dict)
    learners: dict[str, Any] = Field(default_factory=dict)
    rl_module: dict[str, Any] = Field(default_factory=dict)
    evaluation: dict[str, Any] = Field(default_factory=dict)
    reporting: dict[str, Any] = Field(default_factory=dict)
    debugging: dict[str, Any] = Field(default_factory=dict)
    fault_tolerance: dict[str, Any] = Field(default_factory=dict)
    offline_data: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", value):
            raise ValueError(
                "name becomes a directory: use letters, digits, '-', '_' and '.' only, "
                f"got {value!r}"
            )
        return value

    @field_validator("connectors")
    @classmethod
    def _known_connectors(cls, entries: list) -> list:
        from rlplat.connectors import CONNECTORS, connector_options, entry_parts

        for entry in entries:
            if isinstance(entry, dict) and len(entry) != 1:
                raise ValueError(
                    "each connector is a name or {name: {option: value}}, got "
                    f"{len(entry)} keys in one entry"
                )
            name, options = entry_parts(entry)
            if name not in CONNECTORS:
                raise ValueError(
                    f"unknown connector {name!r}; known: {', '.join(CONNECTORS)}."
                    + did_you_mean(name, CONNECTORS)
                )
            allowed = connector_options(name)
            for option in options:
                if option not in allowed:
                    raise ValueError(
                        f"connector {name!r} has no option {option!r}; allowed: "
                        f"{', '.join(allowed)}." + did_you_mean(option, allowed)
                    )
        return entries

    @field_validator("video")
    @classmethod
    def _video_at_checkpoints(cls, video: VideoSpec, info: ValidationInfo) -> VideoSpec:
        checkpoint = info.data.get("checkpoint")
        if video.every and checkpoint is not None:
            if checkpoint.every == 0 or video.every % checkpoint.every:
                raise ValueError(
                    f"video.every ({video.every}) must be a multiple of checkpoint.every "
                    f"({checkpoint.every}): videos are recorded from checkpoints"
                )
        return video

    def rllib_sections(self) -> dict[str, dict[str, Any]]:
        """The RLlib builder sections, by builder method name."""
        return {section: getattr(self, section) for section in RLLIB_SECTIONS}
