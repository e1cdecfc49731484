"""Search spaces written in the experiment file: ``lr: {loguniform: [1.0e-5, 1.0e-3]}``.

A value that is a one-key mapping whose key is a space kind (``grid``, ``choice``, ``uniform``,
``quniform``, ``loguniform``, ``randint``, ``qrandint``, ``normal``) is searched by Ray Tune instead
of being used as it is. Spaces may stand at ``seed``, anywhere under ``env.kwargs``, the RLlib
sections (``training``, ``rl_module``, ...) and ``multi_agent.overrides``; each trial gets an
experiment with concrete values there.

A ``choice`` whose options are mappings is *conditional*: each option (a branch) is a mapping of
keys to constants or further spaces, and the trial's value is the drawn branch with its own spaces
drawn, e.g. ``optimizer: {choice: [{type: adam, lr: {loguniform: [1e-4, 1e-2]}}, {type: sgd,
lr: ..., momentum: ...}]}``. Spaces inside a branch exist only when it is drawn.

Everything is checked here, before Ray starts: bounds, types, and that spaces stand only where a
trial can vary them.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rlplat.errors import ConfigError, did_you_mean
from rlplat.experiment.schema import RLLIB_SECTIONS

Path = tuple[str, ...]

CATEGORICAL = ("grid", "choice")
CONTINUOUS = ("uniform", "quniform", "loguniform", "randint", "qrandint", "normal")
SPACE_KINDS = CATEGORICAL + CONTINUOUS

# kind -> its arguments and what it draws, for messages and docs
SPACE_FORMS: dict[str, str] = {
    "grid": "[v1, v2, ...]: every value, in every sample (a grid of all grid keys)",
    "choice": "[v1, v2, ...]: one value, drawn uniformly",
    "uniform": "[low, high]: a float in [low, high]",
    "quniform": "[low, high, q]: a float in [low, high], rounded to a multiple of q",
    "loguniform": "[low, high]: a float with log(value) uniform, 0 < low < high",
    "randint": "[low, high]: an integer in [low, high) (high excluded)",
    "qrandint": "[low, high, q]: an integer in [low, high] (high included), a multiple of q",
    "normal": "[mean, sd]: a float from a normal distribution, sd > 0",
}

SEARCHABLE_ROOTS: tuple[Path, ...] = (
    ("seed",),
    ("env", "kwargs"),
    ("multi_agent", "overrides"),
    *((section,) for section in RLLIB_SECTIONS),
)


@dataclass(frozen=True)
class Space:
    """One searched value: its place in the experiment, its kind and its arguments."""

    path: Path
    kind: str
    args: tuple[Any, ...]

    @property
    def dotted(self) -> str:
        return ".".join(self.path)

    @property
    def categorical(self) -> bool:
        return self.kind in CATEGORICAL

    @property
    def conditional(self) -> bool:
        """A choice between mappings (branches), each with its own constants and spaces."""
        return self.kind == "choice" and isinstance(self.args[0], dict)

    def branch_spaces(self, index: int) -> list[Space]:
        """The spaces inside branch ``index``, their paths relative to the branch."""
        return [
            Space((key,), _space_kind(value), tuple(value[_space_kind(value)]))
            for key, value in self.args[index].items()
            if _space_kind(value) is not None
        ]

    def _branch_with(self, index: int, pick: Callable[[Space], Any]) -> dict[str, Any]:
        """Branch ``index`` with each of its spaces replaced by ``pick(space)``."""
        inner = {space.path[0]: pick(space) for space in self.branch_spaces(index)}
        return {**self.args[index], **inner}

    @property
    def value_paths(self) -> list[Path]:
        """Where a trial's drawn values are reported: the space's own path, or for a
        conditional one each key any branch has (absent from the other branches' trials)."""
        if not self.conditional:
            return [self.path]
        keys = dict.fromkeys(key for branch in self.args for key in branch)
        return [(*self.path, key) for key in keys]

    def representative(self) -> Any:
        """A value of the right type, for validating the experiment before any trial exists."""
        if self.conditional:
            return self._branch_with(0, Space.representative)
        if self.categorical:
            return self.args[0]
        if self.kind in ("randint", "qrandint"):
            return int(self.args[0])
        return float(self.args[0])

    def candidates(self) -> list[Any]:
        """Values worth type-checking: every category, or both ends of a range; each branch of
        a conditional choice with its spaces at both ends."""
        if self.conditional:
            values = []
            for index in range(len(self.args)):
                for end in (0, -1):
                    value = self._branch_with(index, lambda s, end=end: s.candidates()[end])
                    if value not in values:
                        values.append(value)
            return values
        if self.categorical:
            return list(self.args)
        if self.kind == "normal":
            return [float(self.args[0])]
        if self.kind in ("randint", "qrandint"):
            return [int(self.args[0]), int(self.args[1])]
        return [float(self.args[0]), float(self.args[1])]

    def bounds(self) -> tuple[float, float] | None:
        """[low, high] of a numeric range (PB2 explores within it); None for other kinds."""
        if self.categorical or self.kind == "normal":
            return None
        return float(self.args[0]), float(self.args[1])

    def to_tune(self) -> Any:
        """The Ray Tune domain for this space."""
        from ray import tune  # noqa: PLC0415 - the experiment stage loads without Ray

        a = self.args
        if self.conditional:  # Tune draws a branch, then the spaces inside it
            return tune.choice([self._branch_with(i, Space.to_tune) for i in range(len(a))])
        return {
            "grid": lambda: tune.grid_search(list(a)),
            "choice": lambda: tune.choice(list(a)),
            "uniform": lambda: tune.uniform(a[0], a[1]),
            "quniform": lambda: tune.quniform(a[0], a[1], a[2]),
            "loguniform": lambda: tune.loguniform(a[0], a[1]),
            "randint": lambda: tune.randint(a[0], a[1]),
            "qrandint": lambda: tune.qrandint(a[0], a[1], a[2]),
            "normal": lambda: tune.randn(a[0], a[1]),
        }[self.kind]()

    def to_yaml(self) -> dict[str, list[Any]]:
        return {self.kind: list(self.args)}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _branch_problem(branches: list[Any]) -> str | None:
    """Why the options of a conditional choice are not valid branches (None when they are)."""
    if not all(isinstance(b, dict) and b for b in branches):
        return (
            "a conditional choice takes only mappings (each a branch of keys and values or "
            f"spaces), got {branches!r}"
        )
    for number, branch in enumerate(branches, 1):
        for key, value in branch.items():
            kind = _space_kind(value)
            where = f"branch {number}, key {key!r}"
            if kind is None:
                hint = _looks_misspelt(value)
                if hint:
                    return f"{where}: {next(iter(value))!r} is not a search space.{hint}"
                continue
            if kind == "grid":
                return f"{where}: a grid cannot stand inside a choice (use choice there)"
            if kind == "choice" and value[kind] and isinstance(value[kind][0], dict):
                return f"{where}: conditional choices do not nest; flatten the branches"
            problem = _space_problem(kind, value[kind])
            if problem:
                return f"{where}: {problem}"
    return None


def _space_problem(kind: str, args: Any) -> str | None:
    """Why ``{kind: args}`` is not a valid space (None when it is)."""
    if not isinstance(args, list) or not args:
        return f"{kind} takes a list: {SPACE_FORMS[kind]}"
    if kind == "choice" and any(isinstance(a, dict) for a in args):
        return _branch_problem(args)
    if kind in CATEGORICAL:
        return None
    arity = 3 if kind in ("quniform", "qrandint") else 2
    if len(args) != arity or not all(_is_number(a) for a in args):
        return f"{kind} takes {arity} numbers {SPACE_FORMS[kind]}, got {args!r}"
    if kind == "normal":
        return None if args[1] > 0 else f"normal needs sd > 0, got sd {args[1]!r}"
    low, high = args[0], args[1]
    if kind in ("randint", "qrandint") and not all(_is_int(a) for a in args):
        return f"{kind} takes integers {SPACE_FORMS[kind]}, got {args!r}"
    if not low < high:
        return f"{kind} needs low < high, got low {low!r} and high {high!r}"
    if kind == "loguniform" and low <= 0:
        return f"loguniform needs 0 < low (log of {low!r} is undefined), got {args!r}"
    if arity == 3 and args[2] <= 0:
        return f"{kind} needs q > 0, got q {args[2]!r}"
    return None


def _space_kind(value: Any) -> str | None:
    """The kind if ``value`` is written as a space, else None."""
    if isinstance(value, dict) and len(value) == 1:
        [key] = value
        if key in SPACE_KINDS:
            return key
    return None


def _looks_misspelt(value: Any) -> str | None:
    """``{logunifrom: [...]}``: a one-key mapping of a list whose key is close to a space kind."""
    if isinstance(value, dict) and len(value) == 1:
        [(key, args)] = value.items()
        if isinstance(key, str) and isinstance(args, list) and key not in SPACE_KINDS:
            return did_you_mean(key, SPACE_KINDS) or None
    return None


def _walk(node: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    """Every (path, value) below ``node``, parents before children; lists are not entered."""
    yield path, node
    if isinstance(node, dict) and _space_kind(node) is None:
        for key, value in node.items():
            yield from _walk(value, (*path, str(key)))


def _searchable(path: Path) -> bool:
    return any(path[: len(root)] == root for root in SEARCHABLE_ROOTS)


def find_spaces(data: dict[str, Any], locate: Callable[[str], str]) -> list[Space]:
    """Every search space in the experiment data, checked; ConfigError for a bad one."""
    spaces: list[Space] = []
    for path, value in _walk(data, ()):
        if not path or path[0] == "tune":
            continue
        dotted = ".".join(path)
        kind = _space_kind(value)
        if kind is None:
            hint = _looks_misspelt(value) if _searchable(path) else None
            if hint:
                raise ConfigError(
                    f"{next(iter(value))!r} is not a search space.{hint} Spaces: "
                    f"{', '.join(SPACE_KINDS)}.",
                    location=locate(dotted),
                    key=dotted,
                )
            continue
        if not _searchable(path):
            raise ConfigError(
                f"a search space ({kind}) cannot stand here: a trial may vary seed, env.kwargs, "
                "multi_agent.overrides and the RLlib sections (training, env_runners, rl_module, "
                "...), not this key.",
                location=locate(dotted),
                key=dotted,
            )
        problem = _space_problem(kind, value[kind])
        if problem:
            raise ConfigError(problem + ".", location=locate(dotted), key=dotted)
        spaces.append(Space(path, kind, tuple(value[kind])))
    return spaces


def value_at(data: dict[str, Any], path: Path) -> Any:
    """The value at ``path`` in experiment data; None when a key is missing."""
    node: Any = data
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _set(data: dict[str, Any], path: Path, value: Any) -> None:
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


def substitute(data: dict[str, Any], values: dict[Path, Any]) -> dict[str, Any]:
    """A deep copy of ``data`` with the value at each path replaced."""
    out = copy.deepcopy(data)
    for path, value in values.items():
        _set(out, path, value)
    return out


def without_paths(data: dict[str, Any], paths: list[Path]) -> dict[str, Any]:
    """A deep copy of ``data`` without the keys at ``paths``."""
    out = copy.deepcopy(data)
    for path in paths:
        parent = value_at(out, path[:-1])
        if isinstance(parent, dict):
            parent.pop(path[-1], None)
    return out


def describe(space: Space) -> str:
    """``training.lr ~ loguniform(1e-05, 0.001)`` for tables and logs; a conditional choice
    lists its branches, ``{type: 'sgd', momentum ~ uniform(0.5, 0.99)}``."""
    if not space.conditional:
        return f"{space.dotted} ~ {space.kind}({', '.join(map(repr, space.args))})"
    branches = []
    for index, branch in enumerate(space.args):
        inner = {s.path[0]: s for s in space.branch_spaces(index)}
        parts = [
            f"{key} ~ {inner[key].kind}({', '.join(map(repr, inner[key].args))})"
            if key in inner
            else f"{key}: {value!r}"
            for key, value in branch.items()
        ]
        branches.append("{" + ", ".join(parts) + "}")
    return f"{space.dotted} ~ choice({', '.join(branches)})"
