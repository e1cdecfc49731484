"""Connecting to Ray: an embedded local instance by default, or an existing cluster."""

from __future__ import annotations

import logging
import os

from rlplat.errors import UserError

# Ray workers (and rlplat's own commands) run with this hash seed unless PYTHONHASHSEED is set:
# RLlib iterates sets of multi-agent ids, whose order otherwise changes with every process.
FIXED_HASH_SEED = "0"


def quiet_ray_logs(verbose: bool) -> None:
    """Keep Ray's and RLlib's log lines out of the terminal unless ``--verbose``."""
    level = logging.INFO if verbose else logging.ERROR
    for name in ("ray", "ray.rllib", "ray.tune", "ray.data"):
        logging.getLogger(name).setLevel(level)


def start_ray(address: str | None, verbose: bool = False) -> None:
    """``ray.init`` on the local machine (address None) or on a running cluster.

    Resources are never fixed here: a local instance takes what the machine has, a cluster what its
    nodes declare. ``RAY_ADDRESS`` is honoured as Ray does when no address is given.
    """
    import ray

    quiet_ray_logs(verbose)
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    kwargs = {
        "logging_level": logging.INFO if verbose else logging.ERROR,
        "log_to_driver": verbose,
        "runtime_env": {
            "env_vars": {"PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", FIXED_HASH_SEED)}
        },
    }
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:
            ray.init(include_dashboard=False, **kwargs)
    except ConnectionError as exc:
        raise UserError(
            f"cannot connect to the Ray cluster at {address!r}: {exc}. Start one with "
            "'ray start --head' (and RAY_AUTH_MODE=token if the cluster uses token auth), or drop "
            "--address to run on an embedded local Ray."
        ) from None


def check_trial_fits(algo_cls: type, config: object) -> None:
    """Refuse a trial whose resource demand exceeds what the whole cluster has.

    Tune would otherwise keep the trial PENDING forever. This compares totals only: a demand that
    fits the cluster's sum but no single placement can still wait (the ``plan`` command, issue 7,
    checks bundles against nodes).
    """
    import ray

    request = algo_cls.default_resource_request(config)
    demand = request.required_resources
    available = ray.cluster_resources()
    short = {
        name: (amount, available.get(name, 0.0))
        for name, amount in demand.items()
        if amount > available.get(name, 0.0) + 1e-9
    }
    if short:
        details = "; ".join(
            f"{name}: needs {need:g}, the cluster has {have:g}"
            for name, (need, have) in short.items()
        )
        raise UserError(
            f"the trial cannot start on this Ray cluster ({details}). It asks for the bundles "
            f"{request.bundles} (the algorithm's own, then one per env runner and learner): lower "
            "resources.env_runners.count (0 samples inside the algorithm's process) or its "
            "cpus/gpus/custom, or join a bigger cluster with --address."
        )
