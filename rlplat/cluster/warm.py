"""A local Ray kept warm between rlplat commands.

Starting Ray costs a command 2.5 s on an idle machine and 8-14 s on a loaded core; joining a
running one costs 0.05 s and leaving it 0.3 s. So the first command that needs a local Ray starts
a *keeper* (``rlplat.cluster.keeper``), a small process of its own that starts Ray and holds it,
and every command, the first included, joins that Ray. The keeper stops Ray and exits once no
command has used it for ``RLPLAT_RAY_IDLE_S`` seconds (default 600), or at ``rlplat ray stop``.

One warm Ray serves one Python environment (its workers run that interpreter) in one working
directory (its workers start there, as an embedded Ray's would), so each such pair has a
directory of its own under ``RLPLAT_RAY_DIR`` (default ``/tmp/rlplat-ray-<uid>``):

- ``head.json``: the running Ray's address and the keeper's process, written by the keeper once
  Ray is up;
- ``starting.json``: the keeper a command started, until it writes ``head.json``;
- ``leases/``: one file per command using it (process id and start time; a dead process's lease
  does not count), which the keeper reads to know whether it is idle;
- ``keeper.log``: the keeper's output;
- ``lock``: held while any of these is read and changed, so that commands started together start
  one keeper and no command joins a Ray that its keeper is stopping.

``RLPLAT_RAY_IDLE_S=0`` turns it off: each command then starts and stops a Ray of its own.
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlplat.errors import UserError
from rlplat.util.atomic import read_json, write_atomic
from rlplat.util.process import still_running, this_process, wait_or_kill

IDLE_VARIABLE = "RLPLAT_RAY_IDLE_S"
AUTH_VARIABLE = "RAY_AUTH_MODE"
DIRECTORY_VARIABLE = "RLPLAT_RAY_DIR"
DEFAULT_IDLE_S = 600.0
START_TIMEOUT_S = 120.0
HEAD = "head.json"
STARTING = "starting.json"
LEASES = "leases"
LOG = "keeper.log"


def idle_seconds() -> float:
    """How long a warm Ray waits for the next command (``RLPLAT_RAY_IDLE_S``); 0: no warm Ray."""
    text = os.environ.get(IDLE_VARIABLE)
    if text is None or not text.strip():
        return DEFAULT_IDLE_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise UserError(
            f"{IDLE_VARIABLE}={text!r}: give the seconds a warm local Ray waits for the next "
            "command, a finite number >= 0 (0: each command starts and stops its own Ray)."
        )
    return value


def enabled() -> bool:
    return idle_seconds() > 0


def base_directory() -> Path:
    """Where warm Rays keep their records (``RLPLAT_RAY_DIR``); refused unless it is a directory
    this user can write, or one that can be made."""
    given = os.environ.get(DIRECTORY_VARIABLE)
    base = Path(given or f"/tmp/rlplat-ray-{os.getuid()}")
    problem = None
    if base.exists() and not base.is_dir():
        problem = "is not a directory"
    elif base.is_dir() and not os.access(base, os.W_OK | os.X_OK):
        problem = "is a directory this user cannot write"
    elif not base.exists() and not os.access(_existing_parent(base), os.W_OK | os.X_OK):
        problem = "does not exist and cannot be made"
    if problem is not None:
        source = f"{DIRECTORY_VARIABLE}={given}" if given else f"the default {base}"
        raise UserError(
            f"{source}: where rlplat keeps its warm local Ray's records {problem}. Give "
            f"{DIRECTORY_VARIABLE} a directory you can write (it is made if missing), or "
            f"{IDLE_VARIABLE}=0 for a Ray of the command's own."
        )
    return base


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def directory(cwd: Path | None = None) -> Path:
    """The warm Ray of this Python in ``cwd`` (default: the working directory)."""
    where = str((cwd or Path.cwd()).resolve())
    key = hashlib.sha1(f"{sys.prefix}\0{where}".encode()).hexdigest()[:12]
    return base_directory() / key


def describe_idle(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 and seconds % 60 == 0 else f"{seconds:g} s"


@contextmanager
def locked(where: Path) -> Iterator[None]:
    where.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(where / "lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def live_record(path: Path) -> dict[str, Any] | None:
    """The record at ``path`` if its keeper process still runs; a stale one is removed."""
    record = read_json(path)
    if record is None:
        return None
    if still_running(record.get("keeper", {})):
        return record
    path.unlink(missing_ok=True)
    return None


def live_leases(where: Path) -> list[dict[str, Any]]:
    """The commands using the warm Ray now; leases of processes that ended are removed."""
    leases = []
    for path in sorted((where / LEASES).glob("*.json")):
        record = read_json(path)
        if record is not None and still_running(record):
            leases.append(record)
        else:
            path.unlink(missing_ok=True)
    return leases


@dataclass
class Lease:
    """This process's use of a warm Ray: taken before the keeper could find it idle, given back
    when the process disconnects or ends."""

    where: Path
    started_keeper: bool

    @property
    def path(self) -> Path:
        return self.where / LEASES / f"{os.getpid()}.json"

    def release(self) -> None:
        if self.watcher is not None and self.watcher.poll() is None:
            self.watcher.kill()
        self.path.unlink(missing_ok=True)

    def __post_init__(self) -> None:
        self.watcher: subprocess.Popen | None = None

    def watch_keeper(self) -> None:
        """While this process holds the lease: if the keeper ends (killed, or ``rlplat ray
        stop``), say what became of this command. Ray ends with its keeper and takes this
        process down at once, without a word and too soon for a thread of its own to speak, so
        a small process of its own (sharing stderr) waits on both and speaks if the keeper
        goes first."""
        record = read_json(self.where / HEAD)
        keeper = record.get("keeper") if record else None
        if not keeper or self.watcher is not None:
            return
        self.watcher = subprocess.Popen(
            [sys.executable, "-S", "-c", KEEPER_WATCHER, str(keeper["pid"]), str(os.getpid()),
             keeper_gone(keeper["pid"])],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        )  # fmt: skip


# The watcher: wakes when the keeper or the command ends (pidfds), speaks only for the keeper.
KEEPER_WATCHER = """\
import os, select, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the command's to answer
try:
    keeper, command = (os.pidfd_open(int(pid)) for pid in sys.argv[1:3])
except (OSError, AttributeError):
    sys.exit()
if keeper in select.select([keeper, command], [], [])[0]:
    sys.stderr.write(sys.argv[3] + "\\n")
"""


def keeper_gone(pid: int) -> str:
    return (
        f"error: the warm local Ray's keeper (process {pid}) has ended, and Ray with it, so "
        "this command cannot go on (a keeper ends when killed, or at rlplat ray stop). A run it "
        "was training keeps its checkpoints: rlplat runs lists it, and rlplat train --resume "
        "<run dir> continues it on a new Ray."
    )


_lease: Lease | None = None


def take_lease() -> Lease:
    """Make sure a warm Ray exists or is starting for this Python and directory, and hold it
    for this process; returns at once (the keeper starts Ray in the background, so a command can
    import RLlib meanwhile). :func:`address` waits for it."""
    global _lease
    if _lease is not None and _lease.path.is_file():
        return _lease
    os.environ.setdefault(AUTH_VARIABLE, "token")  # read by Ray when it loads: set it first
    where = directory()
    with locked(where):
        started = False
        if live_record(where / HEAD) is None and live_record(where / STARTING) is None:
            _start_keeper(where)
            started = True
        (where / LEASES).mkdir(exist_ok=True)
        write_atomic(where / LEASES / f"{os.getpid()}.json", json.dumps(this_process()))
    _lease = Lease(where, started)
    atexit.register(_lease.release)
    return _lease


def release_lease() -> None:
    """This process no longer uses the warm Ray (it stays up for the next command)."""
    global _lease
    if _lease is not None:
        _lease.release()
        _lease = None


def _start_keeper(where: Path) -> None:
    environment = {**os.environ, AUTH_VARIABLE: os.environ.get(AUTH_VARIABLE, "token")}
    with open(where / LOG, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "rlplat.cluster.keeper", str(where), str(idle_seconds())],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a terminal's Ctrl-C stops the command, not the warm Ray
            env=environment,
        )
    record = {"keeper": this_process(process.pid), "since": time.time()}
    write_atomic(where / STARTING, json.dumps(record))


def address(timeout_s: float = START_TIMEOUT_S) -> str:
    """The warm Ray's address, once its keeper has Ray up (this process holds a lease)."""
    lease = _lease or take_lease()
    deadline = time.monotonic() + timeout_s
    while True:
        with locked(lease.where):
            head = live_record(lease.where / HEAD)
            starting = live_record(lease.where / STARTING) if head is None else None
        if head is not None:
            return head["address"]
        if starting is None or time.monotonic() > deadline:
            raise RuntimeError(_keeper_failure(lease.where))
        time.sleep(0.05)


def _keeper_failure(where: Path) -> str:
    try:
        tail = (where / LOG).read_text(errors="replace").strip().splitlines()[-15:]
    except OSError:
        tail = []
    return "the warm local Ray did not start: " + ("\n".join(tail) or "its keeper said nothing")


def status() -> dict[str, Any] | None:
    """The warm Ray of this Python and directory: its record and the commands using it; None
    when none runs."""
    where = directory()
    with locked(where):
        head = live_record(where / HEAD)
        if head is None:
            return None
        return {**head, "directory": str(where), "leases": live_leases(where)}


def stop(force: bool = False, timeout_s: float = 30.0) -> str | None:
    """Stop the warm Ray of this Python and directory (its keeper shuts Ray down); its address
    (or "its start" where it was starting), or None when none ran. Refused while commands use
    it, unless ``force``."""
    where = directory()
    with locked(where):
        record = live_record(where / HEAD) or live_record(where / STARTING)
        if record is None:
            return None
        users = [lease for lease in live_leases(where) if lease["pid"] != os.getpid()]
        if users and not force:
            pids = ", ".join(str(lease["pid"]) for lease in users)
            raise UserError(
                f"the warm local Ray is in use by {len(users)} running command(s) (process "
                f"{pids}): stopping it would end their runs. Let them finish (it then stops by "
                f"itself after {describe_idle(idle_seconds())} idle), or give --force."
            )
        os.kill(record["keeper"]["pid"], signal.SIGTERM)
    wait_or_kill(record["keeper"], timeout_s)
    return record.get("address", "its start")
