"""What every benchmark here shares: running rlplat, reading what its runs wrote, timing whole
processes, taking turns with a peer (Stable-Baselines3, EPyMARL) and writing benchmarks/results/.

Benchmarks are scripts, run from anywhere as ``python benchmarks/<name>.py``; each imports this
module (found beside it) and none imports another benchmark.

rlplat runs as ``<this interpreter> -m rlplat.cli`` with the repository root as its working
directory: the Python the benchmark runs under and the rlplat of this checkout, whether or not a
``rlplat`` script was installed beside the interpreter.

Only the standard library is imported here at module level: ``peers.py --sb3`` imports this
module in the Stable-Baselines3 process whose whole-command seconds are measured, so importing
rlplat (for its result reader) waits until a result is read.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks/results"
RLPLAT = (sys.executable, "-m", "rlplat.cli")
TAIL = 3000  # characters of a failed process's output kept in messages and result files


# --- whole processes, timed ---------------------------------------------------------------------


@dataclass(frozen=True)
class Process:
    """A finished process: its exit status, its captured output and its wall seconds."""

    command: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float  # launch to exit, interpreter start-up included, to 0.01 s

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self) -> str:
        """The end of its output (stdout, then stderr): where a failure says why."""
        return (self.stdout + self.stderr)[-TAIL:]


def shown(command: Sequence[str]) -> str:
    """``command`` as a user would type it: rlplat's as ``rlplat ...``."""
    words = list(command)
    if tuple(words[: len(RLPLAT)]) == RLPLAT:
        words = ["rlplat", *words[len(RLPLAT) :]]
    return " ".join(words)


def run(
    command: Sequence[str], *, cwd: Path = REPO, check: bool = False, capture: bool = True
) -> Process:
    """Run ``command`` to its end and time it as a user waits for it (launch to exit).

    ``check``: a failure ends the benchmark, with the tail of the output. ``capture=False`` lets
    the output through to the terminal (then ``stdout``/``stderr`` are empty).
    """
    started = time.monotonic()
    done = subprocess.run(list(command), cwd=cwd, capture_output=capture, text=True)
    wall_s = round(time.monotonic() - started, 2)
    process = Process(tuple(command), done.returncode, done.stdout or "", done.stderr or "", wall_s)
    if check and not process.ok:
        raise SystemExit(f"{shown(command)} failed (exit {process.returncode}):\n{process.tail()}")
    return process


def rlplat(*args: str, check: bool = True, capture: bool = True) -> Process:
    """``rlplat <args>`` as a whole process from the repository root (see the module's note)."""
    return run([*RLPLAT, *args], check=check, capture=capture)


def sb3_greedy_return(model: Any, env: Any, seed: int) -> float:
    """One episode of an SB3 model's greedy actions (``predict(deterministic=True)``) on
    ``env`` reset with ``seed``: its return."""
    observation, _ = env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        action, _ = model.predict(observation, deterministic=True)
        observation, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        done = terminated or truncated
    return total


# --- what a run wrote ---------------------------------------------------------------------------


def read_json(path: Path) -> Any:
    """A JSON file rlplat or a benchmark wrote (a missing or broken one is an error here)."""
    return json.loads(path.read_text())


def trial_results(trial_dir: Path) -> list[dict[str, Any]]:
    """Each iteration's result from a trial's result.json, oldest first. rlplat's own reader:
    a last line cut off by a killed or still-running trial is skipped, not an error."""
    from rlplat.report.runs import read_results

    return read_results(trial_dir)


@dataclass(frozen=True)
class Training:
    """One ``rlplat train ... output_dir=<out>`` and the one run it wrote under ``out``."""

    out: Path
    wall_s: float | None  # None when the run was already there (reused, not trained)
    error: str | None = None  # the output's tail when it failed (``train(check=False)``)

    @property
    def run_dir(self) -> Path:
        """``<out>/<name>/<timestamp>``: the run directory (the one run, or the last stage's
        where the experiment has a first stage: ``init.experiment``)."""
        [run_dir] = [run for run in self._runs() if not (run / "next_stage.yaml").exists()]
        return run_dir

    @property
    def first_stage(self) -> Path | None:
        """The first stage's run directory (``init.experiment``), None without one."""
        first = [run for run in self._runs() if (run / "next_stage.yaml").exists()]
        return first[0] if first else None

    def _runs(self) -> list[Path]:
        return [run_info.parent for run_info in self.out.glob("*/*/run.json")]

    def summary(self) -> dict[str, Any]:
        """The run's summary.json (trials, best checkpoints, the search table)."""
        return read_json(self.run_dir / "summary.json")

    def driver(self) -> dict[str, Any]:
        """The newest driver's entry in run.json: this ``rlplat train``'s stage timings."""
        return read_json(self.run_dir / "run.json")["drivers"][-1]

    def results(self) -> list[dict[str, Any]]:
        """What the run's first trial (a single-trial run's only one) reported each iteration."""
        return trial_results(min(self.run_dir.glob("trial_*/result.json")).parent)


def train(
    experiment: str | Path,
    *overrides: str,
    out: Path,
    check: bool = True,
    reuse: bool = False,
) -> Training:
    """``rlplat train <experiment> <overrides> output_dir=<out>``.

    ``check=False``: a failure is returned (``Training.error``) rather than ending the benchmark,
    for benchmarks that record it. ``reuse``: when ``out`` exists (an interrupted benchmark going
    on), its run is read and nothing is trained.
    """
    if reuse and out.exists():
        return Training(out, None)
    process = rlplat("train", str(experiment), *overrides, f"output_dir={out}", check=check)
    return Training(out, process.wall_s, None if process.ok else process.tail())


def train_row(experiment: str, overrides: Sequence[str], out: Path) -> dict[str, Any]:
    """``rlplat train experiments/<experiment> <overrides>`` into ``out`` (reused when there),
    and what its one trial reached at its last iteration, as a row of a results file."""
    training = train(f"experiments/{experiment}", *overrides, out=out, reuse=True)
    last = training.results()[-1]
    return {
        "command": f"rlplat train experiments/{experiment} {' '.join(overrides)}".strip(),
        "run_dir": str(training.run_dir),
        "iterations": last["training_iteration"],
        "env_steps": int(last["num_env_steps_sampled_lifetime"]),
        "training_s": round(last["time_total_s"], 1),
        "final_window_return": (last.get("window") or {}).get("episode_return_mean"),
        "command_wall_s": training.wall_s,
    }


def same_budget(trained: int, budget: int, where: Path) -> None:
    """A reused run must be of this budget: another ``--budget`` needs another ``--out``."""
    if trained != budget:
        raise SystemExit(f"{where} was trained for {trained} env steps, not {budget}: use "
                         "another --out for another --budget.")


def finished(run_dir: Path) -> bool:
    """Whether every trial of the run finished (an interrupted one is continued by --resume)."""
    summary = run_dir / "summary.json"
    return summary.exists() and all(
        trial["status"] == "finished" for trial in read_json(summary)["trials"]
    )


def train_seeds(
    experiment: str, seeds: int, budget: int, out: Path, *overrides: str
) -> tuple[Path, list[dict[str, Any]]]:
    """``rlplat train <experiment> --seeds N tune.max_concurrent=1 stop.env_steps=<budget>`` into
    ``out``, one trial at a time; a run found there unfinished (an earlier session ended) is
    continued with ``rlplat train --resume``. The run directory, and each seed's row: its env
    steps, training seconds (the trial's ``time_total_s``) and env steps per second."""
    common = ("--seeds", str(seeds), "tune.max_concurrent=1", f"stop.env_steps={budget}")
    training = train(experiment, *common, *overrides, out=out, reuse=True)
    run_dir = training.run_dir
    resolved = read_yaml(run_dir / "experiment.yaml")
    same_budget(resolved["stop"]["env_steps"], budget, run_dir)
    if training.wall_s is None and not finished(run_dir):
        rlplat("train", "--resume", str(run_dir))
    rows = []
    for trial in sorted(run_dir.glob("trial_*/result.json")):
        last = trial_results(trial.parent)[-1]
        steps, seconds = int(last["num_env_steps_sampled_lifetime"]), float(last["time_total_s"])
        rows.append({
            "trial": trial.parent.name,
            "seed": read_json(trial.parent / "params.json").get("seed"),
            "env_steps": steps,
            "train_s": round(seconds, 1),
            "env_steps_per_s": round(steps / seconds, 1),
        })
    return run_dir, rows


def scored_seeds(
    experiment: str,
    seeds: int,
    budget: int,
    out: Path,
    episodes: int,
    *overrides: str,
    report_options: Sequence[str] = (),
) -> tuple[Path, dict[str, Any]]:
    """``train_seeds`` into ``out/train``, then ``report_row`` of the run into ``out/report``
    (``report_options`` such as ``--metric success_rate``): the run directory, and the cell a
    results file keeps (the report's row, the training command, each seed's row)."""
    run_dir, seed_rows = train_seeds(experiment, seeds, budget, out / "train", *overrides)
    row = report_row([str(run_dir)], out / "report", episodes, *report_options)
    return run_dir, {
        **row,
        "train_command": train_command(experiment, seeds, budget, *overrides),
        "seeds": seed_rows,
    }


def train_command(experiment: str, seeds: int, budget: int, *overrides: str) -> str:
    """The ``rlplat train`` command ``train_seeds`` runs, as a benchmark's results record it."""
    return f"rlplat train {experiment} --seeds {seeds} tune.max_concurrent=1 " + " ".join(
        [f"stop.env_steps={budget}", *(f"'{o}'" for o in overrides)]
    )


def provenance() -> dict[str, str]:
    """Where a result was made: the commit, the machine and the benchmark's command line."""
    return {"commit": commit(), "machine": machine(), "invocation": invocation()}


def read_yaml(path: Path) -> Any:
    import yaml

    return yaml.safe_load(path.read_text())


def report_row(
    run_dirs: Sequence[str], out: Path, episodes: int, *options: str
) -> dict[str, Any]:
    """``rlplat report`` of runs of one experiment: its IQM and mean over seeds, each seed's
    score (its last checkpoint's greedy return over ``episodes``, or what ``options`` such as
    ``--metric success_rate`` ask for)."""
    done = rlplat(
        "report", *run_dirs, "--out", str(out), "--eval-episodes", str(episodes), *options
    )
    [experiment] = read_json(out / "report.json")["experiments"]
    return {
        "command": f"rlplat report {' '.join(run_dirs)} --eval-episodes {episodes}"
        + "".join(f" {option}" for option in options),
        "report_dir": str(out),
        "iqm": experiment["aggregates"]["iqm"],
        "mean": experiment["aggregates"]["mean"],
        "final_scores": experiment["final_scores"],
        "wall_s": done.wall_s,
    }


def peer_row(saved: Path, command: Sequence[str]) -> dict[str, Any]:
    """A peer's result (a process printing its row as JSON on its last line): read from
    ``saved``, or run (timed whole) and saved there, so a benchmark going on in a later session
    keeps what finished."""
    if not saved.exists():
        done = run(command, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        row["command_wall_s"] = done.wall_s
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(row, indent=2))
    return read_json(saved)


# --- scoring with rlplat eval -------------------------------------------------------------------


def eval_report(target: str | Path, episodes: int, *flags: str) -> dict[str, Any]:
    """``rlplat eval <target> -n <episodes> --json <flags>``: the report it prints (from its
    first line that opens a JSON object: an env package may print to stdout from C, as
    pybullet does when it loads)."""
    stdout = rlplat("eval", str(target), "-n", str(episodes), "--json", *flags).stdout
    start = 0 if stdout.startswith("{") else stdout.index("\n{") + 1
    return json.JSONDecoder().raw_decode(stdout, start)[0]


def score(run_dir: str, episodes: int, random: Sequence[str] = ()) -> dict[str, Any]:
    """``rlplat eval <run> -n <episodes> --json`` (greedy; ``--random`` for each policy named in
    ``random``): the return statistics, each policy's mean return and the checkpoint scored."""
    flags = [word for policy in random for word in ("--random", policy)]
    report = eval_report(run_dir, episodes, *flags)
    policy_returns = report.get("policy_returns") or {}
    return {
        "greedy_returns": report["returns"],
        "policy_returns": {policy: stats["mean"] for policy, stats in policy_returns.items()},
        "random": list(random),
        "checkpoint": report["checkpoint"],
    }


# --- side by side with a peer -------------------------------------------------------------------


def take_turns(round_: int, sides: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
    """Run each side once, one at a time (never two on the CPU at once), rotating which goes
    first from round to round so that neither always gets the cold or the warm machine.

    Returns ``{"first": <side>, <side>: <its result>, ...}``, the sides in the order they ran.
    """
    names = list(sides)
    shift = round_ % len(names)
    order = names[shift:] + names[:shift]
    row: dict[str, Any] = {"first": order[0]}
    for name in order:
        row[name] = sides[name]()
    return row


# --- results files ------------------------------------------------------------------------------


def results_file(name: str) -> Path:
    """benchmarks/results/<name>: where a benchmark keeps its numbers."""
    return RESULTS_DIR / name


def load_results(path: Path) -> dict[str, Any]:
    """What an earlier run of the benchmark wrote to ``path`` ({} when none): a run of some of its
    parts replaces those and keeps the others."""
    return read_json(path) if path.exists() else {}


def save_results(path: Path, results: Any) -> None:
    """Write ``results`` to ``path`` as indented JSON (its folder made when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")


def machine() -> str:
    """This machine as results files name it: ``<host> (<processor>)``."""
    return f"{platform.node()} ({platform.processor() or platform.machine()})"


def commit() -> str:
    """The checkout's commit (short), for results files."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    )
    return done.stdout.strip()


def invocation() -> str:
    """The benchmark's command line as it was typed, for its results file."""
    return " ".join(["python", f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]])


# --- a two-node Ray cluster on this machine ------------------------------------------------------

RAY = str(Path(sys.executable).with_name("ray"))


@contextmanager
def two_node_cluster(resources: str = "{}") -> Iterator[str]:
    """A head and a worker node on this machine (``ray start``, as docs/cluster.md does), each
    with 2 CPUs and ``resources`` (JSON); its address. With token authentication, as
    docs/cluster.md sets it up (a token is made if this machine has none); the commands run
    meanwhile inherit the setting. Stops every Ray process on the machine at the end."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"127.0.0.1:{port}"
    node = ["--num-cpus=2", "--resources", resources]
    os.environ["RAY_AUTH_MODE"] = "token"
    if not (Path.home() / ".ray/auth_token").is_file():
        run([RAY, "get-auth-token", "--generate"], check=True)
    try:
        run(
            [RAY, "start", "--head", f"--port={port}", "--include-dashboard=false", *node],
            check=True,
        )
        run([RAY, "start", f"--address={address}", *node], check=True)
        yield address
    finally:
        run([RAY, "stop", "--force"])
        del os.environ["RAY_AUTH_MODE"]
