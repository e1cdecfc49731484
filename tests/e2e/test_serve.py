"""rlplat serve: real Ray Serve on the session's cluster, driven over HTTP by httpx."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers import REPO, free_port

httpx = pytest.importorskip("httpx")
pytest.importorskip("ray.serve")

TOKEN = "a-test-token-of-some-length"


# --- real Serve ---------------------------------------------------------------------------------


class Deployer:
    """Deploys with ``rlplat serve --address <the session's cluster>`` (in this process)."""

    def __init__(self, address: str, port: int):
        self.address = address
        self.url = f"http://127.0.0.1:{port}"
        self.port = port
        self.lines: list[str] = []

    def deploy(self, path: Path, **options: Any) -> str:
        from ray import serve

        from rlplat.serve.launch import ServeOptions, serve_policy

        serve.delete("rlplat")  # a fresh application (a redeploy would update it gradually)
        self.lines = []
        options = {"replica_resources": "{cpus: 0.25}", "episodes": 1, **options}
        serve_policy(
            Path(path), ServeOptions(address=self.address, port=self.port, **options),
            self.lines.append,
        )
        return self.url


@pytest.fixture(scope="module")
def serve_instance(ray_session):
    from ray import serve

    port = free_port()
    # One proxy, on the head: the nodes some tests add share this machine's ports.
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    yield Deployer(ray_session, port)
    serve.shutdown()


@pytest.fixture
def served(serve_instance):
    """Deploys for one test and removes the application after it (its replicas hold CPUs
    that the next test's training fixtures need)."""
    from ray import serve

    yield serve_instance
    serve.delete("rlplat")


def checkpoint_actor(run_dir: Any) -> tuple[Any, Any]:
    """``rlplat eval``'s actor for the run's best checkpoint, and the env it plays in."""
    from rlplat.checkpoints import find_checkpoint
    from rlplat.experiment.load import load_experiment
    from rlplat.policy.restore import Policy
    from rlplat.rllib.env_creator import rebuild_env
    from rlplat.rllib.multi_agent import mapping_for

    picked = find_checkpoint(Path(run_dir))
    experiment = load_experiment(picked.experiment_file).experiment
    env = rebuild_env(experiment, None, picked.experiment_file)
    return Policy.from_checkpoint(picked.path, mapping_for(experiment, env)).actor(), env


class HttpActor:
    """A ``rollout.Actor`` that asks the server for every action."""

    multi_agent = False
    mapping = None

    def __init__(self, client: Any, session: str | None = None):
        self.client = client
        self.session = session
        self.requests = 0

    def reset(self, env: Any, observation: Any, info: Any, seed: int) -> None:
        self.first = True

    def body(self, observation: Any) -> dict[str, Any]:
        return {"observation": np.asarray(observation).tolist()}

    def act(self, observation: Any, explore: bool) -> Any:
        body = self.body(observation)
        if self.session is not None:
            body.update(session=self.session, reset=self.first)
        self.first = False
        response = self.client.post("/v1/act", json=body)
        assert response.status_code == 200, response.text
        self.requests += 1
        return self.action(response.json())

    def action(self, answer: dict[str, Any]) -> Any:
        return answer["action"]

    def observe(self, *args: Any) -> None:
        pass


class MultiAgentHttpActor(HttpActor):
    multi_agent = True

    def body(self, observation: dict[str, Any]) -> dict[str, Any]:
        return {"observations": {a: np.asarray(o).tolist() for a, o in observation.items()}}

    def action(self, answer: dict[str, Any]) -> Any:
        return answer["actions"]


class TeamHttpActor(HttpActor):
    """QMIX acts in the team view of the env: each agent's own observation goes to the server."""

    def reset(self, env: Any, observation: Any, info: Any, seed: int) -> None:
        super().reset(env, observation, info, seed)
        self.members = list(env.members)
        self.spaces = [env.env.observation_spaces[agent] for agent in self.members]

    def body(self, observation: Any) -> dict[str, Any]:
        from rlplat.policy.exported import agent_observation

        observations, masks = {}, {}
        for index, agent in enumerate(self.members):
            obs, mask = agent_observation(self.spaces[index], observation, index)
            observations[agent] = np.asarray(obs).tolist()
            masks[agent] = np.asarray(mask).tolist()
        return {"observations": observations, "action_mask": masks}

    def action(self, answer: dict[str, Any]) -> Any:
        return np.asarray([answer["actions"][agent] for agent in self.members], dtype=np.int64)


def play(actor: Any, reference: Any, env: Any, seeds: list[int]) -> tuple[list[float], int]:
    """Episodes acted by ``actor``; ``reference`` (rlplat eval's actor) follows as a shadow and
    must choose the same action on every observation. Returns and actions compared."""
    from rlplat.policy.rollout import run_episode

    compared = 0

    def same(observation: Any, action: Any) -> None:
        nonlocal compared
        expected = reference.act(observation, False)
        if isinstance(expected, dict):
            assert {a: int(v) for a, v in expected.items()} == action
        else:
            np.testing.assert_array_equal(np.asarray(expected), np.asarray(action))
        compared += 1

    returns = [
        run_episode(actor, env, seed=seed, explore=False, shadows=[reference], watch=same)
        .episode_return
        for seed in seeds
    ]
    return returns, compared


def test_served_cartpole_policy_plays_as_eval_does(served, solved_cartpole, monkeypatch):
    """A greedy episode through HTTP: the trained policy's return (far above random play's ~22),
    every action equal to rlplat eval's; the batch form, the torch backend and explore answer
    too; the token is required."""
    monkeypatch.setenv("SERVE_TOKEN", TOKEN)
    url = served.deploy(solved_cartpole.run_dir, token_env="SERVE_TOKEN", max_batch_size=8)
    assert any(line.startswith("Try: curl") and "Bearer $SERVE_TOKEN" in line
               for line in served.lines)
    reference, env = checkpoint_actor(solved_cartpole.run_dir)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        returns, compared = play(HttpActor(client), reference, env, seeds=[0])
        print(f"CartPole over HTTP: returns {returns}, {compared} actions equal to eval's")
        assert np.mean(returns) >= 300, returns
        assert compared == sum(returns)  # CartPole: one step per point of return
        policy = client.get("/v1/policy").json()
        assert policy["parity"]["verified"] and policy["backend"] == "onnx"
        observations = np.random.default_rng(0).normal(0, 0.3, (64, 4)).tolist()
        onnx = client.post("/v1/act", json={"observations": observations}).json()["actions"]
        assert onnx == [client.post("/v1/act", json={"observation": o}).json()["action"]
                        for o in observations[:8]] + onnx[8:]
        sampled = client.post("/v1/act", json={"observations": observations * 4,
                                               "explore": True}).json()["actions"]
        assert sampled != onnx * 4, "explore samples the categorical distribution"
        assert set(sampled) == {0, 1}

    served.deploy(solved_cartpole.run_dir, backend="torch")
    with httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/v1/policy").json()["backend"] == "torch"
        torch = client.post("/v1/act", json={"observations": observations}).json()["actions"]
    assert torch == onnx


def expect(client: Any, status: int, words: list[str], method: str = "POST", path: str = "/v1/act",
           **kwargs: Any) -> None:
    response = client.request(method, path, **kwargs)
    assert response.status_code == status, response.text
    message = response.json()["error"]
    for word in words:
        assert word in message, message


def check_error_statuses(url: str) -> None:
    """401, 404, 405, 400, 413 and 422 (shape, type, NaN, unknown field, explore on DQN), each
    with a message naming the field; then /healthz and a good request still answer. For a DQN
    CartPole policy served with the token TOKEN and --max-body 2048."""
    good = {"observation": [0.01, 0.0, -0.02, 0.03]}
    with httpx.Client(base_url=url, timeout=30) as anonymous:
        expect(anonymous, 401, ["bearer token"], json=good)
        expect(anonymous, 401, ["bearer token"], json=good,
               headers={"Authorization": "Bearer wrong-token-of-some-length"})
        assert anonymous.get("/healthz").json() == {"status": "ok"}
    with httpx.Client(base_url=url, timeout=30,
                      headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        expect(client, 404, ["/v2/act", "POST /v1/act"], path="/v2/act", json=good)
        expect(client, 405, ["takes POST"], method="GET")
        expect(client, 400, ["not valid JSON"], content=b'{"observation": [0.01')
        expect(client, 400, ["JSON object"], json=[1, 2])
        expect(client, 413, ["2048 bytes"], json={"observations": [[0.0] * 4] * 200})
        expect(client, 422, ["observation", "got shape [3]", "expected shape [4]"],
               json={"observation": [0.0, 0.0, 0.0]})
        expect(client, 422, ["observation", "not numbers"],
               json={"observation": ["a", "b", "c", "d"]})
        expect(client, 422, ["observations[1]", "NaN"],
               content=b'{"observations": [[0, 0, 0, 0], [0, NaN, 0, 0]]}')
        expect(client, 422, ["'observaton'", "Did you mean 'observation'?"],
               json={"observaton": [0.0] * 4})
        expect(client, 422, ["'explore'", "greedy action only"], json={**good, "explore": True})
        expect(client, 422, ["action mask"], json={**good, "action_mask": [1, 1]})
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.post("/v1/act", json=good).json()["action"] in (0, 1)


def test_every_error_status_and_the_server_answers_after(served, off_policy_runs, monkeypatch):
    """The error statuses on Ray Serve (check_error_statuses); then --stop removes the
    application."""
    monkeypatch.setenv("SERVE_TOKEN", TOKEN)
    url = served.deploy(off_policy_runs("cartpole_dqn").run_dir, token_env="SERVE_TOKEN",
                        max_body=2048)
    check_error_statuses(url)

    from rlplat.errors import UserError
    from rlplat.serve.launch import ServeOptions, stop_application

    lines: list[str] = []
    stop_application(ServeOptions(address=served.address), lines.append)
    assert lines == ["Removed the application 'rlplat' from the cluster."]
    assert httpx.get(f"{url}/healthz", timeout=30).status_code == 404  # Serve's proxy: no app
    with pytest.raises(UserError, match="no Serve application named 'rlplat'"):
        stop_application(ServeOptions(address=served.address), lines.append)


def test_served_multi_agent_policy_acts_like_eval(served, spread_run):
    url = served.deploy(spread_run.run_dir)
    reference, env = checkpoint_actor(spread_run.run_dir)
    with httpx.Client(base_url=url, timeout=30) as client:
        returns, compared = play(MultiAgentHttpActor(client), reference, env, seeds=[0, 1])
        print(f"simple_spread over HTTP: returns {returns}, {compared} joint actions equal")
        assert compared == 2 * 25
        expect(client, 422, ["multi-agent", "agent_0"], json={"observation": [0.0] * 18})
        expect(client, 422, ["'agent_9'", "Its agents: agent_0, agent_1, agent_2"],
               json={"observations": {"agent_9": [0.0] * 18}})


def play_two_sessions(url: str, run_dir: Path) -> None:
    """Two QMIX episodes interleaved step by step, each with its own session and its own shadow
    checkpoint actor: every action equals rlplat eval's, so the sessions do not mix."""
    import threading

    from rlplat.policy.rollout import run_episode

    with httpx.Client(base_url=url, timeout=30) as client:
        expect(client, 422, ["'session' is required"],
               json={"observations": {"agent_0": [0.0] * 18}})
        pairs = [checkpoint_actor(run_dir) for _ in range(2)]
        actors = [TeamHttpActor(client, session=f"episode-{i}") for i in range(2)]
        results: list[Any] = [None, None]

        def one(i: int) -> None:  # run_episode plays one episode; two threads interleave them
            reference, env = pairs[i]
            results[i] = run_episode(actors[i], env, seed=10 + i, explore=False,
                                     shadows=[reference],
                                     watch=lambda o, a, r=reference: np.testing.assert_array_equal(
                                         np.asarray(r.act(o, False)), a))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(result is not None and result.length == 25 for result in results)
        print(f"QMIX over HTTP, 2 sessions at once: returns "
              f"{[round(r.episode_return, 2) for r in results]}, every action equal to eval's")
        answer = client.post("/v1/act", json={"observations": {"agent_0": [0.0] * 18},
                                              "session": "episode-0"}).json()
        assert answer["step"] == 26, "the session carried on from its 25 steps"


def test_a_recurrent_ppo_policy_is_served_with_sessions(corridor_lstm):
    """use_lstm PPO on the local engine: the server carries each session's LSTM state, so an
    episode over HTTP takes rlplat eval's action at every step (its return is eval's for the
    same seed); a request without a session is refused, and the printed curl line's is not."""
    import json
    import shlex

    reference, env = checkpoint_actor(corridor_lstm)
    with serve_command(corridor_lstm, "--engine", "local", "--episodes", "1") as (url, lines):
        with httpx.Client(base_url=url, timeout=30) as client:
            expect(client, 422, ["'session' is required"], json={"observation": [0.0]})
            curl = next(line for line in lines if line.startswith("Try: curl"))
            printed = client.post("/v1/act", json=json.loads(shlex.split(curl)[-1]))
            assert printed.status_code == 200 and printed.json()["step"] == 1, printed.text
            returns, compared = play(HttpActor(client, session="e"), reference, env, [0, 1])
    assert compared >= 2 and len(returns) == 2


def test_served_recurrent_qmix_keeps_memory_per_session(served, spread_qmix_run):
    """Sessions on Ray Serve, with two worker replicas (play_two_sessions)."""
    play_two_sessions(served.deploy(spread_qmix_run.run_dir, replicas=2), spread_qmix_run.run_dir)


def replica_actors(name: str = "PolicyWorker") -> list[Any]:
    from ray.util.state import list_actors

    return [
        actor for actor in list_actors(filters=[("state", "=", "ALIVE")], limit=1000)
        if actor.class_name.startswith("ServeReplica:") and actor.class_name.endswith(name)
    ]


def test_a_killed_replica_costs_no_request(served, solved_cartpole):
    """SIGKILL one of two replicas under load: every request is answered with the right action
    or a retryable 503, a client that retries loses none, and Serve starts a new replica."""
    url = served.deploy(solved_cartpole.run_dir, replicas=2)
    observations = np.random.default_rng(1).normal(0, 0.3, (50, 4)).tolist()
    with httpx.Client(base_url=url) as client:
        expected = client.post("/v1/act", json={"observations": observations}).json()["actions"]
    victim = replica_actors()[0]
    counts = {"ok": 0, "wrong": 0, "503": 0, "other": 0, "retried_ok": 0}

    async def load() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            async def worker(offset: int) -> None:
                for i in range(60):
                    index = (offset + i) % len(observations)
                    for attempt in range(5):
                        response = await client.post(
                            "/v1/act", json={"observation": observations[index]})
                        if response.status_code == 200:
                            right = response.json()["action"] == expected[index]
                            counts["ok" if right else "wrong"] += 1
                            counts["retried_ok"] += attempt > 0
                            break
                        counts["503" if response.status_code == 503 else "other"] += 1
                        await asyncio.sleep(0.5)

            async def kill() -> None:
                await asyncio.sleep(0.5)
                os.kill(victim.pid, signal.SIGKILL)

            await asyncio.gather(kill(), *(worker(16 * w) for w in range(16)))

    asyncio.run(load())
    print(f"killed replica pid {victim.pid}: {counts}")
    assert counts["wrong"] == 0 and counts["other"] == 0, counts
    assert counts["ok"] == 16 * 60, "a client that retries 503 loses no request"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        alive = replica_actors()
        if len(alive) == 2 and victim.pid not in {actor.pid for actor in alive}:
            break
        time.sleep(1)
    assert len(alive) == 2 and victim.pid not in {actor.pid for actor in alive}


def test_replicas_go_where_their_resources_are(served, ray_cluster, solved_cartpole):
    """Two replicas asking for a custom resource land on the one node that has it; a resource
    no node has is refused before deploying."""
    from rlplat.errors import UserError

    node = ray_cluster.add_node(num_cpus=1, resources={"npu": 2})
    ray_cluster.wait_for_nodes()
    try:
        served.deploy(solved_cartpole.run_dir, replicas=2,
                      replica_resources="{cpus: 0, custom: {npu: 1}}")
        actors = replica_actors()
        assert len(actors) == 2
        assert {actor.node_id for actor in actors} == {node.node_id}
        with pytest.raises(UserError, match="no node of the cluster has 'tpu'"):
            served.deploy(solved_cartpole.run_dir, replica_resources="{custom: {tpu: 1}}")
    finally:
        from ray import serve

        serve.delete("rlplat")  # before its node goes
        ray_cluster.remove_node(node)


@contextmanager
def serve_command(path: str | Path, *flags: str, env: dict[str, str] | None = None,
                  stop_signal: int = signal.SIGINT) -> Iterator[tuple[str, list[str]]]:
    """``rlplat serve PATH FLAGS --port P`` as a user runs it (its own process, no RAY_ADDRESS):
    its URL and printed lines once it serves; stopped by ``stop_signal`` afterwards, which must
    end it cleanly (exit 0, "Stopped.")."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "rlplat.cli", "serve", str(path), *flags, "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
        env={**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **(env or {})},
    )
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if "Serving until Ctrl-C" in line or "error" in line.lower():
                break
        assert "Serving until Ctrl-C.\n" in lines, "".join(lines)
        yield f"http://127.0.0.1:{port}", lines
    finally:
        process.send_signal(stop_signal)
        rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0, "".join(lines) + rest
    assert "Stopped." in rest
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)


@pytest.mark.parametrize(("flags", "engine"), [([], "local"), (["--engine", "ray"], "ray")])
def test_serve_prints_a_working_curl_line_and_stops_on_ctrl_c(cartpole_export, flags, engine):
    """The whole command, as a user runs it: the printed request is answered and Ctrl-C stops
    it cleanly, from this process (what auto picks here) and on an embedded Ray Serve."""
    import json
    import shlex

    with serve_command(cartpole_export["dir"], "--replica-resources", "{cpus: 0.5}", *flags) as (
        url,
        lines,
    ):
        assert any(("in this process (local engine)" in line) == (engine == "local")
                   and "backend" in line for line in lines), "".join(lines)
        curl = next(line for line in lines if line.startswith("Try: curl"))
        body = json.loads(shlex.split(curl)[-1])
        answer = httpx.post(f"{url}/v1/act", json=body, timeout=30)
        assert answer.status_code == 200 and answer.json()["action"] in (0, 1)
        assert httpx.get(f"{url}/v1/policy", timeout=30).json()["engine"] == engine


def test_the_local_engine_keeps_the_contract(off_policy_runs, spread_qmix_run):
    """The local engine answers every error status as Ray Serve does, keeps recurrent sessions
    apart, and stops cleanly on SIGTERM."""
    token = {"SERVE_TOKEN": TOKEN}
    dqn = off_policy_runs("cartpole_dqn").run_dir
    flags = ["--token-env", "SERVE_TOKEN", "--max-body", "2048", "--episodes", "1"]
    with serve_command(dqn, *flags, env=token, stop_signal=signal.SIGTERM) as (url, _):
        check_error_statuses(url)
    with serve_command(spread_qmix_run.run_dir, "--episodes", "1") as (url, _):
        play_two_sessions(url, spread_qmix_run.run_dir)
