"""Load an experiment: YAML -> command-line overrides -> typed model -> RLlib config.

Everything a user can get wrong is checked here, before Ray starts, and reported as a
``ConfigError`` naming the file, the line and the key path.
"""

from __future__ import annotations

import random
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML

from rlplat.config.schema import Experiment
from rlplat.config.spaces import Space, find_spaces, substitute
from rlplat.config.yaml_io import KeyPath, parse_yaml
from rlplat.errors import ConfigError, UserError, allowed_list, did_you_mean, not_among

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

    from rlplat.search import SearchSetup


@dataclass
class Locator:
    """Where each key of an experiment was written: a file line or a command-line override."""

    source: str
    lines: dict[KeyPath, int] = field(default_factory=dict)
    overridden: dict[str, str] = field(default_factory=dict)

    def __call__(self, dotted: str) -> str:
        """'file:line' for a dotted key path (the nearest parent with a line), or the override."""
        if dotted in self.overridden:
            return f"command-line override '{self.overridden[dotted]}'"
        path: KeyPath = tuple(p for p in dotted.split(".") if p)
        while path:
            if path in self.lines:
                return f"{self.source}:{self.lines[path]}"
            path = path[:-1]
        return self.source


@dataclass
class LoadedExperiment:
    """A validated experiment, where its keys came from, and what was built from it.

    ``experiment`` holds a representative value where the file has a search space (the first
    category, the low end of a range); ``spaces`` are the spaces themselves.
    """

    experiment: Experiment
    locate: Locator
    spaces: list[Space] = field(default_factory=list)
    algo_config: AlgorithmConfig | None = None
    search: SearchSetup | None = None

    def resolved(self) -> dict[str, Any]:
        """The experiment with every default filled in and its search spaces, as the run's
        ``experiment.yaml`` keeps it (``rlplat train --resume`` reads it back)."""
        from rlplat.build import effective_settings

        resolved = self.experiment.model_dump(mode="json")
        if resolved.get("tune") is None:
            resolved.pop("tune", None)
        if self.algo_config is not None:
            merge_into(resolved, effective_settings(self.algo_config))
        return substitute(resolved, {s.path: s.to_yaml() for s in self.spaces})


def merge_into(target: dict[str, Any], update: dict[str, Any]) -> None:
    """Nested update: mappings in ``update`` are merged key by key, other values replace."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_into(target[key], value)
        else:
            target[key] = value


def parse_override(text: str) -> tuple[list[str], Any]:
    """``training.lr=1e-3`` -> (['training', 'lr'], 0.001); the value is read as YAML."""
    key, sep, raw = text.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(
            f"an override must look like 'section.key=value' (e.g. training.lr=0.0005), "
            f"got {text!r}.",
            location="command line",
        )
    try:
        value = YAML(typ="safe", pure=True).load(raw) if raw.strip() else None
    except Exception as exc:  # noqa: BLE001 - ruamel raises several error types
        raise ConfigError(
            f"cannot read the value of override {text!r} as YAML: {exc}", location="command line"
        ) from None
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, str]:
    """Set each dotted override in ``data`` in place; return {dotted key: override text}."""
    applied: dict[str, str] = {}
    for text in overrides:
        keys, value = parse_override(text)
        node = data
        for depth, key in enumerate(keys[:-1]):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                parent = ".".join(keys[: depth + 1])
                raise ConfigError(
                    f"cannot set {text!r}: '{parent}' is not a section (it holds {child!r}).",
                    location="command line",
                )
            node = child
        node[keys[-1]] = value
        applied[".".join(keys)] = text
    return applied


def _pydantic_error(exc: ValidationError, locate: Locator) -> ConfigError:
    """The first schema error as one readable sentence with file, line, key and allowed values."""
    # A misspelt key also makes its correct spelling "missing": report the misspelling first.
    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    first = errors[0]
    loc = tuple(str(p) for p in first["loc"])
    dotted = ".".join(loc)
    more = f" ({len(errors) - 1} more problem(s) after fixing this one)" if len(errors) > 1 else ""
    if first["type"] == "extra_forbidden":
        model: Any = Experiment
        for part in loc[:-1]:
            if part.isdigit():  # a list entry: its model is the list's item type
                continue
            model = _section_model(model.model_fields[part].annotation)
            if model is None:
                break
        allowed = list(model.model_fields) if model is not None else []
        message = (
            f"unknown key {loc[-1]!r}."
            + did_you_mean(loc[-1], allowed)
            + (f" Allowed here: {allowed_list(allowed, limit=30)}." if allowed else "")
        )
    elif first["type"] == "missing":
        message = "this key is required."
    elif first["type"] == "literal_error" and isinstance(first["input"], str):
        allowed = re.findall(r"'([^']*)'", first["ctx"]["expected"])
        message = f"{first['input']!r} is not allowed here." + not_among(first["input"], allowed)
    else:
        got = f" (got {first['input']!r})" if not isinstance(first["input"], dict) else ""
        message = first["msg"].removeprefix("Value error, ") + got + "."
    return ConfigError(message + more, location=locate(dotted), key=dotted or None)


def _section_model(annotation: Any) -> type | None:
    """The section model in a field's annotation: ``Section``, ``Section | None``,
    ``list[Section]``; None for plain values."""
    candidates = [annotation, *typing.get_args(annotation)]
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _check_team_experiment(experiment: Experiment, multi_agent: bool, locate: Locator) -> None:
    """A team algorithm (QMIX) needs a multi-agent env and maps every agent to its one network."""
    name = experiment.algorithm
    if not multi_agent:
        raise ConfigError(
            f"{name} learns for a team of agents, but {experiment.env.label!r} is a single-agent "
            "environment. Use a PettingZoo environment (env.pettingzoo, or a factory returning "
            "one), or DQN for a single agent.",
            location=locate("algorithm"),
            key="algorithm",
        )
    if experiment.multi_agent is not None:
        raise ConfigError(
            f"{name} shares one agent network among all agents (each agent's input carries its "
            "one-hot id), so multi_agent policy mappings do not apply: remove the section. "
            "training.mixer chooses qmix, vdn or none (independent Q-learning).",
            location=locate("multi_agent"),
            key="multi_agent",
        )


def read_experiment_file(path: str | Path) -> tuple[dict[str, Any], dict]:
    """The experiment file's data and the line of each key; ConfigError when unreadable."""
    source = str(path)
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise ConfigError("experiment file not found.", location=source) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot read the experiment file: {exc.strerror}.", location=source
        ) from None
    data, lines = parse_yaml(text, source)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            "an experiment file must be a mapping of keys (name:, algorithm:, env:, ...), "
            f"not a {type(data).__name__}.",
            location=source,
        )
    return data, lines


def load_experiment(
    path: str | Path, overrides: list[str] | None = None, *, build: bool = True
) -> LoadedExperiment:
    """Read, override and validate an experiment file; with ``build``, also build its RLlib config.

    Building checks the environment (it is created once), every RLlib key and the search, without
    starting Ray.
    """
    data, lines = read_experiment_file(path)
    locate = Locator(str(path), lines, apply_overrides(data, overrides or []))
    return experiment_from_data(data, locate, build=build)


def _validate(data: dict[str, Any], locate: Locator) -> Experiment:
    try:
        return Experiment.model_validate(data)
    except ValidationError as exc:
        raise _pydantic_error(exc, locate) from None


def _check_space_values(
    data: dict[str, Any], spaces: list[Space], config_cls: type, locate: Locator
) -> None:
    """Every category of a space (both ends of a range) must fit the key it stands at."""
    from rlplat.build import check_rllib_sections

    for space in spaces:
        for value in space.candidates():
            candidate = _validate(substitute(data, {space.path: value}), locate)
            check_rllib_sections(candidate, config_cls, locate)


def experiment_from_data(
    data: dict[str, Any], locate: Locator, *, build: bool = True
) -> LoadedExperiment:
    """Validate experiment data (as read from YAML); with ``build``, build its RLlib config."""
    from rlplat.algorithms.registry import canonical_name

    spaces = find_spaces(data, locate)
    concrete = substitute(data, {space.path: space.representative() for space in spaces})
    experiment = _validate(concrete, locate)
    try:
        experiment.algorithm = canonical_name(experiment.algorithm)
    except UserError as exc:
        raise ConfigError(str(exc), location=locate("algorithm"), key="algorithm") from None
    loaded = LoadedExperiment(experiment, locate, spaces=spaces)
    if build:
        _build(loaded, concrete)
    return loaded


def _build(loaded: LoadedExperiment, concrete: dict[str, Any]) -> None:
    from rlplat.algorithms.registry import is_team_algorithm
    from rlplat.build import build_algorithm_config
    from rlplat.connectors import check_connectors
    from rlplat.environments import check_env
    from rlplat.search import search_setup

    experiment = loaded.experiment
    if experiment.seed is None:  # record the seed actually used, so the run can be repeated
        experiment.seed = random.randrange(2**31)
    env = check_env(experiment.env, loaded.locate, needs_frames=experiment.video.every > 0)
    if is_team_algorithm(experiment.algorithm):
        _check_team_experiment(experiment, env.multi_agent, loaded.locate)
    if env.multi_agent:
        if experiment.connectors:
            raise ConfigError(
                "connectors are for single-agent envs; for PettingZoo envs use the SuperSuit "
                "wrappers in env.wrappers instead (normalize_obs_v0, frame_stack_v1).",
                location=loaded.locate("connectors"),
                key="connectors",
            )
    else:
        if experiment.multi_agent is not None:
            raise ConfigError(
                f"{experiment.env.label!r} is a single-agent environment; multi_agent applies "
                "to PettingZoo environments (env.pettingzoo, or a factory returning one).",
                location=loaded.locate("multi_agent"),
                key="multi_agent",
            )
        check_connectors(
            experiment.connectors, env.observation_space, env.action_space, loaded.locate
        )
    loaded.algo_config = build_algorithm_config(experiment, loaded.locate, env)
    if experiment.init.checkpoint:
        from rlplat.finetune import resolve_init_checkpoint

        experiment.init.checkpoint = resolve_init_checkpoint(loaded)
    if loaded.spaces:
        _check_space_values(concrete, loaded.spaces, type(loaded.algo_config), loaded.locate)
    loaded.search = search_setup(experiment, loaded.resolved(), loaded.spaces, loaded.locate)
