"""The searchers and schedulers a ``tune:`` section may name: one table.

The schema accepts exactly these names; ``rlplat.prepare.search`` builds Ray Tune's objects from
the same records (classes named as ``module:Class`` strings, imported only when a search runs).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Searcher:
    cls: str  # Tune's searcher, "module:Class"
    packages: tuple[str, ...] = ()  # optional packages it needs (pip install 'rlplat[tune]')
    seed_option: str | None = None  # its constructor's option that takes the experiment's seed


@dataclass(frozen=True)
class Scheduler:
    cls: str  # Tune's scheduler, "module:Class"
    packages: tuple[str, ...] = ()
    budgeted: bool = False  # needs max_t, the most time a trial may run
    population: bool = False  # evolves a population, mutating the search spaces (PBT family)


SEARCHERS: dict[str, Searcher] = {
    "random": Searcher("ray.tune.search:BasicVariantGenerator", (), "random_state"),
    "optuna": Searcher("ray.tune.search.optuna:OptunaSearch", ("optuna",), "seed"),
    "hyperopt": Searcher(
        "ray.tune.search.hyperopt:HyperOptSearch", ("hyperopt",), "random_state_seed"
    ),
    "bohb": Searcher("ray.tune.search.bohb:TuneBOHB", ("hpbandster", "ConfigSpace"), "seed"),
}
# The searchers that draw a conditional choice's branch first and then only that branch's
# spaces, in the order messages name them.
CONDITIONAL_SEARCHERS = ("random", "hyperopt", "optuna")

SCHEDULERS: dict[str, Scheduler] = {
    "fifo": Scheduler("ray.tune.schedulers:FIFOScheduler"),
    "asha": Scheduler("ray.tune.schedulers:ASHAScheduler", budgeted=True),
    "hyperband": Scheduler("rlplat.seams.tune:HyperBandScheduler", budgeted=True),
    "median": Scheduler("ray.tune.schedulers:MedianStoppingRule"),
    "pbt": Scheduler("ray.tune.schedulers:PopulationBasedTraining", population=True),
    "pb2": Scheduler("ray.tune.schedulers.pb2:PB2", ("GPy", "sklearn"), population=True),
}
BOHB_SCHEDULER = "rlplat.seams.tune:HyperBandForBOHB"  # searcher bohb's own hyperband
