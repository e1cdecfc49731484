"""The ``tune:`` section as Ray Tune objects: searcher, scheduler and the trials' param space.

Everything here runs before Ray starts: a searcher whose library is missing, an option the
scheduler does not take, or spaces a searcher cannot handle (Optuna has no grid) is a
``ConfigError`` naming ``tune.searcher`` or ``tune.scheduler``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ray import tune
from ray.tune.search import ConcurrencyLimiter, Repeater
from ray.tune.search.repeater import TRIAL_INDEX

from rlplat.errors import ConfigError, not_among
from rlplat.experiment.schema import Experiment, TuneSpec, entry_parts
from rlplat.experiment.spaces import Space, substitute, without_paths
from rlplat.experiment.tuning import (
    BOHB_SCHEDULER,
    CONDITIONAL_SEARCHERS,
    SCHEDULERS,
    SEARCHERS,
)
from rlplat.metrics import metric_path
from rlplat.util.imports import import_object

POPULATION_SCHEDULERS = tuple(name for name, s in SCHEDULERS.items() if s.population)

# Options rlplat sets itself, and where the user sets them instead.
OWNED_OPTIONS = {
    "metric": "tune.metric",
    "mode": "tune.mode",
    "time_attr": "tune.time_attr",
    "space": "the search spaces in the experiment",
    "hyperparam_mutations": "the search spaces in the experiment (pbt mutates them)",
    "hyperparam_bounds": "the search spaces in the experiment (pb2 explores their ranges)",
    "max_concurrent": "tune.max_concurrent",
    "random_state": "seed",
    "random_state_seed": "seed",
    "seed": "seed",
    "custom_explore_fn": None,
    "sampler": None,
    "storage": None,
    "log_config": None,
}

INSTALL_HINT = "pip install 'rlplat[tune]'"
# Where Optuna's own names for the drawn values go in a trial's config (dropped from the
# experiment: ``trial_experiment`` leaves out ``__`` keys).
OPTUNA_NAMES = "__search__"


@dataclass
class SearchSetup:
    """What ``tune.Tuner`` needs beyond the trainable: built once, before Ray starts."""

    param_space: dict[str, Any]
    searcher: Any
    scheduler: Any
    spaces: list[Space]
    num_samples: int  # Tune's num_samples: with a searcher and seeds, configurations x seeds


class SeedRepeater(Repeater):
    """Tune's Repeater with seeds: each configuration the searcher suggests runs once per seed,
    and the searcher learns the configuration's mean over them."""

    def __init__(self, searcher: Any, seeds: list[int]):
        super().__init__(searcher, repeat=len(seeds), set_index=True)
        self.seeds = list(seeds)

    def suggest(self, trial_id: str) -> dict | None:
        config = super().suggest(trial_id)
        if isinstance(config, dict) and TRIAL_INDEX in config:
            config = dict(config)
            config["seed"] = self.seeds[config.pop(TRIAL_INDEX)]
        return config


def _require(packages: tuple[str, ...], what: str, key: str, locate: Callable[[str], str]) -> None:
    for package in packages:
        try:
            importlib.import_module(package)
        except ImportError:
            raise ConfigError(
                f"{what} needs the Python package {package!r}, which is not installed here. "
                f"Install the tuning extras with {INSTALL_HINT}, or choose another "
                f"{key.split('.')[-1]}.",
                location=locate(key),
                key=key,
            ) from None


def _options(cls: type, given: dict[str, Any], name: str, key: str, locate) -> dict[str, Any]:
    """Check the user's options against the class's constructor; OWNED ones point elsewhere."""
    accepted = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    allowed = [p for p in accepted if p not in OWNED_OPTIONS]
    for option in given:
        path = f"{key}.{name}.{option}"
        if option in OWNED_OPTIONS and option in accepted:
            owner = OWNED_OPTIONS[option]
            raise ConfigError(
                f"rlplat sets {option!r} itself"
                + (f": set it with {owner}." if owner else " (not configurable from YAML)."),
                location=locate(path),
                key=path,
            )
        if option not in allowed:
            raise ConfigError(
                f"{name} has no option {option!r}." + not_among(option, allowed),
                location=locate(path),
                key=path,
            )
    return dict(given)


def _nested(spaces: list[Space], value: Callable[[Space], Any]) -> dict[str, Any]:
    """{training: {lr: value(space)}}: a tree mirroring the experiment, as PBT and PB2 want."""
    tree: dict[str, Any] = {}
    for space in spaces:
        node = tree
        for key in space.path[:-1]:
            node = node.setdefault(key, {})
        node[space.path[-1]] = value(space)
    return tree


def _make_searcher(exp: Experiment, tune_spec: TuneSpec, spaces: list[Space], locate) -> Any:
    name, options = entry_parts(tune_spec.searcher)
    searcher = SEARCHERS[name]
    _require(searcher.packages, f"searcher {name}", "tune.searcher", locate)
    cls = import_object(searcher.cls)
    kwargs = _options(cls, options, name, "tune.searcher", locate)
    if exp.seed is not None and searcher.seed_option:
        kwargs[searcher.seed_option] = exp.seed
    if name == "random":
        if exp.seeds:
            # seed is a grid over the seeds: every sampled value is kept for all of them.
            kwargs["constant_grid_search"] = True
        return cls(max_concurrent=tune_spec.max_concurrent or 0, **kwargs)
    _check_sampled_spaces(name, spaces, locate)
    built = _sampling_searcher(cls, name, kwargs, tune_spec, spaces, locate)
    if exp.seeds:
        built = SeedRepeater(built, exp.seeds)
    if tune_spec.max_concurrent:
        built = ConcurrencyLimiter(built, max_concurrent=tune_spec.max_concurrent)
    return built


def _check_sampled_spaces(name: str, spaces: list[Space], locate) -> None:
    """What a sampling searcher (all but random) cannot search: a conditional choice (unless it
    draws branches first), a grid, or no space at all."""
    conditional = [s.dotted for s in spaces if s.conditional]
    if conditional and name not in CONDITIONAL_SEARCHERS:
        raise ConfigError(
            f"searcher {name} cannot sample a conditional choice ({conditional[0]}: a choice "
            f"between mappings): use searcher {', '.join(CONDITIONAL_SEARCHERS)}, or write the "
            "branches as separate searches.",
            location=locate(conditional[0]),
            key=conditional[0],
        )
    grids = [s.dotted for s in spaces if s.kind == "grid"]
    if grids:
        raise ConfigError(
            f"searcher {name} samples spaces and cannot enumerate a grid ({', '.join(grids)}): "
            "use choice there, or searcher random for a grid.",
            location=locate(grids[0]),
            key=grids[0],
        )
    if not spaces:
        raise ConfigError(
            f"searcher {name} has nothing to search: declare at least one search space, e.g. "
            "training.lr: {loguniform: [1.0e-5, 1.0e-3]}.",
            location=locate("tune.searcher"),
            key="tune.searcher",
        )


def _sampling_searcher(
    cls: type, name: str, kwargs: dict[str, Any], tune_spec: TuneSpec, spaces: list[Space], locate
) -> Any:
    """The searcher, given the spaces in its own form where it holds them (see owns_space); a
    ConfigError where its library refuses them."""
    try:
        if any(s.conditional for s in spaces):
            kwargs["space"] = _own_space(name, spaces, locate)
            kwargs["metric"], kwargs["mode"] = metric_path(tune_spec.metric), tune_spec.mode
        else:
            cls.convert_search_space(_nested(spaces, Space.to_tune))
        return cls(**kwargs)
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - each library raises its own types
        raise ConfigError(
            f"searcher {name} rejected the search: {exc}",
            location=locate("tune.searcher"),
            key="tune.searcher",
        ) from None


def owns_space(tune_spec: TuneSpec, spaces: list[Space]) -> bool:
    """Whether the searcher holds the spaces itself: HyperOpt and Optuna with a conditional
    choice, which Tune's conversion of a param space cannot express for them. The trials'
    param space then leaves those keys out and the searcher's suggestion fills them in."""
    name = entry_parts(tune_spec.searcher)[0]
    return name != "random" and name in CONDITIONAL_SEARCHERS and any(s.conditional for s in spaces)


def _own_space(name: str, spaces: list[Space], locate) -> Any:
    if name == "hyperopt":
        return _hyperopt_space(spaces)
    for space in spaces:
        inner = (
            [space]
            if not space.conditional
            else [s for i in range(len(space.args)) for s in space.branch_spaces(i)]
        )
        if any(s.kind == "normal" for s in inner):
            raise ConfigError(
                f"searcher optuna has no normal distribution ({space.dotted}): use uniform or "
                "loguniform, or searcher hyperopt.",
                location=locate(space.dotted),
                key=space.dotted,
            )
    return OptunaDefineByRun(spaces)


def _hyperopt_space(spaces: list[Space]) -> dict[str, Any]:
    """The spaces as HyperOpt expressions: a conditional choice is ``hp.choice`` over its
    branches, each branch's spaces labelled ``<key>/<branch>/<inner key>`` (labels are unique)."""
    from hyperopt import hp  # noqa: PLC0415 - an optional package, checked by _require
    from ray.tune.search.hyperopt import HyperOptSearch  # noqa: PLC0415

    def expression(space: Space) -> Any:
        if not space.conditional:
            return HyperOptSearch.convert_search_space({space.dotted: space.to_tune()})[
                space.dotted
            ]
        branches = []
        for index, branch in enumerate(space.args):
            inner = {s.path[0]: s.to_tune() for s in space.branch_spaces(index)}
            converted = HyperOptSearch.convert_search_space(inner, prefix=f"{space.dotted}/{index}")
            branches.append({**branch, **converted})
        return hp.choice(space.dotted, branches)

    return _nested(spaces, expression)


def _optuna_suggest(trial: Any, space: Space, name: str) -> Any:
    a = space.args
    if space.kind == "choice":  # by index: Optuna's categories must be plain scalars
        return a[trial.suggest_categorical(name, list(range(len(a))))]
    if space.kind in ("uniform", "loguniform"):
        return trial.suggest_float(name, a[0], a[1], log=space.kind == "loguniform")
    if space.kind == "quniform":
        return trial.suggest_float(name, a[0], a[1], step=a[2])
    if space.kind == "randint":
        return trial.suggest_int(name, a[0], a[1] - 1)
    return trial.suggest_int(name, a[0], a[1], step=a[2])  # qrandint


class OptunaDefineByRun:
    """Optuna's define-by-run form: a conditional choice's branch is drawn first, then only
    that branch's spaces, so Optuna's sampler sees each branch's values only in its trials.
    A class, not a closure: Tune pickles the searcher with its space."""

    def __init__(self, spaces: list[Space]):
        self.spaces = spaces

    def __call__(self, trial: Any) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for space in self.spaces:
            name = f"{OPTUNA_NAMES}/{space.dotted}"
            if not space.conditional:
                values["/".join(space.path)] = _optuna_suggest(trial, space, name)
                continue
            index = trial.suggest_categorical(name, list(range(len(space.args))))
            drawn = {
                s.path[0]: _optuna_suggest(trial, s, f"{name}[{index}].{s.path[0]}")
                for s in space.branch_spaces(index)
            }
            values["/".join(space.path)] = {**space.args[index], **drawn}
        return values


def scheduler_name(exp: Experiment) -> str:
    """The experiment's scheduler (fifo when it has none)."""
    return scheduler_entry(exp.tune or TuneSpec())[0]


def scheduler_entry(tune_spec: TuneSpec) -> tuple[str, dict[str, Any]]:
    """(name, options) of the scheduler; by default fifo, or hyperband for searcher bohb."""
    searcher_name, _ = entry_parts(tune_spec.searcher)
    return entry_parts(tune_spec.scheduler or ("hyperband" if searcher_name == "bohb" else "fifo"))


def _make_scheduler(exp: Experiment, tune_spec: TuneSpec, spaces: list[Space], locate) -> Any:
    searcher_name, _ = entry_parts(tune_spec.searcher)
    name, options = scheduler_entry(tune_spec)
    key = "tune.scheduler"
    scheduler = SCHEDULERS[name]
    path = _scheduler_class(searcher_name, name, locate)
    _require(scheduler.packages, f"scheduler {name}", key, locate)
    cls = import_object(path)
    kwargs = _options(cls, options, name, key, locate)
    if name != "fifo":
        kwargs["time_attr"] = metric_path(tune_spec.time_attr)
    if scheduler.budgeted and "max_t" not in kwargs:
        kwargs["max_t"] = _budget(exp, tune_spec, name, locate)
    if scheduler.population:
        # rlplat's windowed return appears once a trial's first episode has ended.
        kwargs.setdefault("require_attrs", False)
        kwargs.update(_population_options(name, spaces, locate))
    try:
        return cls(**kwargs)
    except Exception as exc:  # noqa: BLE001
        raise ConfigError(
            f"scheduler {name} rejected its options: {exc}", location=locate(key), key=key
        ) from None


def _scheduler_class(searcher_name: str, name: str, locate) -> str:
    """The scheduler's class (``module:Class``): searcher bohb runs only with its own HyperBand,
    and a population-based scheduler only with searcher random."""
    if searcher_name == "bohb":
        if name != "hyperband":
            raise ConfigError(
                f"searcher bohb runs with its own HyperBand scheduler, not {name}: set "
                "tune.scheduler to hyperband (or leave it out).",
                location=locate("tune.scheduler"),
                key="tune.scheduler",
            )
        return BOHB_SCHEDULER
    if SCHEDULERS[name].population and searcher_name != "random":
        raise ConfigError(
            f"{name} evolves a population drawn by searcher random; {searcher_name} would fight it "
            "over the same hyperparameters. Remove tune.searcher.",
            location=locate("tune.searcher"),
            key="tune.searcher",
        )
    return SCHEDULERS[name].cls


def _budget(exp: Experiment, tune_spec: TuneSpec, name: str, locate) -> float:
    """max_t of a budgeted scheduler not given one: the experiment's stop at the time_attr."""
    budget = getattr(exp.stop, tune_spec.time_attr)
    if budget is None:
        raise ConfigError(
            f"{name} needs max_t, the most {tune_spec.time_attr} a trial may run: give "
            f"tune.scheduler.{name}.max_t, or stop.{tune_spec.time_attr} (then max_t is that "
            "budget).",
            location=locate("tune.scheduler"),
            key="tune.scheduler",
        )
    return budget


def _population_options(name: str, spaces: list[Space], locate) -> dict[str, Any]:
    """What pbt mutates (hyperparam_mutations) or pb2 explores (hyperparam_bounds): the
    experiment's search spaces, which must exist, hold no conditional choice, and for pb2 be
    numeric ranges."""
    key = "tune.scheduler"
    if not spaces:
        raise ConfigError(
            f"{name} mutates the experiment's search spaces, and there are none: write the "
            "hyperparameters it may change as spaces, e.g. training.lr: {loguniform: [1.0e-5, "
            "1.0e-3]}.",
            location=locate(key),
            key=key,
        )
    conditional = [s.dotted for s in spaces if s.conditional]
    if conditional:
        raise ConfigError(
            f"{name} mutates each hyperparameter on its own and cannot move a trial between "
            f"the branches of a conditional choice ({conditional[0]}); use scheduler fifo, "
            "asha or hyperband with it.",
            location=locate(conditional[0]),
            key=conditional[0],
        )
    if name == "pbt":
        return {
            "hyperparam_mutations": _nested(
                spaces, lambda s: list(s.args) if s.categorical else s.to_tune()
            )
        }
    unbounded = [s.dotted for s in spaces if s.bounds() is None]
    if unbounded:
        raise ConfigError(
            "pb2 explores numeric ranges (uniform, quniform, loguniform, randint, "
            f"qrandint); {', '.join(unbounded)} has none. Use pbt for categories.",
            location=locate(unbounded[0]),
            key=unbounded[0],
        )
    return {"hyperparam_bounds": _nested(spaces, lambda s: list(s.bounds()))}


def _check_seeds(exp: Experiment, tune_spec: TuneSpec, spaces: list[Space], locate) -> None:
    """``seeds`` runs each configuration once per seed: the seed is not also searched, and no
    scheduler judges one seed's trial apart from its configuration's others."""
    if any(space.path == ("seed",) for space in spaces):
        raise ConfigError(
            "seed is a search space and seeds is given: seeds already runs every configuration "
            "on each seed. Remove one of them.",
            location=locate("seeds"),
            key="seeds",
        )
    if len(exp.seeds or []) < 2:
        return
    searcher, options = entry_parts(tune_spec.searcher)
    if searcher == "bohb":
        raise ConfigError(
            f"seeds ({len(exp.seeds or [])}) cannot run with searcher bohb: BOHB's own HyperBand "
            "stops each seed's trial on its own, so a configuration's seeds would stop after "
            "different budgets. Use searcher optuna or hyperopt with seeds.",
            location=locate("seeds"),
            key="seeds",
        )
    if searcher == "random" and "constant_grid_search" in options:
        raise ConfigError(
            "with seeds, rlplat keeps every sampled value the same on all seeds "
            "(constant_grid_search: true): leave the option out.",
            location=locate("tune.searcher"),
            key="tune.searcher",
        )
    scheduler = scheduler_entry(tune_spec)[0]
    if scheduler == "fifo":
        return
    why = (
        "population-based training copies weights between trials, so the seeds of one "
        "configuration would not stay independent runs"
        if scheduler in POPULATION_SCHEDULERS
        else "an early-stopping scheduler judges each seed's trial alone, so a configuration's "
        "seeds would stop after different budgets and their mean would compare unequal runs"
    )
    raise ConfigError(
        f"seeds ({len(exp.seeds or [])}) cannot run with scheduler {scheduler}: {why}. Search "
        "with one seed (leave out seeds), then run the winner's best.yaml with --seeds N; or use "
        "scheduler fifo.",
        location=locate("seeds"),
        key="seeds",
    )


def search_setup(
    exp: Experiment, resolved: dict[str, Any], spaces: list[Space], locate
) -> SearchSetup:
    """Searcher, scheduler and the param space (the resolved experiment with Tune domains).

    With ``seeds``, the random searcher gets ``seed`` as a grid over the seeds; other searchers
    are wrapped in a :class:`SeedRepeater`, and Tune draws configurations x seeds trials.
    """
    tune_spec = exp.tune or TuneSpec()
    _check_seeds(exp, tune_spec, spaces, locate)
    param_space = {k: v for k, v in resolved.items() if k != "tune"}
    if owns_space(tune_spec, spaces):
        param_space = without_paths(param_space, [space.path for space in spaces])
    else:
        param_space = substitute(param_space, {space.path: space.to_tune() for space in spaces})
    num_samples = tune_spec.num_samples
    if exp.seeds:
        if entry_parts(tune_spec.searcher)[0] == "random":
            param_space["seed"] = tune.grid_search(list(exp.seeds))
        else:
            num_samples *= len(exp.seeds)
    return SearchSetup(
        param_space=param_space,
        searcher=_make_searcher(exp, tune_spec, spaces, locate),
        scheduler=_make_scheduler(exp, tune_spec, spaces, locate),
        spaces=spaces,
        num_samples=num_samples,
    )
