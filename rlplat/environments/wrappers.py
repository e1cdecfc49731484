"""Environment wrapper chains declared in YAML (``env.wrappers``), checked before anything runs.

A chain is an ordered list; each entry is a name or ``{name: {argument: value}}``. Names are
SuperSuit wrappers (``color_reduction_v0``, ``resize_v1``, ``frame_stack_v1``, ...: they take
PettingZoo and Gymnasium envs), Gymnasium wrapper classes (``TimeLimit``, ``FlattenObservation``;
single-agent envs only), or any ``module.path:callable`` taking the env as first argument.
Arguments are bound against the wrapper's real signature before the env is built.

A wrapper whose ``training_only`` attribute is true (an episodic-life or reward-clipping wrapper)
is applied to training envs only; the env built for evaluation leaves it out.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium.wrappers
import supersuit

from rlplat.errors import allowed_list, did_you_mean
from rlplat.experiment.schema import NamedEntry, entry_parts
from rlplat.util.imports import import_object

# SuperSuit names that do not wrap one env (vector envs) or need Python callables.
_NOT_CHAINABLE = re.compile(r"vec|vector|stable_baselines|lambda")


def supersuit_wrappers() -> list[str]:
    return sorted(
        name
        for name in dir(supersuit)
        if re.search(r"_v\d+$", name) and not _NOT_CHAINABLE.search(name)
    )


def gymnasium_wrappers() -> list[str]:
    return sorted(
        name
        for name in dir(gymnasium.wrappers)
        if name[:1].isupper()
        and inspect.isclass(getattr(gymnasium.wrappers, name))
        and not name.endswith(("V0", "Wrapper"))
    )


class WrapperProblem(ValueError):
    """A wrapper entry that cannot be used; ``index`` is its position in the chain."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index


@dataclass(frozen=True)
class Wrapper:
    name: str
    function: Callable[..., Any]
    kwargs: dict[str, Any]

    @property
    def training_only(self) -> bool:
        return bool(getattr(self.function, "training_only", False))

    def apply(self, env: Any, index: int) -> Any:
        try:
            return self.function(env, **self.kwargs)
        except Exception as exc:  # noqa: BLE001 - SuperSuit asserts, Gymnasium raises many types
            detail = str(exc) or type(exc).__name__
            raise WrapperProblem(index, f"wrapper {self.name!r} failed: {detail}") from exc


def resolve(entry: NamedEntry, index: int, *, multi_agent: bool) -> Wrapper:
    """The wrapper an entry names, with its arguments bound against the real signature."""
    name, kwargs = entry_parts(entry)
    function = _lookup(name, index, multi_agent=multi_agent)
    try:
        inspect.signature(function).bind(None, **kwargs)
    except TypeError as exc:
        params = [p for p in list(inspect.signature(function).parameters)[1:] if p != "kwargs"]
        raise WrapperProblem(
            index,
            f"wrapper {name!r} does not accept these arguments ({exc}); its arguments: "
            f"{allowed_list(params) or 'none'}." + _hint(kwargs, params),
        ) from None
    return Wrapper(name, function, kwargs)


def resolve_chain(entries: list[NamedEntry], *, multi_agent: bool) -> list[Wrapper]:
    return [resolve(entry, i, multi_agent=multi_agent) for i, entry in enumerate(entries)]


def apply_chain(env: Any, chain: list[Wrapper], *, evaluation: bool = False) -> Any:
    """``env`` in the chain's wrappers; for ``evaluation``, without the training-only ones."""
    for index, wrapper in enumerate(chain):
        if not (evaluation and wrapper.training_only):
            env = wrapper.apply(env, index)
    return env


def _lookup(name: str, index: int, *, multi_agent: bool) -> Callable[..., Any]:
    if ":" in name:
        try:
            return import_object(name)
        except (ImportError, AttributeError) as exc:
            raise WrapperProblem(index, f"cannot import wrapper {name!r}: {exc}") from None

    known = supersuit_wrappers()
    if name in known:
        return getattr(supersuit, name)
    gym_known = [] if multi_agent else gymnasium_wrappers()
    if name in gym_known:
        return getattr(gymnasium.wrappers, name)
    kinds = "SuperSuit wrappers" if multi_agent else "SuperSuit or Gymnasium wrappers"
    if multi_agent and name in gymnasium_wrappers():
        kinds += f" ({name!r} is a Gymnasium wrapper, for single-agent envs only)"
    raise WrapperProblem(
        index,
        f"unknown wrapper {name!r}."
        + did_you_mean(name, known + gym_known)
        + f" Use one of the {kinds}: {allowed_list(known + gym_known, limit=60)}; "
        "or 'module.path:callable'.",
    )


def _hint(given: dict[str, Any], params: list[str]) -> str:
    for key in given:
        if key not in params:
            return did_you_mean(key, params)
    return ""
