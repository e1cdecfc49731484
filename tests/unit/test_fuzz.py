"""Generated experiment files: the loader accepts each one or raises rlplat's own error."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlplat.errors import RlplatError
from rlplat.experiment.load import load_experiment
from rlplat.prepare import prepare
from tests.helpers import EXPERIMENTS

BASES = [
    yaml.safe_load((EXPERIMENTS / name).read_text())
    for name in (
        "cartpole_ppo.yaml",
        "cartpole_dqn.yaml",
        "pendulum_sac.yaml",
        "two_step_qmix.yaml",
    )
]


def _keys(data: Any) -> set[str]:
    if isinstance(data, dict):
        return {str(k) for k in data} | {k for v in data.values() for k in _keys(v)}
    if isinstance(data, list):
        return {k for v in data for k in _keys(v)}
    return set()


# Keys the generator draws from: the real ones of the shipped experiments, and a few more.
KEYS = sorted({key for base in BASES for key in _keys(base)} | {"prefer", "custom", "searcher"})

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**40), max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["", "PPO", "CartPole-v1", "max", "min", "auto", "1e-3", "-1", "~", "yes"]),
    st.text(max_size=12),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner, max_size=4),
    ),
    max_leaves=8,
)


def _paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            found += _paths(value, (*prefix, key))
    return found


@st.composite
def experiment_texts(draw: st.DrawFn) -> str:
    """A shipped experiment with a few keys set, added or removed, then perhaps the text
    damaged (a tab, a repeated line, a cut, stray characters)."""
    import copy

    data = copy.deepcopy(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(0, 3))):
        paths = _paths(data)
        path = draw(st.sampled_from(paths)) if paths else ()
        action = draw(st.sampled_from(["set", "add", "delete"]))
        parent = data
        for key in path[:-1]:
            parent = parent[key]
        if not path or not isinstance(parent, dict):
            continue
        if action == "delete":
            parent.pop(path[-1], None)
        elif action == "set":
            parent[path[-1]] = draw(values)
        elif isinstance(parent.get(path[-1]), dict):
            parent[path[-1]][draw(st.sampled_from(KEYS))] = draw(values)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    damage = draw(st.sampled_from(["none", "none", "tab", "repeat", "cut", "insert"]))
    lines = text.splitlines(keepends=True)
    at = draw(st.integers(0, max(len(lines) - 1, 0)))
    if damage == "tab" and lines:
        lines[at] = "\t" + lines[at]
    elif damage == "repeat" and lines:
        lines.insert(at, lines[at])
    elif damage == "cut":
        return text[: draw(st.integers(0, len(text)))]
    elif damage == "insert":
        lines.insert(at, draw(st.text(max_size=20)) + "\n")
    return "".join(lines)


overrides = st.lists(
    st.builds(
        lambda path, value: f"{'.'.join(path)}={value}",
        st.lists(st.sampled_from(KEYS), min_size=1, max_size=3),
        st.one_of(
            st.sampled_from(["1", "-1", "0.5", "nan", "[1, 2]", "{a: 1}", "", "x"]),
            st.text(max_size=6),
        ),
    ),
    max_size=2,
)


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=experiment_texts(), extra=st.one_of(st.just([]), overrides))
def test_generated_experiments_load_or_fail_with_rlplat_errors(tmp_path_factory, text, extra):
    """1000 generated files (and command-line overrides): each loads (its env and RLlib config
    built) or raises an RlplatError; never a KeyError, TypeError or pydantic traceback. The
    probe (module built, one update) is left out: test_experiments and test_config_errors run
    it, and 1000 of them would take minutes."""
    path = Path(tmp_path_factory.mktemp("fuzz")) / "exp.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        loaded = prepare(load_experiment(path, extra), probe=False)
    except RlplatError as exc:
        assert str(exc).strip(), "an error says what is wrong"
        return
    assert loaded.algo_config is not None
    assert not (isinstance(loaded.experiment.seed, float) and math.isnan(loaded.experiment.seed))
