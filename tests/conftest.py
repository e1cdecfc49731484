"""Shared fixtures: one Ray instance for the whole test session, small experiment files and the
runs that several end-to-end tests read; the unit and e2e markers, set by directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from rlplat.util.frames import skip_module_search_for_frames_below
from tests.e2e.helpers import train_yaml
from tests.helpers import (
    CORRIDOR_LSTM,
    EXPERIMENTS,
    SPREAD,
    TINY_PPO,
    TINY_SEARCH,
    free_port,
    stop_warm_rays,
)

# RLlib builds connector pieces under xdist's `exec` frames (and python -m's): see the function.
skip_module_search_for_frames_below()

TESTS = Path(__file__).resolve().parent
KINDS = ("unit", "e2e")  # tests/unit and tests/e2e, each marked with its directory's name

# Commands the tests run on a local Ray keep it warm in a directory of this session's own, which
# the session's end stops: a test run leaves no Ray behind, nor joins a user's warm one.
WARM_RAY_DIR = Path(tempfile.mkdtemp(prefix="rlplat-warm-ray-"))
os.environ["RLPLAT_RAY_DIR"] = str(WARM_RAY_DIR)
# Tests run commands in many directories, each of which would keep a warm Ray of its own for
# ten minutes: here one lasts half a minute after its last command (the warm interpreter too).
os.environ.setdefault("RLPLAT_RAY_IDLE_S", "30")
# Ray's own files (and its "current cluster" record, which the state API and address "auto"
# read) in a directory of this session's: two test sessions at once each find their own Ray.
RAY_TEMP_DIR = Path(tempfile.mkdtemp(prefix="rlplat-ray-"))
os.environ["RAY_TMPDIR"] = str(RAY_TEMP_DIR)
# No usage statistics from the tests' Rays: Ray Data's collector (an actor per cluster, and a
# thread polling the cluster's metrics in each process that reads a dataset) ran idle for the
# rest of the test session once an offline test had read a dataset.
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
# Serve's controller kills a proxy that is not ready within 5 s of a check (three times over):
# on two cores busy with other workers' trainings a starting proxy took longer, and every test
# of tests/e2e/test_serve.py errored at its fixture's serve.start (CI of 315fc1a's parent).
os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "30")


def pytest_itemcollected(item):
    """Mark every test with its kind (its directory under tests/), before -m selects by it."""
    try:
        kind = item.path.resolve().relative_to(TESTS).parts[0]
    except ValueError:
        return  # a test outside tests/ (given by path): not ours to mark
    if kind not in KINDS:
        raise pytest.UsageError(
            f"{item.nodeid}: put tests in tests/unit (no Ray, no training, no subprocess) "
            "or tests/e2e (everything else)"
        )
    item.add_marker(kind)


# The session-scoped fixtures that train a run (or start a server) for several test files to read,
# and the end-to-end files whose tests use them. With pytest-xdist (README's `-n auto`) one worker
# runs these files in order, each run trained once; the other workers take every other end-to-end
# file, one file at a time, each worker on a Ray of its own, then the unit tests. Collection checks
# the list (`_check_sharing_files`).
SHARED_RUNS = frozenset({
    "tiny_run", "filtered_run", "seeded_cartpole", "solved_cartpole", "cartpole_export",
    "corridor_lstm", "off_policy_runs", "spread_run", "spread_qmix_run",
})  # fmt: skip
SHARING_FILES = frozenset({
    "test_api.py", "test_eval.py", "test_export.py", "test_multi_agent.py", "test_offline.py",
    "test_qmix.py", "test_report.py", "test_resume.py", "test_serve.py",
    "test_storage.py", "test_train.py", "test_warm_ray.py",
})  # fmt: skip


def _e2e_file(nodeid: str) -> str | None:
    """The file name of an end-to-end test's node id (None for a unit test)."""
    path = nodeid.split("::", 1)[0]
    return path.removeprefix("tests/e2e/") if path.startswith("tests/e2e/") else None


# The end-to-end files outside SHARING_FILES that take longest, handed out first under xdist so
# that none of them is the last test running while the other workers sit idle.
LONGEST_OWN_FILES = (
    "test_learning.py", "test_search.py", "test_cluster.py", "test_error_catalog.py",
)  # fmt: skip


def pytest_xdist_make_scheduler(config, log):
    """The files of ``SHARING_FILES`` one scope, run in order by one worker (their runs trained
    once); every other end-to-end file a scope of its own and each unit test one. Scopes go out
    in the order of `_xdist_order` (longest first, the unit tests last to fill the end), and a
    worker takes another once it has at most two tests left."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedRunsInOneWorker(LoadScopeScheduling):
        def schedule(self) -> None:
            self.config.option.loadscopereorder = False  # the collection's order is the plan
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            file = _e2e_file(nodeid)
            if file is None:
                return nodeid
            return "e2e-sharing" if file in SHARING_FILES else file

    return SharedRunsInOneWorker(config, log)


def _xdist_order(item) -> tuple[int, int]:
    """Where a test goes in xdist's queue: the shared runs' files (the longest scope), the
    longest other end-to-end files, the other end-to-end files, then the unit tests."""
    file = _e2e_file(item.nodeid)
    if file is None:
        return (3, 0)
    if file in SHARING_FILES:
        return (0, 0)
    if file in LONGEST_OWN_FILES:
        return (1, LONGEST_OWN_FILES.index(file))
    return (2, 0)


def _check_sharing_files(items) -> None:
    """An end-to-end test outside ``SHARING_FILES`` that uses a shared run would train it again
    in the second worker: name the file to add."""
    for item in items:
        file = _e2e_file(item.nodeid)
        used = SHARED_RUNS.intersection(getattr(item, "fixturenames", ()))
        if file is not None and used and file not in SHARING_FILES:
            raise pytest.UsageError(
                f"{item.nodeid} uses {', '.join(sorted(used))}, a run the tests of "
                f"SHARING_FILES share: add {file!r} to SHARING_FILES in tests/conftest.py"
            )


@pytest.hookimpl(trylast=True)  # after -m/-k deselection: what remains is what runs
def pytest_collection_modifyitems(config, items):
    """Run the unit tests first: they fail fast, and they run before the session's Ray exists.
    Under xdist the order is `_xdist_order` instead."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_xdist_order)
    else:
        items.sort(key=lambda item: item.get_closest_marker("unit") is None)
    _check_sharing_files(items)
    _MLFLOW_USERS[:] = [i for i in items if "mlflow_server" in getattr(i, "fixturenames", ())]


def pytest_runtest_setup(item):
    """The MLflow server starts with the first test of a file whose tests will need it: it takes
    ~20 s to come up, meanwhile that file's first tests run (and an xdist worker that runs
    other files starts none)."""
    if _MLFLOW_USERS and not _MLFLOW and _e2e_file(item.nodeid) in _mlflow_user_files():
        _start_mlflow_server()


def _mlflow_user_files() -> set[str | None]:
    return {_e2e_file(user.nodeid) for user in _MLFLOW_USERS}


_MLFLOW: dict = {}
_MLFLOW_USERS: list = []  # the collected tests that use mlflow_server


def _start_mlflow_server() -> None:
    """``mlflow server`` on a free local port, with a sqlite store in a scratch directory."""
    scratch = Path(tempfile.mkdtemp(prefix="rlplat-mlflow-"))
    port = free_port()
    command = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", f"sqlite:///{scratch / 'mlflow.db'}",
        "--artifacts-destination", str(scratch / "artifacts"),
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    log = open(scratch / "server.log", "w")  # noqa: SIM115 - closed with the server
    # No job runner (server-side jobs, which tracking never starts): its ten idle workers
    # cost ~40 s of CPU over a CI run.
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    process = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, cwd=scratch, env=env
    )
    _MLFLOW.update(process=process, log=log, scratch=scratch, uri=f"http://127.0.0.1:{port}")


def pytest_sessionfinish(session, exitstatus):
    stop_warm_rays(WARM_RAY_DIR)
    shutil.rmtree(WARM_RAY_DIR, ignore_errors=True)
    shutil.rmtree(RAY_TEMP_DIR, ignore_errors=True)
    if _MLFLOW:
        _MLFLOW["process"].terminate()
        _MLFLOW["process"].wait(timeout=30)
        _MLFLOW["log"].close()
        shutil.rmtree(_MLFLOW["scratch"], ignore_errors=True)


@pytest.fixture(scope="session")
def mlflow_server() -> str:
    """A real MLflow tracking server (sqlite store, served artifacts): its http:// URI."""
    if not _MLFLOW:  # a test run that collected no user of it at first
        _start_mlflow_server()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if _MLFLOW["process"].poll() is not None:
            pytest.fail("mlflow server exited: " + (_MLFLOW["scratch"] / "server.log").read_text())
        try:
            with urllib.request.urlopen(_MLFLOW["uri"] + "/health", timeout=2):
                return _MLFLOW["uri"]
        except OSError:
            time.sleep(0.25)
    pytest.fail("mlflow server did not answer within 180 s")


@pytest.fixture(scope="session")
def ray_cluster():
    """One Ray cluster for the whole session: a head node with this machine's resources (and the
    dashboard, for Ray's state API); tests that need more nodes add and remove them."""
    import ray
    from ray._private.utils import get_num_cpus
    from ray.cluster_utils import Cluster

    from rlplat.cluster.connect import start_ray

    # Cluster's nodes default to 1 CPU: give the head what ray.init() would detect here. The
    # dashboard on a free port: not 8265, which a user's own Ray (or a second test run) may hold.
    # No log monitor: it forwards workers' output to drivers, which rlplat asks for only with
    # --verbose (no test does), and rescanning the session's growing log folder cost it ~40 s of
    # CPU per CI worker.
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "include_dashboard": True,
            "dashboard_port": free_port(),
            "num_cpus": get_num_cpus(),
            "include_log_monitor": False,
        },
    )
    start_ray(cluster.address)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="session")
def ray_session(ray_cluster):
    """The session's Ray, connected in this process; its address for subprocess tests."""
    return ray_cluster.address


@pytest.fixture
def write_yaml(tmp_path: Path):
    """Write YAML text to a file in tmp_path and return its path."""

    def _write(text: str, name: str = "exp.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text)
        return path

    return _write


@pytest.fixture
def search_file(write_yaml, tmp_path: Path):
    """Write a search experiment (TINY_SEARCH by default) with its output in tmp_path/out."""

    def _write(text: str = TINY_SEARCH) -> Path:
        return write_yaml(text.replace("OUTPUT", str(tmp_path / "out")))

    return _write


@pytest.fixture
def tiny_ppo(write_yaml, tmp_path: Path) -> Path:
    """A PPO experiment that runs three tiny iterations into tmp_path/out."""
    return write_yaml(TINY_PPO.replace("OUTPUT", str(tmp_path / "out")))


@pytest.fixture(scope="session")
def tiny_run(ray_session, tmp_path_factory):
    """One tiny PPO run (with an override, RLlib evaluation and videos) shared by many tests."""
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    tmp = tmp_path_factory.mktemp("tiny")
    path = tmp / "exp.yaml"
    path.write_text(TINY_PPO.replace("OUTPUT", str(tmp / "out")))
    overrides = [
        "training.lr=0.0007",
        "video.every=1",
        "evaluation.evaluation_interval=2",
        "evaluation.evaluation_duration=2",
        "checkpoint.rescore_share=null",  # every kept checkpoint re-scored, however short the run
    ]
    return train(load_experiment(path, overrides), console=Console(quiet=True))


@pytest.fixture(scope="session")
def filtered_run(ray_session, tmp_path_factory):
    """The tiny PPO on observations normalised by mean_std_filter (three iterations), exported
    at its end (export.at_end): its run summary, read by the eval and export tests."""
    text = TINY_PPO + "connectors: [mean_std_filter]\nexport: {at_end: true, episodes: 3}\n"
    return train_yaml(text, tmp_path_factory.mktemp("filtered"))


@pytest.fixture(scope="session")
def solved_cartpole(seeded_cartpole):
    """The shipped CartPole PPO experiment trained to its target (about 60k env steps): the run
    of ``seeded_cartpole``, with the trial ``rlplat eval <run>`` picks (its best) as its only
    trial summary, so the tests of a solved policy pay for no training of their own."""
    from dataclasses import replace

    from rlplat.checkpoints import find_checkpoint

    picked = find_checkpoint(Path(seeded_cartpole.run_dir)).path
    [trial] = [t for t in seeded_cartpole.trials if picked.parent == Path(t.path)]
    return replace(seeded_cartpole, trials=[trial])


@pytest.fixture(scope="session")
def cartpole_export(solved_cartpole, tmp_path_factory) -> dict:
    """The solved CartPole PPO exported once (best checkpoint of the run): its folder, manifest
    and parity certificate."""
    import json

    from rlplat.cli import main

    out = tmp_path_factory.mktemp("export") / "cartpole"
    try:
        main(["export", solved_cartpole.run_dir, "--out", str(out), "--json"])
    except SystemExit as exc:
        assert exc.code == 0
    manifest = json.loads((out / "policy.json").read_text())
    parity = json.loads((out / "parity.json").read_text())
    return {"dir": out, "manifest": manifest, "parity": parity}


@pytest.fixture(scope="session")
def seeded_cartpole(ray_session, tmp_path_factory):
    """The shipped CartPole PPO experiment trained to its target on seeds 0 and 1 (``--seeds
    2``: two trials, which run at once on two cores)."""
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    out = tmp_path_factory.mktemp("seeded")
    loaded = load_experiment(EXPERIMENTS / "cartpole_ppo.yaml", [f"output_dir={out}", "seeds=2"])
    return train(loaded, console=Console(quiet=True))


@pytest.fixture(scope="session")
def corridor_lstm(ray_session, tmp_path_factory) -> Path:
    """A recurrent PPO policy on the ANSI-rendered corridor; returns its run directory."""
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    tmp = tmp_path_factory.mktemp("lstm")
    path = tmp / "exp.yaml"
    path.write_text(CORRIDOR_LSTM.replace("OUTPUT", str(tmp / "out")))
    summary = train(load_experiment(path), console=Console(quiet=True))
    assert summary.trials[0].error is None
    return Path(summary.run_dir)


@pytest.fixture(scope="session")
def off_policy_runs(ray_session, tmp_path_factory):
    """The shipped DQN and SAC experiments, two short iterations each (learning from 100 env
    steps on): ``off_policy_runs("cartpole_dqn")`` trains once per session, then returns the
    same run summary."""
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    runs = {}

    def run(name: str):
        if name not in runs:
            loaded = load_experiment(
                EXPERIMENTS / f"{name}.yaml",
                [
                    f"output_dir={tmp_path_factory.mktemp(name)}",
                    "stop.iterations=2",
                    "training.num_steps_sampled_before_learning_starts=100",
                    "reporting.min_sample_timesteps_per_iteration=200",
                ],
            )
            runs[name] = train(loaded, console=Console(quiet=True))
        return runs[name]

    return run


@pytest.fixture(scope="session")
def spread_run(ray_session, tmp_path_factory):
    """A shared-policy PPO on simple_spread, one tiny iteration."""
    return train_yaml(SPREAD, tmp_path_factory.mktemp("spread"))


@pytest.fixture(scope="session")
def spread_qmix_run(ray_session, tmp_path_factory):
    """The shipped simple_spread QMIX experiment, two small iterations on one env runner."""
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    out = tmp_path_factory.mktemp("spread-qmix")
    loaded = load_experiment(
        EXPERIMENTS / "simple_spread_qmix.yaml",
        [
            f"output_dir={out}",
            "stop.iterations=2",
            "training.batch_episodes=8",
            "training.learning_starts_episodes=8",
            "resources.env_runners.count=1",
            "checkpoint.every=1",
        ],
    )
    summary = train(loaded, console=Console(quiet=True))
    assert summary.trials[0].status == "finished", summary.trials[0].error
    return summary
