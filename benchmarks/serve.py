"""``rlplat serve`` under load: requests/s and latency, side by side in one run.

    python benchmarks/serve.py [--run RUN_DIR] [--seconds 4] [--max-requests 4000]

Serves the shipped CartPole PPO policy (``--run``, or checkpoints/cartpole-ppo, trained first if
missing) on a local Ray instance with Ray Serve, once per configuration: backend onnx and torch,
1 and 2 replicas of {cpus: 1}, batching off (``--max-batch-size 1``) and on (64, waiting 2 ms).
Each configuration gets closed-loop load from an aiohttp client over loopback at
concurrency 1, 16 and 64 (each client sends its next request when the last is answered, one
observation per request), for ``--seconds`` or ``--max-requests`` per level after a short warm-up.
The load generator runs on the same machine, so its CPU use counts against the server's. It is
aiohttp, not httpx: against the echo deployment below at concurrency 64, httpx's async client
reached 168 requests/s (p99 1.4 s) where aiohttp reached 490 (p99 0.2 s) on this machine; the
client, not the server, was the limit.
A first row measures Ray Serve's own floor on this machine: one deployment that reads the body and
answers a constant, through the same proxy and client.

Writes benchmarks/results/serve.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import time
from pathlib import Path

import numpy as np
from harness import REPO, invocation, results_file, rlplat, save_results

RESULTS = results_file("serve.json")
CONCURRENCY = (1, 16, 64)
CONFIGS = [
    {"backend": backend, "replicas": replicas, "batching": batching}
    for backend in ("onnx", "torch")
    for replicas in (1, 2)
    for batching in (False, True)
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def echo_app() -> object:
    """The floor: Serve's proxy and one replica that answers without looking at the request."""
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import JSONResponse

    @serve.deployment(ray_actor_options={"num_cpus": 1}, max_ongoing_requests=1000)
    class Echo:
        async def __call__(self, request: Request) -> JSONResponse:
            await request.body()
            return JSONResponse({"action": 0})

    return Echo.bind()


def cartpole_run(given: str | None) -> Path:
    if given:
        return Path(given)
    default = REPO / "checkpoints/cartpole-ppo"
    if not default.is_dir():  # trained where the experiment says, its progress on the terminal
        rlplat("train", "experiments/cartpole_ppo.yaml", capture=False)
    return default


async def load(url: str, concurrency: int, seconds: float, max_requests: int,
               observations: list[list[float]]) -> dict[str, float]:
    """Closed-loop load: ``concurrency`` clients, each waiting for its answer before the next."""
    import aiohttp

    latencies: list[float] = []
    failures = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(base_url=url, connector=connector) as client:
        async def one(index: int) -> None:
            nonlocal failures
            start = time.perf_counter()
            body = {"observation": observations[index % len(observations)]}
            async with client.post("/v1/act", json=body) as response:
                await response.read()
                if response.status == 200:
                    latencies.append(time.perf_counter() - start)
                else:
                    failures += 1

        async def client_loop(offset: int, deadline: float, budget: list[int]) -> None:
            index = offset
            while time.perf_counter() < deadline and budget[0] > 0:
                budget[0] -= 1
                await one(index)
                index += concurrency

        warm = time.perf_counter() + 0.5
        await asyncio.gather(*(client_loop(i, warm, [10**9]) for i in range(concurrency)))
        latencies.clear()
        start = time.perf_counter()
        budget = [max_requests]
        await asyncio.gather(*(client_loop(i, start + seconds, budget)
                               for i in range(concurrency)))
        elapsed = time.perf_counter() - start
    return {
        "requests": len(latencies),
        "failures": failures,
        "requests_per_s": len(latencies) / elapsed,
        "p50_ms": float(np.percentile(latencies, 50) * 1000),
        "p99_ms": float(np.percentile(latencies, 99) * 1000),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", help="a CartPole PPO run (default checkpoints/cartpole-ppo)")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--max-requests", type=int, default=4000)
    args = parser.parse_args()

    import ray
    from ray import serve

    from rlplat.cluster.connect import start_ray
    from rlplat.serve.launch import ServeOptions, serve_policy

    run = cartpole_run(args.run)
    start_ray(None)
    address = ray.get_runtime_context().gcs_address
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port},
                logging_config={"enable_access_log": False, "log_level": "WARNING"})
    observations = np.random.default_rng(0).normal(0, 0.3, (256, 4)).tolist()
    rows = []
    logging_config = {"enable_access_log": False, "log_level": "WARNING"}
    serve.run(echo_app(), name="rlplat", route_prefix="/", logging_config=logging_config)
    for concurrency in CONCURRENCY:
        result = asyncio.run(load(f"http://127.0.0.1:{port}", concurrency, args.seconds,
                                  args.max_requests, observations))
        rows.append({"backend": "echo (Serve's floor)", "replicas": 1, "batching": False,
                     "concurrency": concurrency, **result})
        print(json.dumps(rows[-1]), flush=True)
    for config in CONFIGS:
        serve.delete("rlplat")
        options = ServeOptions(
            address=address, port=port, backend=config["backend"],
            replicas=config["replicas"], replica_resources="{cpus: 1}",
            max_batch_size=64 if config["batching"] else 1, batch_wait_ms=2.0, episodes=1,
        )
        serve_policy(run, options, lambda line: None)
        for concurrency in CONCURRENCY:
            result = asyncio.run(load(f"http://127.0.0.1:{port}", concurrency, args.seconds,
                                      args.max_requests, observations))
            rows.append({**config, "concurrency": concurrency, **result})
            print(json.dumps(rows[-1]), flush=True)
    serve.shutdown()
    ray.shutdown()
    save_results(RESULTS, {
        "command": invocation(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "run": str(run),
        "seconds_per_level": args.seconds,
        "rows": rows,
    })
    print("\n| backend | replicas | batching | concurrency | requests/s | p50 ms | p99 ms |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(f"| {row['backend']} | {row['replicas']} | "
              f"{'on (64, 2 ms)' if row['batching'] else 'off'} | {row['concurrency']} | "
              f"{row['requests_per_s']:.0f} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} |")


if __name__ == "__main__":
    main()
