"""The keeper of a warm local Ray (``rlplat.cluster.warm``): ``python -m rlplat.cluster.keeper
<directory> <idle seconds>``, started by the first command that needs a local Ray.

It starts Ray as an embedded ``ray.init`` would (this machine's resources, token
authentication), writes the address for commands to join, and shuts Ray down once no command
has held a lease for the idle time, or at SIGTERM (``rlplat ray stop``). Ray's processes die
with the keeper even when it is killed: Ray ties them to the process that started them.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from pathlib import Path

from rlplat.cluster.warm import HEAD, STARTING, live_leases, locked
from rlplat.util.atomic import write_atomic
from rlplat.util.process import this_process

POLL_S = 0.5


def say(line: str) -> None:
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S')} keeper {this_process()['pid']}: {line}", flush=True
    )


def keep(where: Path, idle_s: float) -> None:
    import ray  # noqa: PLC0415 - the keeper's start stays quick until Ray is wanted

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append("SIGTERM (rlplat ray stop)"))
    context = ray.init(
        address="local",
        include_dashboard=False,
        logging_level=logging.ERROR,
        log_to_driver=False,
    )
    head = {
        "address": context.address_info["gcs_address"],
        "keeper": this_process(),
        "since": time.time(),
        "idle_s": idle_s,
        "ray": ray.__version__,
        "python": sys.executable,
    }
    with locked(where):
        write_atomic(where / HEAD, json.dumps(head))
        (where / STARTING).unlink(missing_ok=True)
    say(f"Ray {ray.__version__} up at {head['address']}; stops after {idle_s:g} s idle")
    busy = time.monotonic()
    while True:
        with locked(where):
            if live_leases(where):
                busy = time.monotonic()
            elif time.monotonic() - busy >= idle_s:
                stopping.append(f"{idle_s:g} s without a command")
            if stopping:  # under the lock: no command joins what is about to stop
                (where / HEAD).unlink(missing_ok=True)
                break
        time.sleep(POLL_S)
    say(f"stopping Ray: {stopping[0]}")
    ray.shutdown()
    say("stopped")


if __name__ == "__main__":
    keep(Path(sys.argv[1]), float(sys.argv[2]))
