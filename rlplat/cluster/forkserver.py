"""The warm interpreter: rlplat commands that start with torch, Ray, RLlib and Tune imported.

Importing those libraries costs every command 3-4 s here, more than the rest of a short run's
fixed cost. So the first command that imports them, once it has, starts a *fork server* for its
Python (:func:`directory`, beside the warm Rays): ``python -m rlplat.cluster.forkserver
<directory> <idle seconds>``, a process that imports the libraries once and then listens on a
Unix socket there. A later command hands it its arguments, working directory, environment,
process settings and standard streams; the server forks a child that runs the command, and the
command's own process waits for it, forwarding its signals (Ctrl-C, SIGTERM, Ctrl-Z) and ending
with its exit code. The child imports rlplat's own modules and the user's code from disk, as a
new process would; it is killed when the command's process dies, so ``kill -9`` ends the run as
it would without the server.

A command runs in the server only where importing for itself would give the same libraries the
same way: the same Python (the directory's key), the same environment less the shell's
bookkeeping (:data:`IGNORED`), and no package installed or removed since the server started (it
then exits, and the command starts a new one). Otherwise the command imports for itself, as it
did before. The server exits after ``RLPLAT_RAY_IDLE_S`` seconds without a command, as the warm
Ray does, or at ``rlplat ray stop``; ``RLPLAT_WARM_IMPORTS=0`` turns it off.
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlplat.cluster import warm
from rlplat.errors import UserError
from rlplat.util.atomic import write_atomic
from rlplat.util.process import (
    FIXED_HASH_SEED,
    exit_code_of,
    finish_exit,
    started_at,
    this_process,
    wait_or_kill,
)

SWITCH = "RLPLAT_WARM_IMPORTS"
SOCKET = "forkserver.sock"
RECORD = "forkserver.json"
LOG = "forkserver.log"
PROTOCOL = 4
MESSAGE_BYTES = 1 << 20
CREDENTIALS = struct.Struct("3i")  # SO_PEERCRED: pid, uid, gid
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
REPLY_S = 10.0
# The commands that import the heavy libraries; `rlplat runs` and `rlplat ray` do not.
COMMANDS = frozenset({"train", "plan", "eval", "export", "serve", "report", "dataset"})
# Variables of the shell's and pytest's bookkeeping, which no library reads when it loads.
IGNORED = frozenset({"_", "PWD", "OLDPWD", "SHLVL", "COLUMNS", "LINES", "PYTEST_CURRENT_TEST"})
# What rlplat's commands import from other packages that costs (``python -X importtime``): each
# loads what it needs below it. A missing optional package is skipped.
PRELOAD = (
    "torch",
    "ray",
    "ray.tune",
    "ray.rllib.core",
    "ray.rllib.algorithms.ppo",
    "ray.rllib.algorithms.dqn",
    "ray.rllib.algorithms.sac",
    "ray.rllib.algorithms.appo.torch.default_appo_torch_rl_module",
    "ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module",
    "gymnasium",
    "pettingzoo",
    "supersuit",
    "tensorboardX",
    "typer",
    "rich.console",
    "ruamel.yaml",
    "pydantic",
    "PIL.Image",
    "imageio.v3",
    "onnx",
    "scipy.stats",
    "matplotlib.figure",
    "matplotlib.backends.backend_agg",
)
STREAMS = (0, 1, 2)


def enabled() -> bool:
    """Whether commands use a warm interpreter: ``RLPLAT_WARM_IMPORTS`` is not 0 and the warm
    Ray's idle time is not 0 (a bad idle time is refused later, by the command itself)."""
    if os.environ.get(SWITCH, "").strip() == "0":
        return False
    try:
        return warm.enabled()
    except UserError:
        return False


def directory() -> Path:
    """The fork server of this Python (one for every working directory: its children change to
    their command's)."""
    key = hashlib.sha1(sys.prefix.encode()).hexdigest()[:12]
    return warm.base_directory() / f"python-{key}"


def comparable(environment: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in environment.items() if key not in IGNORED}


def _command_environment() -> dict[str, str]:
    """This command's environment as the command would run with it: with the fixed hash seed
    (``rlplat.cli.fix_hash_seed``) unless ``PYTHONHASHSEED`` is set."""
    return {"PYTHONHASHSEED": FIXED_HASH_SEED, **os.environ}


def _packages_stamp() -> list[float]:
    """When packages were last installed or removed: the site-packages directories' times."""
    paths = {sysconfig.get_paths()[name] for name in ("purelib", "platlib")}
    return [os.stat(path).st_mtime for path in sorted(paths) if os.path.isdir(path)]


# --- the command's side -------------------------------------------------------------------------


def run_command(argv: list[str], entry: str) -> int | None:
    """Run this command (``argv`` as ``sys.argv``) in the warm interpreter, where the child
    calls ``entry`` (``module:function``, with no arguments), and return its exit code; None
    where this process must run it itself (it then calls :func:`start_for_next_command`)."""
    global _wanted
    if len(argv) < 2 or argv[1] not in COMMANDS or not enabled() or not _usable_streams():
        return None
    try:
        where = directory()
    except UserError:  # the command itself says it, as its one-paragraph error
        return None
    environment = _command_environment()
    try:
        return _run_in_server(where, argv, entry, environment)
    except _Refused as refused:  # another environment (it imports for itself), or retired
        if refused.stale:
            _wanted = environment
    except OSError:  # none listens (yet), or it just stopped
        _wanted = environment
    return None


_wanted: dict[str, str] | None = None  # the environment of a warm interpreter to start


def start_for_next_command() -> None:
    """Start a warm interpreter for the next command where :func:`run_command` found none
    (with this command's environment as it began): called once the command has imported what
    it needs, since a server importing beside the command's own imports would slow both."""
    if _wanted is not None and enabled():
        try:
            start(directory(), _wanted)
        except UserError:
            return


def _usable_streams() -> bool:
    """Whether stdin, stdout and stderr are open (a closed one would be the socket's number)."""
    try:
        for fd in STREAMS:
            os.fstat(fd)
    except OSError:
        return False
    return True


@contextmanager
def _short(where: Path) -> Iterator[str]:
    """The socket's path through an open descriptor of its directory: a Unix socket's path may
    not be longer than 107 bytes, and ``where`` can be (a test's temporary directory)."""
    descriptor = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{descriptor}/{SOCKET}"
    finally:
        os.close(descriptor)


class _Refused(Exception):
    def __init__(self, reason: str, stale: bool):
        super().__init__(reason)
        self.stale = stale


def _peer_uid(connection: socket.socket) -> int:
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, CREDENTIALS.size)
    return CREDENTIALS.unpack(credentials)[1]


UNCATCHABLE = (signal.SIGKILL, signal.SIGSTOP)  # signal.signal() refuses these


def _run_in_server(where: Path, argv: list[str], entry: str, environment: dict[str, str]) -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as connection, _short(where) as path:
        connection.connect(path)
        if _peer_uid(connection) != os.getuid():  # the environment holds the user's secrets
            raise _Refused("the socket is another user's", stale=False)
        request = {
            "protocol": PROTOCOL,
            "argv": argv,
            "entry": entry,
            "cwd": os.getcwd(),
            "environment": environment,
            "path0": sys.path[0] if sys.path else "",
            # How Python ran the command (a script, or -m PACKAGE): the name its usage lines show.
            "main_package": getattr(sys.modules["__main__"], "__package__", None),
            "started": started_at() or time.time(),
            "process": _process_settings(),
        }
        connection.settimeout(REPLY_S)
        socket.send_fds(connection, [json.dumps(request).encode()], list(STREAMS))
        try:
            reply = json.loads(connection.recv(MESSAGE_BYTES) or b"{}")
        except TimeoutError:  # a child forked after this would see this end closed, and end
            raise _Refused("the warm interpreter did not answer", stale=False) from None
        if "pid" not in reply:
            raise _Refused(reply.get("refused", "no answer"), bool(reply.get("stale", True)))
        connection.settimeout(None)
        # The command runs from here on: nothing that follows may read as "no server" to the
        # caller, which would run the command a second time.
        try:
            with _forwarding_signals(reply["pid"]):
                answer = connection.recv(MESSAGE_BYTES)
        except OSError:
            answer = b""
    if not answer:  # the server and the command ended without a word (killed both)
        print("rlplat: the command's process ended without its exit code", file=sys.stderr)
        return 1
    outcome = json.loads(answer)
    if "signal" in outcome:  # end as the command did: by its signal
        number = outcome["signal"]
        if number == signal.SIGKILL:
            print(
                "rlplat: the command's process was killed (SIGKILL, as the kernel's "
                "out-of-memory killer ends a process); what it wrote stays in its run directory",
                file=sys.stderr,
            )
        if number not in UNCATCHABLE:
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    return int(outcome["exit"])


@contextmanager
def _forwarding_signals(pid: int) -> Iterator[None]:
    """While the command runs in ``pid``: the signals this process gets go to it, and Ctrl-Z
    stops both. Signals this process ignores are forwarded too: the child starts with this
    process's dispositions (:func:`_process_settings`), so it ignores or answers each one as
    the command would in its own process (whose training loop answers Ctrl-C even where it
    started ignored)."""

    def forward(number: int, _frame: Any) -> None:
        _send_signal(pid, number)

    def suspend(_number: int, _frame: Any) -> None:
        _send_signal(pid, signal.SIGSTOP)  # its own session: SIGTSTP would not stop it
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # stops here until SIGCONT (`fg`, `bg`)
        signal.signal(signal.SIGTSTP, suspend)
        _send_signal(pid, signal.SIGCONT)

    previous = {number: signal.signal(number, forward) for number in FORWARDED}
    if signal.getsignal(signal.SIGTSTP) is not signal.SIG_IGN:
        previous[signal.SIGTSTP] = signal.signal(signal.SIGTSTP, suspend)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _send_signal(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass


def start(where: Path, environment: dict[str, str]) -> None:
    """Start a fork server in ``where`` with ``environment`` unless one runs or is starting
    there, and unless the directory above it could be another user's."""
    if not _private(where.parent):
        return
    with warm.locked(where):
        if warm.live_record(where / RECORD) is not None:
            return
        with open(where / LOG, "ab") as log:
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rlplat.cluster.forkserver",
                    str(where),
                    str(warm.idle_seconds()),
                ],
                stdin=subprocess.DEVNULL,
                env=environment,  # its interpreter's hash seed is its children's
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C stops the command, not the server
                cwd=where,  # no module of the command's directory shadows a package
            )
        record = {"keeper": this_process(process.pid), "since": time.time()}
        write_atomic(where / RECORD, json.dumps(record))


def _private(base: Path) -> bool:
    """Whether ``base`` (created if missing) is this user's and only this user writes in it."""
    try:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = base.stat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


def stop(where: Path, timeout_s: float = 10.0) -> bool:
    """Stop the fork server in ``where`` (commands it runs go on); whether one ran."""
    with warm.locked(where):
        record = warm.live_record(where / RECORD)
        if record is None:
            return False
        _send_signal(record["keeper"]["pid"], signal.SIGTERM)
    wait_or_kill(record["keeper"], timeout_s)
    return True


def status(where: Path) -> dict[str, Any] | None:
    """The fork server's record in ``where``, where one runs and listens."""
    with warm.locked(where):
        record = warm.live_record(where / RECORD)
    return record if record is not None and (where / SOCKET).exists() else None


# --- the server's side --------------------------------------------------------------------------


@dataclass
class Command:
    """A command received by the server, to run in the forked child."""

    argv: list[str]
    entry: str
    cwd: str
    environment: dict[str, str]
    path0: str
    main_package: str | None  # __package__ of the command's __main__
    started: float
    process: dict[str, Any]  # the command process's own settings: _process_settings()
    streams: list[int]  # the command's stdin, stdout and stderr, received from it
    connection: socket.socket
    loaded: dict[str, str]  # the variables that packages set as the server imported them
    server_path0: str = ""  # sys.path[0] of the server

    def run(self) -> None:
        """Become the command's process, run it and exit (in the child, after the fork)."""
        os.setsid()  # out of the server's session: signals come from the command's process
        for target, fd in zip(STREAMS, self.streams, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdout.reconfigure(line_buffering=os.isatty(1))  # as Python sets it at its start
        os.chdir(self.cwd)
        _apply_process_settings(self.process)
        os.environ.clear()
        os.environ.update(self.environment)
        os.environ.update(self.loaded)
        sys.argv = list(self.argv)
        sys.modules["__main__"].__package__ = self.main_package
        if self.server_path0 in sys.path:  # the server's directory: the command's instead
            sys.path[sys.path.index(self.server_path0)] = self.path0
        if "numpy" in sys.modules:  # Python reseeds `random` in a forked child; numpy does not
            sys.modules["numpy"].random.seed()
        # rlplat's modules and the user's code come from disk, as in a new process.
        for name in [name for name in sys.modules if name.split(".")[0] in {"rlplat", "envs"}]:
            del sys.modules[name]
        watcher = _watch(self.connection)
        from rlplat.util import imports, process  # noqa: PLC0415 - fresh modules, not the server's

        process.mark_started(self.started)
        try:
            imports.import_object(self.entry)()
            code = 0
        except SystemExit as exc:
            code = exit_code_of(exc)
        except KeyboardInterrupt:
            code = 128 + signal.SIGINT
        except BaseException:  # noqa: BLE001 - printed as Python prints it, exit code 1
            sys.excepthook(*sys.exc_info())
            code = 1
        _end(code, self.connection, watcher)


def _process_settings() -> dict[str, Any]:
    """What a process inherits besides its environment and a command may have set for itself
    (``taskset``, ``nice``, ``umask``, the signals a shell's ``&`` or ``nohup`` ignores, a
    blocked signal): the child takes the command's, not the server's, which are those of
    whichever command started the server."""
    mask = os.umask(0o022)
    os.umask(mask)
    return {
        "umask": mask,
        "cpus": sorted(os.sched_getaffinity(0)),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "ignored": [int(n) for n in FORWARDED if signal.getsignal(n) is signal.SIG_IGN],
        "blocked": sorted(int(n) for n in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    }


def _apply_process_settings(settings: dict[str, Any]) -> None:
    for number in FORWARDED:  # as Python starts: Ctrl-C raises KeyboardInterrupt unless ignored
        default = signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL
        signal.signal(number, signal.SIG_IGN if number in settings["ignored"] else default)
    signal.pthread_sigmask(signal.SIG_SETMASK, settings["blocked"])
    os.umask(settings["umask"])
    try:
        os.sched_setaffinity(0, settings["cpus"])
    except OSError:
        pass  # CPUs the server may not use (its own cgroup): it keeps its own
    try:
        os.setpriority(os.PRIO_PROCESS, 0, settings["nice"])
    except OSError:
        pass  # a lower nice than the server's needs privileges: it keeps the server's


def _end(code: int, connection: socket.socket, watcher: int) -> None:
    """End this child as Python ends a process, less the teardown of every module
    (:func:`finish_exit`); then tell the command its exit code."""
    finish_exit()
    _send_signal(watcher, signal.SIGKILL)  # the command ends on the word below: not a death
    try:
        connection.send(json.dumps({"exit": code}).encode())
    except OSError:
        pass  # the command's process is gone
    os._exit(code)


def _watch(connection: socket.socket) -> int:
    """Fork a watcher that kills this child and what it started (its process group) as soon as
    the command's process is gone (``kill -9``), and ends quietly when this child ends; its
    process id. A process of its own, not a thread: it must act at once, whatever holds this
    one's GIL."""
    command = os.getpid()
    watcher = os.fork()
    if watcher != 0:
        return watcher
    try:
        try:
            watched = [connection, os.pidfd_open(command)]
        except OSError:  # no pidfd (an old kernel): the child's end is seen within a second
            watched = [connection]
        while os.getppid() == command:
            ready, _, _ = select.select(watched, [], [], 1.0)
            if connection in ready and len(ready) == 1:
                os.killpg(command, signal.SIGKILL)
            if ready:
                break
    finally:
        os._exit(0)


def serve(where: Path, idle_s: float) -> Command | None:
    """Import, listen and fork a child per command until idle for ``idle_s`` or SIGTERM.
    Returns in the server as it stops (None), and in each forked child (its command)."""
    environment = dict(os.environ)
    own_path0 = sys.path[0]  # before Ray puts its own directory in front of it
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - an optional package missing or broken
            _say(f"not preloaded: {name} ({type(exc).__name__}: {exc})")
    # The children share the imported modules' memory until they write to it: the collector
    # leaves these objects alone, else each child's first collections copy every page.
    gc.collect()
    gc.freeze()
    # Some packages set variables as they load (Ray, OpenCV, pygame): each child gets them too.
    loaded = {key: value for key, value in os.environ.items() if environment.get(key) != value}
    packages = _packages_stamp()
    path = where / SOCKET
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with _short(where) as short:
        listener.bind(short)
    os.chmod(path, 0o600)
    listener.listen(16)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    stopping: list[str] = []
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: stopping.append("SIGTERM (rlplat ray stop)"))
    children: dict[int, socket.socket] = {}
    last = time.monotonic()
    _say(f"listening at {path} (pid {os.getpid()}); stops after {idle_s:g} s idle")
    while not stopping:
        if children:
            timeout = None
        else:
            timeout = idle_s - (time.monotonic() - last)
            if timeout <= 0:
                stopping.append(f"{idle_s:g} s without a command")
                break
        ready, _, _ = select.select([listener, wake_read], [], [], timeout)
        if wake_read in ready:
            os.read(wake_read, 512)
        if _reap(children):
            last = time.monotonic()
        if listener not in ready or stopping:
            continue
        connection, _ = listener.accept()
        connection.settimeout(REPLY_S)  # a command that connects and sends nothing
        try:
            command = _receive(connection, comparable(environment), loaded, packages, stopping)
        except Exception as exc:  # noqa: BLE001 - the server stays up for the next command
            _say(f"refused a command: {type(exc).__name__}: {exc}")
            command = None
        if command is None:
            connection.close()
            continue
        connection.settimeout(None)
        # A signal between the fork and the child's own handlers would reach the server's.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        pid = os.fork()
        if pid == 0:
            listener.close()
            os.close(wake_read)
            os.close(wake_write)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the command's own: Command.run
            command.server_path0 = own_path0
            return command
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        for fd in command.streams:
            os.close(fd)
        children[pid] = connection
        _say(f"process {pid}: rlplat {' '.join(command.argv[1:])} (in {command.cwd})")
        try:
            connection.send(json.dumps({"pid": pid}).encode())
        except OSError:
            pass  # the command's process is gone: the child's watcher ends the child
    listener.close()
    path.unlink(missing_ok=True)
    _say(f"stopping: {stopping[0]}")
    for connection in children.values():
        connection.close()
    return None


def _receive(
    connection: socket.socket,
    environment: dict[str, str],
    loaded: dict[str, str],
    packages: list[float],
    stopping: list[str],
) -> Command | None:
    """The command sent on ``connection``, or None where it is refused (with the reason sent:
    another user, another environment, packages changed since the server imported them)."""
    uid = _peer_uid(connection)
    if uid != os.getuid():
        return None
    message, streams, _, _ = socket.recv_fds(connection, MESSAGE_BYTES, len(STREAMS))
    try:
        request = json.loads(message)
        refusal, stale = _refusal(request, environment, packages)
        if refusal is None and len(streams) != len(STREAMS):
            refusal = "the command's standard streams did not arrive"
        if refusal is None:
            return Command(
                request["argv"],
                request["entry"],
                request["cwd"],
                request["environment"],
                request["path0"],
                request["main_package"],
                float(request["started"]),
                dict(request["process"]),
                streams,
                connection,
                loaded,
            )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        refusal, stale = f"a request it cannot read ({type(exc).__name__})", False
    if stale:
        stopping.append(refusal)
    for fd in streams:
        os.close(fd)
    _say(f"refused a command: {refusal}")
    connection.send(json.dumps({"refused": refusal, "stale": stale}).encode())
    return None


def _refusal(
    request: dict[str, Any], environment: dict[str, str], packages: list[float]
) -> tuple[str | None, bool]:
    """Why the server must not run this command (or None), and whether it is stale: rlplat or
    the venv's packages changed since it imported them."""
    if request.get("protocol") != PROTOCOL or _packages_stamp() != packages:
        return "rlplat or its packages changed since the server started", True
    if request["process"]["nice"] < os.getpriority(os.PRIO_PROCESS, 0):
        return "the command runs at a higher priority (nice) than the server", False
    theirs = comparable(request["environment"])
    keys = {*theirs, *environment}
    differing = sorted(key for key in keys if theirs.get(key) != environment.get(key))
    if differing:  # the names only: the values may be secrets
        return f"the command's environment differs in {', '.join(differing[:8])}", False
    return None, False


def _reap(children: dict[int, socket.socket]) -> bool:
    """Send each ended child's exit code to its command; whether any ended."""
    ended = False
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        connection = children.pop(pid, None)
        if connection is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        outcome = {"exit": code} if code >= 0 else {"exit": 128 - code, "signal": -code}
        _say(f"process {pid}: exit code {outcome['exit']}")
        try:  # after the child's own word, where it ended by itself: this one goes unread
            connection.send(json.dumps(outcome).encode())
        except OSError:
            pass  # the command's process is gone
        connection.close()
        ended = True
    return ended


def _say(line: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} forkserver {os.getpid()}: {line}", flush=True)


if __name__ == "__main__":
    forked = serve(Path(sys.argv[1]), float(sys.argv[2]))
    if forked is not None:
        forked.run()
