"""``rlplat serve`` under load against a plain one-process server, side by side in one run.

    apt-get install wrk                        # the load generator (Debian's package)
    python benchmarks/serve.py [--run RUN_DIR] [--seconds 5] [--soak 60] [--team RUN_DIR]
                               [--cluster] [--only team|cluster]

Every server serves the export of the shipped CartPole PPO policy (``--run``, or
checkpoints/cartpole-ppo, trained first if missing; exported into a temporary directory), one
server at a time, each started as its own process the way a user starts it:

- ``plain``: the baseline, ``policy.onnx`` behind aiohttp and onnxruntime in one process (this
  file's ``--plain``): no checks, no batching, one graph run per request;
- ``rlplat local``: ``rlplat serve <export> --engine local`` (the default on one machine);
- ``rlplat ray``: ``rlplat serve <export> --engine ray``, one replica of {cpus: 1}, batches of up
  to 32 waiting 2 ms (the defaults), and with ``--replicas 2``;
- ``serve echo``: Ray Serve's own floor, a deployment that reads the body and answers a constant,
  through the same proxy (started in this process).

Load: ``wrk`` (compiled, closed loop: each connection sends its next request when the last is
answered) for ``--seconds`` per level after a 1 s warm-up, at 1, 8, 32 and 128 connections, with
one observation per request and with 16 (``observations``). wrk runs on the same 2 cores as the
server, so its CPU use counts against the server's. ``--soak S`` adds S seconds at 32 connections
against each rlplat engine in 10-second windows: p99 per window. ``--team RUN`` adds a team of
policies answered in one request: the run's export (e.g. a MADDPG simple_spread run, one policy
per agent) behind plain, local and ray, each request holding every agent's observation.
``--cluster`` adds the Ray engine on a two-node cluster started with ``ray start`` on this machine
(docs/cluster.md), ``rlplat serve --address``, with 1 and then 2 replicas of {cpus: 1} and a
``serve_node`` resource that each node has once (so 2 replicas serve from both nodes); it stops
every Ray process on the machine at the end. ``--only`` measures just those rows and keeps the
others from the results file. Writes benchmarks/results/serve.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from harness import (
    REPO,
    RLPLAT,
    invocation,
    load_results,
    results_file,
    rlplat,
    save_results,
    two_node_cluster,
)

RESULTS = results_file("serve.json")
CONNECTIONS = (1, 8, 32, 128)
BATCH = 16
SOAK_CONNECTIONS = 32
SOAK_WINDOW_S = 10
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def plain_server(export: Path, port: int) -> None:
    """The baseline: the export's ONNX graphs behind aiohttp, one graph run per policy per
    request (a team: each agent's policy on its observation)."""
    import onnxruntime as ort
    from aiohttp import web

    from rlplat.runtime import read_manifest

    manifest = read_manifest(export)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    graphs = {
        pid: ort.InferenceSession(str(export / spec.file), options)
        for pid, spec in manifest.policies.items()
    }
    feeds = {pid: graph.get_inputs()[0].name for pid, graph in graphs.items()}

    def run(pid: str, observations: list) -> list:
        batch = np.asarray(observations, np.float32)
        return graphs[pid].run(["action"], {feeds[pid]: batch})[0].tolist()

    async def act(request: web.Request) -> web.Response:
        data = await request.json()
        if manifest.multi_agent:
            observations = data["observations"]
            actions = {a: run(manifest.agents[a], [obs])[0] for a, obs in observations.items()}
            return web.json_response({"actions": actions})
        many = "observations" in data
        actions = run(next(iter(graphs)), data["observations"] if many else [data["observation"]])
        return web.json_response({"actions": actions} if many else {"action": actions[0]})

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/v1/act", act)
    app.router.add_get("/healthz", health)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def echo_app() -> Any:
    """Ray Serve's floor: its proxy and one replica that answers without looking."""
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    @serve.deployment(ray_actor_options={"num_cpus": 1}, max_ongoing_requests=1000)
    class Echo:
        async def __call__(self, request: Request) -> JSONResponse:
            await request.body()
            return JSONResponse({"action": 0})

    return Echo.bind()


def export_of(run: Path, scratch: Path, name: str) -> Path:
    export = scratch / name
    rlplat("export", str(run), "--out", str(export))
    return export


def cartpole_run(given: str | None) -> Path:
    run = Path(given) if given else REPO / "checkpoints/cartpole-ppo"
    if not run.is_dir():  # trained where the experiment says, its progress on the terminal
        rlplat("train", "experiments/cartpole_ppo.yaml", capture=False)
    return run


def wait_ready(url: str, process: subprocess.Popen | None, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise SystemExit(f"the server exited ({process.returncode}) before it answered")
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url}/healthz did not answer within {timeout_s:.0f} s")


def wrk(url: str, body: str, connections: int, seconds: float, script_dir: Path) -> dict:
    """One wrk run: requests/s, p50 and p99 in ms, failed requests."""
    script = script_dir / "post.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = {json.dumps(body)}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    command = [
        "wrk", f"-t{min(2, connections)}", f"-c{connections}", f"-d{seconds:g}s", "--latency",
        "-s", str(script), f"{url}/v1/act",
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    percentiles = {
        int(p): float(v) * UNITS[u] for p, v, u in re.findall(r"^\s+(\d+)%\s+([\d.]+)(us|ms|s)$",
                                                            out, re.MULTILINE)
    }  # none when no request was answered in time
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    )
    return {
        "requests_per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50_ms": percentiles.get(50),
        "p99_ms": percentiles.get(99),
        "errors": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": sum(int(n) for n in socket_errors.groups()) if socket_errors else 0,
    }


def bodies() -> dict[str, str]:
    observations = np.random.default_rng(0).normal(0, 0.3, (BATCH, 4)).round(4).tolist()
    return {
        "single": json.dumps({"observation": observations[0]}),
        f"batch of {BATCH}": json.dumps({"observations": observations}),
    }


def team_body(export: Path) -> dict[str, str]:
    """Every agent's observation in one request (random numbers of each policy's input shape)."""
    from rlplat.runtime import read_manifest

    manifest = read_manifest(export)
    rng = np.random.default_rng(0)
    observations = {
        agent: rng.normal(0, 0.3, manifest.policies[pid].inputs[0].shape[1:]).round(4).tolist()
        for agent, pid in (manifest.agents or {}).items()
    }
    return {f"team of {len(observations)}": json.dumps({"observations": observations})}


def measure(name: str, url: str, seconds: float, scratch: Path, payloads: dict) -> list[dict]:
    rows = []
    for payload, body in payloads.items():
        for connections in CONNECTIONS:
            wrk(url, body, connections, 1, scratch)  # warm-up
            row = {"server": name, "payload": payload, "connections": connections,
                   **wrk(url, body, connections, seconds, scratch)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def soak(name: str, url: str, seconds: float, scratch: Path) -> dict:
    body = bodies()["single"]
    windows = [wrk(url, body, SOAK_CONNECTIONS, SOAK_WINDOW_S, scratch)
               for _ in range(max(1, round(seconds / SOAK_WINDOW_S)))]
    row = {
        "server": name,
        "connections": SOAK_CONNECTIONS,
        "window_s": SOAK_WINDOW_S,
        "p99_ms_per_window": [round(w["p99_ms"], 2) for w in windows],
        "requests_per_s_per_window": [round(w["requests_per_s"]) for w in windows],
        "errors": sum(w["errors"] + w["socket_errors"] for w in windows),
    }
    row["worst_p99_over_first"] = round(max(row["p99_ms_per_window"]) / windows[0]["p99_ms"], 2)
    print(json.dumps(row), flush=True)
    return row


def run_server(command: list[str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen(
        [*command, "--port", str(port)], cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"},
    )
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, process)
    return process, url


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()


def echo_rows(seconds: float, scratch: Path) -> list[dict]:
    import ray
    from ray import serve

    port = free_port()
    ray.init(address="local", include_dashboard=False)
    logging_config = {"enable_access_log": False, "log_level": "WARNING"}
    serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config=logging_config)
    serve.run(echo_app(), name="echo", route_prefix="/", logging_config=logging_config)
    try:
        body = bodies()["single"]
        rows = []
        for connections in CONNECTIONS:
            wrk(f"http://127.0.0.1:{port}", body, connections, 1, scratch)
            row = {"server": "serve echo", "payload": "single", "connections": connections,
                   **wrk(f"http://127.0.0.1:{port}", body, connections, seconds, scratch)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()
    return rows


def cluster_rows(export: Path, seconds: float, scratch: Path) -> list[dict]:
    """The Ray engine on two nodes, 1 and 2 replicas, single observations."""
    rows = []
    with two_node_cluster('{"serve_node": 1}') as address:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        for replicas in (1, 2):
            deployed = rlplat(
                "serve", str(export), "--address", address, "--port", str(port), "--name",
                "bench", "--replicas", str(replicas), "--replica-resources",
                "{cpus: 1, custom: {serve_node: 1}}",
            )
            placed = next(line for line in deployed.stdout.splitlines() if "replica(s)" in line)
            wait_ready(url, None)
            for row in measure(f"rlplat ray, {replicas} replica(s), 2 nodes", url, seconds,
                               scratch, {"single": bodies()["single"]}):
                rows.append({**row, "placed": placed.strip()})
            rlplat("serve", "--stop", "--name", "bench", "--address", address)
    return rows


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(rows: list[dict]) -> str:
    plain = {(r["payload"], r["connections"]): r for r in rows if r["server"] == "plain"}
    lines = [
        "| server | payload | connections | requests/s | p50 ms | p99 ms | errors "
        "| req/s vs plain |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        base = plain.get((row["payload"], row["connections"]))
        ratio = f"{row['requests_per_s'] / base['requests_per_s']:.2f}x" if base else "-"
        lines.append(
            f"| {row['server']} | {row['payload']} | {row['connections']} | "
            f"{row['requests_per_s']:,.0f} | {_ms(row['p50_ms'])} | {_ms(row['p99_ms'])} | "
            f"{row['errors'] + row['socket_errors']} | {ratio} |"
        )
    return "\n".join(lines)


def servers(export: Path, replicas: bool) -> dict[str, list[str]]:
    """Each server's command for ``export`` (--port is added when it starts)."""
    commands = {
        "plain": [sys.executable, __file__, "--plain", str(export), "0"],
        "rlplat local": [*RLPLAT, "serve", str(export), "--engine", "local"],
        "rlplat ray": [*RLPLAT, "serve", str(export), "--engine", "ray"],
    }
    if replicas:
        commands["rlplat ray, 2 replicas"] = [
            *RLPLAT, "serve", str(export), "--engine", "ray", "--replicas", "2",
            "--replica-resources", "{cpus: 0.5}",
        ]
    return commands


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="a CartPole PPO run (default checkpoints/cartpole-ppo)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per level")
    parser.add_argument("--soak", type=float, default=0.0, help="seconds of soak per engine")
    parser.add_argument("--team", help="a multi-agent run: serve its team too")
    parser.add_argument("--cluster", action="store_true", help="the Ray engine on two nodes")
    parser.add_argument("--only", choices=["team", "cluster"], help="only those rows")
    parser.add_argument("--plain", nargs=2, metavar=("EXPORT", "PORT"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain:
        plain_server(Path(args.plain[0]), args.port or int(args.plain[1]))
        return
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    rows, soaks = [], []
    with tempfile.TemporaryDirectory(prefix="rlplat-serve-bench-") as tmp:
        scratch = Path(tmp)
        export = export_of(cartpole_run(args.run), scratch, "export")
        if args.only is None:
            for name, command in servers(export, replicas=True).items():
                process, url = run_server(command)
                try:
                    rows += measure(name, url, args.seconds, scratch, bodies())
                    if args.soak and name in ("rlplat local", "rlplat ray"):
                        soaks.append(soak(name, url, args.soak, scratch))
                finally:
                    stop(process)
            rows += echo_rows(args.seconds, scratch)
        if args.team and args.only in (None, "team"):
            team = export_of(Path(args.team), scratch, "team")
            for name, command in servers(team, replicas=False).items():
                process, url = run_server(command)
                try:
                    rows += measure(name, url, args.seconds, scratch, team_body(team))
                finally:
                    stop(process)
        if args.cluster and args.only in (None, "cluster"):
            rows += cluster_rows(export, args.seconds, scratch)
    for row in [*rows, *soaks]:
        row["command"] = invocation()
    if args.only:  # the earlier rows stay, but for those measured again
        earlier = load_results(RESULTS)
        again = {(r["server"], r["payload"]) for r in rows}
        kept = [r for r in earlier.get("rows", []) if (r["server"], r["payload"]) not in again]
        rows = kept + rows
        soaks = earlier.get("soak", [])
    save_results(RESULTS, {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "wrk": subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.split("\n")[0],
        "seconds_per_level": args.seconds,
        "rows": rows,
        "soak": soaks,
    })
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
