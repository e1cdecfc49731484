"""Connecting to Ray: an embedded local instance by default, or an existing cluster."""

from __future__ import annotations

import logging
import os

from rlplat.errors import UserError


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
