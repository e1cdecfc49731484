"""Which process wrote a file, and whether it still runs: ``rlplat runs`` tells a running run
from one whose driver was killed."""

from __future__ import annotations

import atexit
import os
import platform
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, NoReturn


def _start_ticks(pid: int) -> int | None:
    """The process's start time since boot (Linux ``/proc``), which a reused PID does not share."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19])


# Ray workers (and rlplat's own commands) run with this hash seed unless PYTHONHASHSEED is set:
# RLlib iterates sets of multi-agent ids, whose order otherwise changes with every process.
FIXED_HASH_SEED = "0"

_started_elsewhere: float | None = None


def mark_started(at: float) -> None:
    """Count this command from ``at``: it started in another process (the warm interpreter's
    command process, :mod:`rlplat.cluster.forkserver`) and runs in this one."""
    global _started_elsewhere
    _started_elsewhere = at


def started_at() -> float | None:
    """This command's start in Unix seconds (Linux ``/proc``, 10 ms resolution); None elsewhere.
    ``os.execv`` keeps the process, so a restarted interpreter counts from the first start."""
    if _started_elsewhere is not None:
        return _started_elsewhere
    ticks = _start_ticks(os.getpid())
    if ticks is None:
        return None
    # Seconds since boot now, less the process's start since boot (/proc/stat's btime is whole
    # seconds, too coarse for this).
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - age


def this_process(pid: int | None = None) -> dict[str, Any]:
    """This process (or the process ``pid`` of this host): its PID, host and start time, to be
    checked later with ``still_running``."""
    pid = os.getpid() if pid is None else pid
    return {"pid": pid, "host": platform.node(), "start_ticks": _start_ticks(pid)}


def still_running(record: dict[str, Any]) -> bool | None:
    """Whether the process ``this_process`` described is alive; None when it ran on another host
    (this one cannot tell)."""
    if record.get("host") != platform.node():
        return None
    pid = record.get("pid")
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    if _is_zombie(pid):  # ended, not yet reaped by its parent (a command that started it)
        return False
    recorded = record.get("start_ticks")
    return recorded is None or _start_ticks(pid) == recorded


def _is_zombie(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state == "Z"


def wait_or_kill(record: dict[str, Any], timeout_s: float) -> None:
    """Wait up to ``timeout_s`` for the process ``this_process`` described (asked to stop) to
    end; kill it if it has not."""
    deadline = time.monotonic() + timeout_s
    while still_running(record) and time.monotonic() < deadline:
        time.sleep(0.05)
    if still_running(record):
        try:
            os.kill(record["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def exit_code_of(exc: SystemExit) -> int:
    """The exit code Python gives ``SystemExit`` (a message is printed, with code 1)."""
    if exc.code is None or isinstance(exc.code, int):
        return exc.code or 0
    print(exc.code, file=sys.stderr)
    return 1


def finish_exit() -> None:
    """What Python's exit does that a command needs: other threads' atexits and non-daemon
    threads joined, ``atexit`` functions run (Ray's disconnect among them), streams flushed.
    Left out: the teardown of every module, ~0.5-2 s once torch and Ray have loaded (a first
    ``rlplat train`` printed its last line 1.7 s before it ended), which does nothing a command
    needs."""
    threading._shutdown()  # what Python's own exit does first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def exit_without_teardown(code: int) -> NoReturn:
    """End this process as :func:`finish_exit` leaves it, with ``code``."""
    finish_exit()
    os._exit(code)
