"""Load an experiment: YAML -> command-line overrides -> typed model.

Pure: no environment is built, no Ray started, no RLlib config made (``rlplat.prepare`` does
that). Everything the schema can judge is checked here and reported as a ``ConfigError`` naming
the file, the line and the key path.
"""

from __future__ import annotations

import json
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML

from rlplat.errors import ConfigError, allowed_list, did_you_mean, not_among
from rlplat.experiment.presets import expand_preset
from rlplat.experiment.sb3_names import check_sb3_names
from rlplat.experiment.schema import Experiment
from rlplat.experiment.spaces import Space, find_spaces, substitute
from rlplat.experiment.yaml_io import KeyPath, parse_yaml


@dataclass
class Locator:
    """Where each key of an experiment was written: a file line or a command-line override."""

    source: str
    lines: dict[KeyPath, int] = field(default_factory=dict)
    overridden: dict[str, str] = field(default_factory=dict)

    def __call__(self, dotted: str) -> str:
        """The override that set the key or a parent of it (it replaced everything below), else
        'file:line' of the key (the nearest parent with a line)."""
        path: KeyPath = tuple(p for p in dotted.split(".") if p)
        for end in range(len(path), 0, -1):
            override = self.overridden.get(".".join(path[:end]))
            if override is not None:
                return f"command-line override '{override}'"
        while path:
            if path in self.lines:
                return f"{self.source}:{self.lines[path]}"
            path = path[:-1]
        return self.source


@dataclass(frozen=True)
class LoadedExperiment:
    """A validated experiment and where its keys came from.

    ``experiment`` holds a representative value where the file has a search space (the first
    category, the low end of a range); ``spaces`` are the spaces themselves and ``data`` the
    file's data after the overrides, spaces included.
    """

    experiment: Experiment
    locate: Locator
    data: dict[str, Any]
    spaces: list[Space] = field(default_factory=list)

    def concrete(self, values: dict[KeyPath, Any] | None = None) -> dict[str, Any]:
        """The data with each space replaced by ``values[path]``, else its representative."""
        return _concrete(self.data, self.spaces, values)


def _concrete(
    data: dict[str, Any], spaces: list[Space], values: dict[KeyPath, Any] | None = None
) -> dict[str, Any]:
    chosen = {space.path: space.representative() for space in spaces}
    return substitute(data, {**chosen, **(values or {})})


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


MAX_FILE_BYTES = 1 << 20  # shipped experiments are a few KB


def read_experiment_file(path: str | Path) -> tuple[dict[str, Any], dict]:
    """The experiment file's data and the line of each key; ConfigError when unreadable."""
    source = str(path)
    try:
        size = Path(path).stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(
                f"the experiment file is {size / 2**20:.1f} MiB; experiment files are at most "
                f"{MAX_FILE_BYTES // 2**20} MiB of YAML (search spaces and lists included). Is "
                "this the right file?",
                location=source,
            )
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ConfigError(
            f"the experiment file is not UTF-8 text: byte {exc.object[exc.start]:#04x} at "
            f"line {line} is not valid UTF-8. Save it as UTF-8.",
            location=source,
        ) from None
    except FileNotFoundError:
        raise ConfigError(
            "experiment file not found." + _nearby_file(Path(path)), location=source
        ) from None
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


def load_experiment(path: str | Path, overrides: list[str] | None = None) -> LoadedExperiment:
    """Read, override and validate an experiment file."""
    data, lines = read_experiment_file(path)
    locate = Locator(str(path), lines, apply_overrides(data, overrides or []))
    return experiment_from_data(data, locate)


def validate(data: dict[str, Any], locate: Locator) -> Experiment:
    """The typed experiment for concrete data (no search spaces), or the first schema error."""
    try:
        experiment = Experiment.model_validate(data)
    except ValidationError as exc:
        raise _pydantic_error(exc, locate) from None
    return expand_preset(experiment)


def experiment_from_data(data: dict[str, Any], locate: Locator) -> LoadedExperiment:
    """Validate experiment data (as read from YAML, search spaces allowed)."""
    check_sb3_names(data, locate)
    spaces = find_spaces(data, locate)
    return LoadedExperiment(validate(_concrete(data, spaces), locate), locate, data, spaces)


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else str(value)


def trial_experiment(config: dict[str, Any]) -> dict[str, Any]:
    """The experiment in a trial's config: plain YAML data, without Tune's own ``__`` keys, and
    without ``seeds``: a trial is one seed's run (its ``seed``), unless it is a stack of them
    (``stacked``)."""
    data = {
        key: value
        for key, value in config.items()
        if not str(key).startswith("__") and (key != "seeds" or config.get("stacked"))
    }
    return json.loads(json.dumps(data, default=_plain))


def _nearby_file(path: Path) -> str:
    """`` Did you mean 'dir/x.yaml'?`` for the experiment file closest to a missing ``path`` in
    its folder (``exp.yml`` for ``exp.yaml``), or ''."""
    folder = path.parent
    try:
        names = [p.name for p in folder.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file()]
    except OSError:
        return ""
    same_stem = [name for name in names if Path(name).stem == path.stem]
    hint = f" Did you mean '{same_stem[0]}'?" if same_stem else did_you_mean(path.name, names)
    return hint.replace("'", f"'{folder}/", 1) if hint and str(folder) != "." else hint
