"""Connecting to Ray: an embedded local instance by default, or an existing cluster."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlplat.errors import UserError

# Ray workers (and rlplat's own commands) run with this hash seed unless PYTHONHASHSEED is set:
# RLlib iterates sets of multi-agent ids, whose order otherwise changes with every process.
FIXED_HASH_SEED = "0"


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


def start_ray(address: str | None, verbose: bool = False, code: Sequence[Path] = ()) -> None:
    """``ray.init`` on the local machine (address None) or on a running cluster.

    Resources are never fixed here: a local instance takes what the machine has, a cluster what its
    nodes declare. ``RAY_ADDRESS`` is honoured as Ray does when no address is given. ``code``:
    the user's packages (or module files) that every worker imports, shipped with the job.
    """
    import ray  # noqa: PLC0415 - loads on use, as in quiet_ray_logs

    quiet_ray_logs(verbose)
    if ray.is_initialized():
        return
    _init(address or os.environ.get("RAY_ADDRESS"), verbose, code)
    quiet_ray_logs(verbose)  # ray.init sets up Ray's loggers again


def _init(address: str | None, verbose: bool, code: Sequence[Path]) -> None:
    import ray  # noqa: PLC0415 - loads on use, as in quiet_ray_logs

    runtime_env: dict[str, Any] = {}
    # The workers of an embedded Ray inherit this process's environment, a cluster's do not. No
    # runtime_env at all lets Ray hand a trial a worker it started with itself; with one, Ray
    # starts a new worker for it.
    if address or "PYTHONHASHSEED" not in os.environ:
        hash_seed = os.environ.get("PYTHONHASHSEED", FIXED_HASH_SEED)
        runtime_env["env_vars"] = {"PYTHONHASHSEED": hash_seed}
    if code:
        runtime_env["py_modules"] = [str(path) for path in code]
    kwargs = {
        "logging_level": logging.INFO if verbose else logging.ERROR,
        "log_to_driver": verbose,
        "runtime_env": runtime_env or None,
    }
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:  # "local": a new instance, even where `ray start` left one to find
            ray.init(address="local", include_dashboard=False, **kwargs)
    except ConnectionError as exc:
        raise UserError(
            f"cannot connect to the Ray cluster at {address!r}: {exc}. Start one with "
            "'ray start --head' (and RAY_AUTH_MODE=token if the cluster uses token auth), or drop "
            "--address to run on an embedded local Ray."
        ) from None


def embedded(address: str | None) -> bool:
    """Whether a command given ``address`` starts its own local Ray (no cluster named, none
    started in this process)."""
    import ray  # noqa: PLC0415 - loads on use, as in quiet_ray_logs

    return address is None and "RAY_ADDRESS" not in os.environ and not ray.is_initialized()


class RayStarting:
    """An embedded Ray starting on a thread while the command imports RLlib and validates the
    experiment: ``ray.init`` mostly waits for Ray's processes to come up, and the command's own
    work takes that time instead. ``wait()`` returns once Ray runs (or raises why it could not).

    The thread stays alive (asleep) until the process ends: Ray binds its head processes'
    lifetime to their parent with Linux's parent-death signal, which fires when the *thread*
    that started them exits.
    """

    def __init__(self, verbose: bool = False, code: Sequence[Path] = ()) -> None:
        self._verbose = verbose
        self._error: BaseException | None = None
        self._ready = threading.Event()
        self.seconds = 0.0  # how long ray.init took
        # Until quiet_ray_logs can run (it imports RLlib), keep Ray's start quiet directly.
        logging.getLogger("ray").setLevel(logging.INFO if verbose else logging.ERROR)
        thread = threading.Thread(
            target=self._start, args=(code,), name="rlplat-ray-start", daemon=True
        )
        thread.start()

    def _start(self, code: Sequence[Path]) -> None:
        started = time.monotonic()
        try:
            _init(None, self._verbose, code)
        except BaseException as exc:  # noqa: BLE001 - re-raised by wait() on the main thread
            self._error = exc
        self.seconds = time.monotonic() - started
        self._ready.set()
        if self._error is None:
            threading.Event().wait()  # keep Ray's head processes alive with this thread

    def wait(self) -> None:
        self._ready.wait()
        if self._error is not None:
            raise self._error
        quiet_ray_logs(self._verbose)
        # ray.init sets this handler only when called on the main thread: a SIGTERM outside
        # Tune's loop exits through Python, so Ray's own shutdown runs.
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))

    def cancel(self) -> None:
        """Stop the Ray that was starting (the command failed before it used it)."""
        import ray  # noqa: PLC0415 - loads on use, as in quiet_ray_logs

        self._ready.wait()
        ray.shutdown()


def env_runner_restarts(env_runner_group: Any) -> int:
    """How many times Ray restarted the processes of this group's remote env runners.

    RLlib counts a restart only when a call to the runner failed first; a runner killed between
    two sampling rounds comes back before the next call and RLlib never sees it. Ray's actor
    table (read from the GCS: no dashboard needed) has every restart. Falls back to RLlib's
    count if the table cannot be read.
    """
    from ray._private.state import actors  # noqa: PLC0415 - loads on use, as above

    try:
        ids = env_runner_actor_ids(env_runner_group)
        return sum(int(actors(actor_id)["NumRestarts"]) for actor_id in ids)
    except Exception:  # noqa: BLE001 - private APIs: RLlib's own count then
        return int(env_runner_group.num_remote_worker_restarts())


def env_runner_actor_ids(env_runner_group: Any) -> list[str]:
    """The Ray actor ids of the group's remote env runners (an actor keeps its id across
    restarts). RLlib keeps the handles in a private manager."""
    handles = env_runner_group._worker_manager.actors().values()
    return [handle._actor_id.hex() for handle in handles]
