"""The Ray Serve application of ``rlplat serve``: three deployments, each with one job.

    HTTP ─> Ingress ──────────────> PolicyWorker (batched graph runs, --replicas)
              │  (checks, auth)
              └─> Sessions (recurrent policies only: episode memories by session id)

The ingress is the HTTP API's ``Front`` (``rlplat.serve.front``): it checks every request (auth,
size, JSON, observation shapes) before any policy code sees it, so a bad request cannot take down
a worker; it also turns a worker that dies mid-request into a retry on another replica, then into
503, where Serve's own proxy would answer 500.
``@serve.batch`` in the ingress gathers concurrent requests into one call to a worker, which
answers them with one graph run per policy: a batch costs one hop, not one per request. Workers
run the export's graphs through onnxruntime or, with the torch backend, the same graphs as torch
modules.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ray import serve
from ray.exceptions import RayActorError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
from ray.serve.handle import DeploymentHandle
from ray.serve.metrics import Counter
from starlette.requests import Request
from starlette.responses import JSONResponse

from rlplat import runtime
from rlplat.serve.front import Front, PolicyRunner, WorkerReply, policy_runners
from rlplat.serve.protocol import HttpError, PolicyView
from rlplat.serve.sessions import SessionStore

WORKER_RETRIES = 3  # attempts on other replicas when the one answering dies
UNAVAILABLE = (RayActorError, DeploymentUnavailableError, BackPressureError)


def _uses_gpu() -> bool:
    import ray  # noqa: PLC0415

    return bool(ray.get_gpu_ids())


@serve.deployment
class PolicyWorker:
    """Runs the policy for batches of requests; one replica per ``--replicas``."""

    def __init__(
        self, manifest: runtime.Manifest, graphs: dict[str, Any], backend: str, threads: int
    ):
        runners = policy_runners(manifest, graphs, backend, threads, gpu=_uses_gpu())
        self.runner = PolicyRunner(manifest, runners)

    async def act(self, requests: list[list[runtime.Query]]) -> list[WorkerReply]:
        """One graph run per policy for all the requests of a batch."""
        return self.runner.act(requests)


@serve.deployment
class Sessions:
    """Episode memories of a recurrent policy, shared by every ingress replica."""

    def __init__(self, max_sessions: int, ttl_s: float):
        self.store = SessionStore(max_sessions, ttl_s)

    def get(self, session: str) -> tuple[int, dict[str, runtime.Memory] | None]:
        return self.store.get(session)

    def put(self, session: str, memories: dict[str, runtime.Memory], version: int) -> bool:
        return self.store.put(session, memories, version)


@serve.deployment
class Ingress(Front):
    """The HTTP API on Ray Serve: asks the worker deployment, in batches, through a handle."""

    def __init__(
        self,
        worker: DeploymentHandle,
        session_store: DeploymentHandle | None,
        manifest: runtime.Manifest,
        about: dict[str, Any],
        token: str | None,
        max_body: int,
        max_batch_size: int,
        batch_wait_s: float,
    ):
        super().__init__(manifest, about, token, max_body)
        self.worker = worker
        self.session_store = session_store
        # Next to Serve's own metrics (requests, errors, latency, batch sizes).
        self.retries = Counter(
            "rlplat_serve_worker_retries",
            description="Requests asked again because the policy replica answering them died.",
        )
        self.unavailable = Counter(
            "rlplat_serve_unavailable",
            description="Requests answered 503: no policy replica could answer.",
        )
        self._ask.set_max_batch_size(max_batch_size)
        self._ask.set_batch_wait_timeout_s(batch_wait_s)

    async def __call__(self, request: Request) -> JSONResponse:
        answer = await self.answer(
            request.method, request.url.path, request.headers, request.stream()
        )
        return JSONResponse(answer.body, answer.status, headers=answer.headers)

    async def ask(self, queries: list[runtime.Query]) -> WorkerReply:
        return await self._ask(queries)

    async def sessions(self, method: str, *args: Any) -> Any:
        try:
            return await getattr(self.session_store, method).remote(*args)
        except UNAVAILABLE:
            raise HttpError(
                503, "the session store is restarting; retry shortly", {"Retry-After": "1"}
            ) from None

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002)
    async def _ask(self, requests: list[list[runtime.Query]]) -> list[WorkerReply]:
        """The worker's answers to a batch of requests; a replica that dies first is replaced by
        another (the requests are answered from the same memories, so asking again is safe)."""
        for attempt in range(WORKER_RETRIES):
            try:
                return await self.worker.act.remote(requests)
            except UNAVAILABLE:
                self.retries.inc(len(requests))
                await asyncio.sleep(0.05 * 2**attempt)
        self.unavailable.inc(len(requests))
        raise HttpError(503, "no policy replica could answer (one stopped and is being "
                             "replaced); retry shortly", {"Retry-After": "1"})


def build_app(
    manifest: runtime.Manifest,
    graphs: dict[str, Any],
    about: dict[str, Any],
    *,
    backend: str,
    replicas: dict[str, Any],
    actor_options: dict[str, Any],
    max_batch_size: int,
    batch_wait_s: float,
    token: str | None,
    max_body: int,
    max_sessions: int,
    session_ttl_s: float,
) -> Any:
    """The application: ``replicas`` is ``{"num_replicas": n}`` or ``{"autoscaling_config":
    {...}}``; ``actor_options`` the workers' Ray resources."""
    threads = max(1, int(actor_options.get("num_cpus") or 1))
    worker = PolicyWorker.options(
        **_scaled(replicas, target=1),  # each call is a whole batch: one in flight is busy
        ray_actor_options=actor_options,
        max_ongoing_requests=max(100, 2 * max_batch_size),
    ).bind(manifest, graphs, backend, threads)
    sessions = None
    if PolicyView.of(manifest).stateful:
        sessions = Sessions.options(num_replicas=1, ray_actor_options={"num_cpus": 0}).bind(
            max_sessions, session_ttl_s
        )
    return Ingress.options(
        **_scaled(replicas, target=max_batch_size),  # waiting requests cost it little
        ray_actor_options={"num_cpus": 0},
        max_ongoing_requests=1000,
    ).bind(worker, sessions, manifest, about, token, max_body, max_batch_size, batch_wait_s)


def _scaled(replicas: dict[str, Any], target: int) -> dict[str, Any]:
    """The replica options with Serve's autoscaling aimed at ``target`` ongoing requests per
    replica (the default, 2, suits a deployment that answers one request per call)."""
    if "autoscaling_config" not in replicas:
        return replicas
    return {"autoscaling_config": {**replicas["autoscaling_config"],
                                   "target_ongoing_requests": target}}
