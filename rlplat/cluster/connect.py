"""Connecting to Ray: an embedded local instance by default, or an existing cluster."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlplat.cluster import warm
from rlplat.errors import UserError
from rlplat.seams.ray_internals import actor_restarts, env_runner_actor_ids, reread_auth_mode
from rlplat.util.process import FIXED_HASH_SEED


def quiet_ray_logs(verbose: bool) -> None:
    """Keep Ray's and RLlib's log lines out of the terminal unless ``--verbose``."""
    # Ray loads on use: the CLI imports this module before it re-executes itself (fix_hash_seed).
    # Importing RLlib resets its logger's level: import it first.
    import ray.rllib  # noqa: F401, PLC0415

    level = logging.INFO if verbose else logging.ERROR
    for name in ("ray", "ray.rllib", "ray.tune", "ray.data"):
        logging.getLogger(name).setLevel(level)
    if not verbose:  # rlplat reports failed trials itself; Tune would print their tracebacks
        logging.getLogger("ray.tune").setLevel(logging.CRITICAL)


# Not handed to a warm Ray's workers: Ray's own settings, and the shell's bookkeeping.
NOT_FORWARDED = ("PWD", "OLDPWD", "SHLVL", "_")


def start_ray(
    address: str | None,
    verbose: bool = False,
    code: Sequence[Path] = (),
    *,
    keep_warm: bool = True,
) -> str | None:
    """``ray.init`` on the local machine (address None) or on a running cluster; a line for the
    user where the local Ray is a warm one (:mod:`rlplat.cluster.warm`).

    Resources are never fixed here: a local instance takes what the machine has, a cluster what its
    nodes declare. ``RAY_ADDRESS`` is honoured as Ray does when no address is given. ``code``:
    the user's packages (or module files) that every worker imports, shipped with the job.
    ``keep_warm``: a local Ray is the warm one (started by a keeper if none runs) unless
    ``RLPLAT_RAY_IDLE_S=0``; False: a Ray of this process's own, shut down with it.
    """
    import ray  # noqa: PLC0415 - loads on use, as in quiet_ray_logs

    quiet_ray_logs(verbose)
    if ray.is_initialized():
        return None
    address = cluster_address(address)
    hash_seed = os.environ.get("PYTHONHASHSEED", FIXED_HASH_SEED)
    kwargs = {
        "logging_level": logging.INFO if verbose else logging.ERROR,
        "log_to_driver": verbose,
        "runtime_env": {
            "env_vars": {"PYTHONHASHSEED": hash_seed},
            **({"py_modules": [str(path) for path in code]} if code else {}),
        },
    }
    note = None
    if address is None and keep_warm and warm.enabled():
        address, note = _warm_address()
        if address is not None:
            # The warm Ray's workers were started by another command: give them this one's
            # environment, as an embedded Ray's workers inherit it.
            kwargs["runtime_env"]["env_vars"] = {
                **_forwarded_environment(),
                **{"PYTHONHASHSEED": hash_seed},
            }
    try:
        if address and note is not None:
            _answers(address)  # ray.init would retry a gone Ray's address for minutes
        if address:
            ray.init(address=address, **kwargs)
        else:  # "local": a new instance, even where `ray start` left one to find
            ray.init(address="local", include_dashboard=False, **kwargs)
    except ConnectionError as exc:
        if note is not None:  # the warm local Ray's keeper runs, its Ray does not answer
            raise UserError(
                f"the warm local Ray at {address!r} does not answer ({exc}). Stop it with "
                "'rlplat ray stop --force' (the next command starts a new one), or run with "
                "RLPLAT_RAY_IDLE_S=0 for a Ray of the command's own."
            ) from None
        raise UserError(
            f"cannot connect to the Ray cluster at {address!r}: {exc}. Start one with "
            "'ray start --head' (and RAY_AUTH_MODE=token if the cluster uses token auth), or drop "
            "--address to run on an embedded local Ray."
        ) from None
    quiet_ray_logs(verbose)  # ray.init sets up Ray's loggers again
    return note


WARM_CONNECT_S = 3.0


def _answers(address: str) -> None:
    """Raise ConnectionError unless something listens at the warm Ray's ``host:port`` (its GCS):
    a record whose Ray was killed while its keeper lives names a closed port."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=WARM_CONNECT_S):
            pass
    except (OSError, ValueError) as exc:
        raise ConnectionError(f"nothing listens there: {exc}") from None


def _warm_address() -> tuple[str | None, str]:
    """The warm local Ray's address and the line that says what it is; no address (and why)
    where its keeper could not start Ray."""
    lease = warm.take_lease()
    try:
        found = warm.address()
    except RuntimeError as exc:
        warm.release_lease()
        return None, f"Ray: {exc}; this command starts a Ray of its own."
    _token_auth_settings()
    lease.watch_keeper()
    idle = warm.describe_idle(warm.idle_seconds())
    if lease.started_keeper:
        return found, (
            f"Ray: started a local Ray that later commands join (it stops after {idle} without "
            "one; rlplat ray stop stops it now)."
        )
    return found, f"Ray: joined the warm local Ray (it stops after {idle} idle; rlplat ray stop)."


def _token_auth_settings() -> None:
    """Make this process join with the warm Ray's token (``RAY_AUTH_MODE`` as its keeper had it).

    Ray reads ``RAY_AUTH_MODE`` once, when it loads, and turns token auth on by itself only for a
    ``ray.init()`` without an address: where Ray was loaded before the lease set the variable (a
    notebook that imported Ray first), its cached settings are read again.
    """
    reread_auth_mode(os.environ.get(warm.AUTH_VARIABLE, "token").lower() == "token")


def _forwarded_environment() -> dict[str, str]:
    return {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("RAY_") and key not in NOT_FORWARDED
    }


def stop_ray() -> None:
    """Disconnect from Ray: a Ray this process started shuts down, a warm one stays up for the
    next command."""
    import ray  # noqa: PLC0415 - loads on use, as in quiet_ray_logs

    ray.shutdown()
    warm.release_lease()


def cluster_address(address: str | None) -> str | None:
    """The cluster a command joins: ``--address``, else ``RAY_ADDRESS`` as Ray reads it; None
    where neither names one."""
    return address or os.environ.get("RAY_ADDRESS") or None


def embedded(address: str | None) -> bool:
    """Whether a command given ``address`` runs on its own local Ray, which it starts and shuts
    down: no cluster named (:func:`cluster_address`), and no Ray started in this process."""
    import ray  # noqa: PLC0415 - loads on use, as in quiet_ray_logs

    return cluster_address(address) is None and not ray.is_initialized()


def env_runner_restarts(env_runner_group: Any) -> int:
    """How many times Ray restarted the processes of this group's remote env runners.

    RLlib counts a restart only when a call to the runner failed first; a runner killed between
    two sampling rounds comes back before the next call and RLlib never sees it. Ray's actor
    table (read from the GCS: no dashboard needed) has every restart. Falls back to RLlib's
    count if the table cannot be read.
    """
    try:
        ids = env_runner_actor_ids(env_runner_group)
        return sum(actor_restarts(actor_id) for actor_id in ids)
    except Exception:  # noqa: BLE001 - private APIs: RLlib's own count then
        return int(env_runner_group.num_remote_worker_restarts())
