"""Heterogeneous clusters: the session's Ray gains two nodes carrying a custom resource (npu), and
real runs are checked against Ray's own state API: where env runners ran, and that a killed env
runner comes back while training goes on."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from rlplat.experiment.load import load_experiment
from rlplat.run.launch import train
from tests.e2e.helpers import run_cli
from tests.helpers import TINY_PPO, replace, rlplat

RUNNER_CLASS = "ArrayEnvRunner"  # rlplat's (rlplat.environments.seeding)

TWO_RUNNERS = replace(
    TINY_PPO,
    "  env_runners: {count: 0}\n",
    "  env_runners:\n    count: 2\n    envs: 1\nPLACEMENT",
)


@pytest.fixture(scope="module")
def npu_nodes(ray_cluster):
    """Two extra nodes with 3 CPUs and 2 npu each (the head has none); removed afterwards."""
    nodes = [ray_cluster.add_node(num_cpus=3, resources={"npu": 2}) for _ in range(2)]
    ray_cluster.wait_for_nodes()
    yield {node.node_id for node in nodes}
    for node in nodes:
        ray_cluster.remove_node(node)


def runner_actors() -> dict[str, object]:
    """Every env runner actor Ray knows of (alive or dead), by actor id, from the state API."""
    from ray.util.state import list_actors

    actors = list_actors(filters=[("class_name", "=", RUNNER_CLASS)], detail=True, limit=10_000)
    return {actor.actor_id: actor for actor in actors}


def experiment(write_yaml, tmp_path: Path, resources: str, *overrides: str):
    text = TWO_RUNNERS.replace("PLACEMENT", resources).replace("OUTPUT", str(tmp_path / "out"))
    return load_experiment(write_yaml(text), list(overrides))


def train_and_locate(loaded) -> tuple[object, list[str]]:
    """Train; return the summary and the node id of each env runner actor the run created.

    Waits first until the cluster is idle (every CPU and npu free again): Ray frees the
    resources of earlier runs' actors some time after they end, and SPREAD is best effort (it
    packs bundles onto the nodes that have room at that moment).
    """
    import ray

    def busy() -> bool:
        free, total = ray.available_resources(), ray.cluster_resources()
        return any(free.get(name, 0.0) < total[name] for name in ("CPU", "npu"))

    deadline = time.monotonic() + 60
    while busy() and time.monotonic() < deadline:
        time.sleep(0.5)
    before = set(runner_actors())
    summary = train(loaded, console=Console(quiet=True))
    new = [actor for actor_id, actor in runner_actors().items() if actor_id not in before]
    return summary, [actor.node_id for actor in new]


NPU_PREFERRED = (
    "    prefer:\n"
    "      - custom: {tpu: 1}\n"  # no node has it: passed over
    "      - custom: {npu: 1}\n"
    "      - {}\n"
)


def test_env_runners_run_only_on_nodes_with_the_preferred_resource(npu_nodes, write_yaml, tmp_path):
    """prefer: [tpu, npu, plain] resolves to npu on this cluster; the run records the choice, and
    Ray's state API shows both env runners on an npu node (PACK: the same one)."""
    loaded = experiment(write_yaml, tmp_path, NPU_PREFERRED)
    summary, nodes = train_and_locate(loaded)
    [trial] = summary.trials
    assert trial.status == "finished" and trial.iterations == 3

    assert len(nodes) == 2
    assert set(nodes) <= npu_nodes, "an env runner ran on a node without npu"
    assert len(set(nodes)) == 1, "PACK should keep the trial's runners on one node"

    run_dir = Path(summary.run_dir)
    [choice] = json.loads((run_dir / "run.json").read_text())["cluster"]["resource_choices"]
    assert choice["group"] == "env_runners" and choice["index"] == 1
    assert choice["chosen"]["custom"] == {"npu": 1.0}
    assert "tpu" in choice["passed_over"][0]
    resolved = (run_dir / "experiment.yaml").read_text()
    assert "npu: 1.0" in resolved and "tpu:" not in resolved  # the run's file is concrete


def test_spread_puts_env_runners_on_different_nodes(npu_nodes, write_yaml, tmp_path):
    loaded = experiment(write_yaml, tmp_path, "    custom: {npu: 1}\n  placement: SPREAD\n")
    summary, nodes = train_and_locate(loaded)
    assert summary.trials[0].status == "finished"
    assert len(nodes) == 2 and set(nodes) <= npu_nodes
    assert len(set(nodes)) == 2, "SPREAD should put the two runners on two nodes"


def test_plan_shows_the_nodes_and_how_many_trials_fit(npu_nodes, ray_session, write_yaml, tmp_path):
    text = TWO_RUNNERS.replace("PLACEMENT", "    custom: {npu: 1}\n")
    path = write_yaml(text.replace("OUTPUT", str(tmp_path / "out")))
    proc = rlplat(
        "plan", str(path), "tune.num_samples=8", "--address", ray_session, env={"COLUMNS": "200"}
    )
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert out.count("{CPU: 3, npu: 2}") == 4, out  # both npu nodes: resources and free now
    # 4 npu in the cluster, 2 per trial: two trials at once, whatever the CPUs allow.
    assert "Fits: yes. Trials: 8; at once: 2 on this cluster" in out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ("    custom: {tpu: 1}\n", "no node of the cluster has 'tpu'"),
        ("    custom: {npu: 3}\n", "no node has that much npu (the largest has 2)"),
        ("  placement: STRICT_SPREAD\n", "STRICT_SPREAD"),
    ],
    ids=["unknown resource", "too much on one node", "strict spread"],
)
def test_plan_refuses_a_trial_no_node_can_hold(
    npu_nodes, ray_session, write_yaml, capsys, tmp_path, resources, expected
):
    """Exit 2 naming the resource, before anything starts (the count makes STRICT_SPREAD need
    one node per bundle: 1 driver + 4 runners on 3 nodes)."""
    text = TWO_RUNNERS.replace("PLACEMENT", resources).replace("count: 2", "count: 4")
    path = write_yaml(text.replace("OUTPUT", str(tmp_path / "out")))
    code, _, err = run_cli(capsys, "plan", path, "--address", ray_session)
    assert code == 2, err
    message = " ".join(err.split())
    assert expected in message and "Traceback" not in message


def test_train_refuses_what_plan_refuses(npu_nodes, ray_session, write_yaml, capsys, tmp_path):
    text = TWO_RUNNERS.replace("PLACEMENT", "    custom: {tpu: 1}\n")
    path = write_yaml(text.replace("OUTPUT", str(tmp_path / "out")))
    started = time.monotonic()
    code, _, err = run_cli(capsys, "train", path, "--address", ray_session)
    assert code == 2, err
    assert "no node of the cluster has 'tpu'" in " ".join(err.split())
    assert time.monotonic() - started < 60  # refused, not PENDING
    assert not (tmp_path / "out").exists()


def kill_one_runner_once_training(killed: dict, settle_s: float = 2.0) -> None:
    """When a new trial's env runners are alive, let it train a moment, then SIGKILL one."""
    known = set(runner_actors())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        alive = [
            actor
            for actor_id, actor in runner_actors().items()
            if actor_id not in known and actor.state == "ALIVE"
        ]
        if len(alive) == 2:
            time.sleep(settle_s)
            os.kill(alive[0].pid, signal.SIGKILL)
            killed.update(actor_id=alive[0].actor_id, pid=alive[0].pid)
            return
        time.sleep(0.1)


def test_a_killed_env_runner_is_restarted_and_counted(npu_nodes, write_yaml, tmp_path):
    """SIGKILL an env runner mid-training: the trial still runs all its iterations, RLlib
    restarts the actor (a new process), and rlplat reports the restart."""
    loaded = experiment(
        write_yaml,
        tmp_path,
        "",
        "stop.iterations=25",
        "checkpoint.every=0",  # no checkpoint (and greedy evaluation) at every iteration
        "evaluation={evaluation_interval: null}",
    )
    killed: dict = {}
    killer = threading.Thread(target=kill_one_runner_once_training, args=(killed,))
    killer.start()
    console = Console(record=True, width=200)
    summary = train(loaded, console=console)
    killer.join()

    assert killed, "the env runner was never killed"
    [trial] = summary.trials
    assert trial.status == "finished" and trial.iterations == 25
    assert trial.env_runner_restarts >= 1
    actor = runner_actors()[killed["actor_id"]]
    assert actor.num_restarts >= 1 and actor.pid != killed["pid"]
    assert "env runner restarted" in console.export_text()


def _remove_node_after_checkpoints(ray_cluster, nodes, actor: str, where: dict, done: dict):
    """Once the run has written 3 checkpoints, remove a node of ``nodes`` that runs an actor whose
    class name holds ``actor`` (as a spot machine is reclaimed); the other node can hold what
    it held."""
    from ray.util.state import list_actors

    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        run_dir = where.get("run_dir")
        found = list(Path(run_dir).glob("trial_*/checkpoint_*")) if run_dir else []
        if len(found) >= 3:
            actors = list_actors(filters=[("state", "=", "ALIVE")], detail=True, limit=10_000)
            held = {a.node_id for a in actors if actor in a.class_name}
            lost = [node for node in nodes if node.node_id in held]
            if lost:
                ray_cluster.remove_node(lost[0])
                done.update(checkpoints=len(found), node=lost[0])
                return
        time.sleep(0.1)


# Each run whose trial (or one of whose trials, or its learner) loses its node: its overrides,
# and the class of the actor whose node goes (a trial's, or RLlib's learner actor made by Ray
# Train's worker group).
TRIAL_ON_SPOT = "resources.driver.custom={spot: 0.5}"
NODE_LOSSES = {
    "a single trial": ([TRIAL_ON_SPOT], "Trainable"),
    "one trial of a 3-trial search": (
        [TRIAL_ON_SPOT, "training.lr={grid: [0.0003, 0.0005, 0.001]}", "stop.iterations=8"],
        "Trainable",
    ),
    "a remote learner": (
        [
            "resources.learners={count: 1, custom: {spot: 0.5}}",
            "reporting.min_time_s_per_iteration=1",  # the learner is found before the run ends
        ],
        "_WrappedExecutable",
    ),
}


@pytest.mark.parametrize("lost", list(NODE_LOSSES))
def test_a_trial_whose_node_is_lost_restarts_from_its_checkpoint(
    ray_cluster, ray_session, write_yaml, tmp_path, lost
):
    """A node goes away after the run's third checkpoint (the node of the trial, of one search
    trial, or of the trial's learner); the other spot node can take its place: the trial
    restarts from its last checkpoint (or its start, when it had none) by itself, says so,
    counts it, and logs no iteration twice."""
    overrides, actor = NODE_LOSSES[lost]
    nodes = [ray_cluster.add_node(num_cpus=2, resources={"spot": 1}) for _ in range(2)]
    ray_cluster.wait_for_nodes()
    text = TINY_PPO.replace("OUTPUT", str(tmp_path / "out")).replace(
        "iterations: 3", "iterations: 10"
    )
    loaded = load_experiment(
        write_yaml(text),
        ["checkpoint.keep=null", "evaluation={evaluation_interval: null}", *overrides],
    )
    where: dict = {}
    done: dict = {}
    remover = threading.Thread(
        target=_remove_node_after_checkpoints, args=(ray_cluster, nodes, actor, where, done)
    )
    remover.start()
    console = Console(record=True, width=300)
    try:
        summary = train(loaded, console=console, on_run_dir=lambda d: where.update(run_dir=d))
    finally:
        remover.join()
        for node in nodes:
            if node is not done.get("node"):
                ray_cluster.remove_node(node)
    said = console.export_text()
    assert done, "the node was never removed"
    iterations = loaded.experiment.stop.iterations
    assert {trial.status for trial in summary.trials} == {"finished"}, said[-3000:]
    # A search trial may lose its node before its own first checkpoint.
    start = "" if lost == "one trial of a 3-trial search" else "its last checkpoint"
    assert re.search(f"restarting from {start}.*\\(restart 1 of 3", said), said[-3000:]
    restarts = said.count("restarting from")  # a line per restart of a trial
    assert sum(trial.restarts for trial in summary.trials) == restarts >= 1, said[-3000:]
    if lost != "one trial of a 3-trial search":
        assert restarts == 1
    assert "lost its process or node" in said and " failed" not in said, said[-3000:]
    for trial in summary.trials:
        assert trial.iterations == iterations, said[-3000:]
        rows = (Path(trial.path) / "result.json").read_text().splitlines()
        logged = [json.loads(line)["training_iteration"] for line in rows]
        assert logged == list(range(1, iterations + 1)), f"{trial.name}: each logged once"
