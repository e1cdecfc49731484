"""Every number of the experiment schema, fed its bounds +- 1, NaN and infinities: the checks
before Ray refuse it with exit code 2 (rlplat's one-paragraph error) or accept it whole."""

from __future__ import annotations

import typing
from collections.abc import Iterator

import pytest
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel

from rlplat.errors import RlplatError
from rlplat.experiment.schema import Experiment
from tests.helpers import EXPERIMENTS, TINY_PPO, check_before_ray

SELF_PLAY = EXPERIMENTS / "tictactoe_selfplay.yaml"


def _number_type(annotation: typing.Any) -> type | None:
    """int or float for a (possibly optional or constrained) number annotation, else None."""
    for arg in typing.get_args(annotation) or (annotation,):
        if arg in (int, float):
            return arg
        if typing.get_origin(arg) is typing.Annotated and typing.get_args(arg)[0] in (int, float):
            return typing.get_args(arg)[0]
    return None


def _item_bounds(annotation: typing.Any) -> Iterator[typing.Any]:
    """The bounds of each item of a list of constrained numbers (``list[Annotated[int, ...]]``)."""
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) is typing.Annotated:
            for extra in typing.get_args(arg)[1:]:
                for bound in getattr(extra, "metadata", [extra]):
                    if isinstance(bound, Ge | Gt | Le | Lt):
                        yield bound


def _sections(annotation: typing.Any) -> list[type[BaseModel]]:
    args = typing.get_args(annotation) or (annotation,)
    return [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]


def _numbers(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, type, list]]:
    """(dotted key, int or float, its bounds) for every number field under ``model``."""
    for name, field in model.model_fields.items():
        path = f"{prefix}{field.alias or name}"
        kind = _number_type(field.annotation)
        if kind is not None:
            bounds = [m for m in field.metadata if isinstance(m, Ge | Gt | Le | Lt)]
            yield path, kind, bounds + list(_item_bounds(field.annotation))
        for section in _sections(field.annotation):
            yield from _numbers(section, path + ".")


def _candidates(kind: type, bounds: list) -> list[str]:
    """The YAML values to try: each bound and the value just past it (-1 where none), the
    extremes, and a fraction for a whole number."""
    values: set[str] = set() if bounds else {"-1"}
    for bound in bounds:
        for side, past in (("ge", -1), ("gt", 0), ("le", 1), ("lt", 0)):
            limit = getattr(bound, side, None)
            if limit is not None:
                values |= {repr(limit), repr(limit + past)}
    values |= {".nan", ".inf"} if kind is float else {str(2**63), "1.5"}
    return sorted(values)


CASES = [
    pytest.param(path, value, id=f"{path}={value}")
    for path, kind, bounds in _numbers(Experiment)
    for value in _candidates(kind, bounds)
]


def test_the_walk_finds_the_schemas_numbers():
    found = {path for path, _, _ in _numbers(Experiment)}
    assert {"seed", "stop.time_s", "resources.driver.cpus", "watchdog_s"} <= found
    assert "multi_agent.self_play.pool.random" in found


@pytest.mark.parametrize(("path", "value"), CASES)
def test_a_number_at_or_past_its_bounds_is_refused_with_exit_2_or_accepted(path, value, tmp_path):
    base = SELF_PLAY if path.startswith("multi_agent.") else tmp_path / "exp.yaml"
    if base != SELF_PLAY:
        base.write_text(TINY_PPO.replace("OUTPUT", str(tmp_path / "out")))
    try:
        check_before_ray(base, f"{path}={value}")
    except RlplatError as exc:
        assert exc.exit_code == 2, f"{path}={value}: exit {exc.exit_code}: {exc}"


def test_every_count_has_an_upper_bound():
    """A count without one (checkpoint.rescore, tune.num_samples at 2**63) was accepted and
    filled the memory or the run's time; seed and seeds are bounded by their validators."""
    unbounded = {
        path
        for path, kind, bounds in _numbers(Experiment)
        if kind is int and not any(isinstance(bound, Le | Lt) for bound in bounds)
    }
    assert unbounded == {"seed", "seeds"}
