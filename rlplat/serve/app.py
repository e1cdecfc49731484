"""The Ray Serve application of ``rlplat serve``: three deployments, each with one job.

    HTTP ─> Ingress ──────────────> PolicyWorker (batched graph runs, --replicas)
              │  (checks, auth)
              └─> Sessions (recurrent policies only: episode memories by session id)

The ingress checks every request (auth, size, JSON, observation shapes) before any policy code
sees it, so a bad request cannot take down a worker; it also turns a worker that dies mid-request
into a retry on another replica, then into 503, where Serve's own proxy would answer 500.
``@serve.batch`` in the ingress gathers concurrent requests into one call to a worker, which
answers them with one graph run per policy: a batch costs one hop, not one per request. Workers
run the export's graphs through onnxruntime or, with the torch backend, the same graphs as torch
modules.
"""

from __future__ import annotations

import asyncio
import copy
import hmac
import logging
from dataclasses import dataclass, field
from typing import Any

from ray import serve
from ray.exceptions import RayActorError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
from ray.serve.handle import DeploymentHandle
from ray.serve.metrics import Counter
from starlette.requests import Request
from starlette.responses import JSONResponse

from rlplat import runtime
from rlplat.serve.protocol import (
    SINGLE_AGENT,
    ActRequest,
    HttpError,
    PolicyView,
    parse_act,
    parse_body,
    response_body,
)
from rlplat.serve.sessions import SessionStore

logger = logging.getLogger(__name__)

ROUTES = {"/v1/policy": "GET", "/v1/act": "POST"}
HEALTH = "/healthz"
WORKER_RETRIES = 3  # attempts on other replicas when the one answering dies
UNAVAILABLE = (RayActorError, DeploymentUnavailableError, BackPressureError)


@dataclass
class WorkerReply:
    """A worker's reply to one request: the actions and the memories after the step, or why
    the policy could not act on it."""

    actions: list[Any] = field(default_factory=list)
    memories: list[runtime.Memory | None] = field(default_factory=list)
    error: str | None = None


class TorchRunner:
    """A policy graph's torch module behind onnxruntime's ``run(output_names, feed)``."""

    def __init__(self, graph: Any, spec: runtime.PolicySpec):
        import torch  # noqa: PLC0415 - only torch-backend workers load torch

        self.torch = torch
        self.device = torch.device("cuda" if _uses_gpu() else "cpu")
        self.graph = graph.to(self.device).eval()
        self.input_names = [entry.name for entry in spec.inputs]
        self.output_names = [entry.name for entry in spec.outputs]

    def run(self, output_names: list[str], feed: dict[str, Any]) -> list[Any]:
        with self.torch.inference_mode():
            outputs = self.graph(
                *(self.torch.from_numpy(feed[name]).to(self.device) for name in self.input_names)
            )
        named = dict(zip(self.output_names, outputs, strict=True))
        return [named[name].cpu().numpy() for name in output_names]


def _uses_gpu() -> bool:
    import ray  # noqa: PLC0415

    return bool(ray.get_gpu_ids())


def _onnx_runner(model: bytes, threads: int) -> Any:
    import onnxruntime as ort  # noqa: PLC0415 - onnx-backend workers only

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])


@serve.deployment
class PolicyWorker:
    """Runs the policy for batches of requests; one replica per ``--replicas``."""

    def __init__(self, manifest: runtime.Manifest, graphs: dict[str, Any], backend: str,
                 threads: int):
        if backend == "torch":
            import torch  # noqa: PLC0415

            torch.set_num_threads(threads)
            runners = {
                pid: TorchRunner(graph, manifest.policies[pid]) for pid, graph in graphs.items()
            }
        else:
            runners = {pid: _onnx_runner(model, threads) for pid, model in graphs.items()}
        self.policy = runtime.from_manifest(manifest, runners=runners)
        self.remembers = any(spec.carries_memory for spec in manifest.policies.values())

    async def act(self, requests: list[list[runtime.Query]]) -> list[WorkerReply]:
        """One graph run per policy for all the requests of a batch. A request the policy
        cannot act on gets its error; the others of its batch are answered."""
        # Memories advance in place: answering again one by one starts from copies.
        pristine = copy.deepcopy(requests) if self.remembers else requests
        try:
            return self._act(requests)
        except Exception:  # noqa: BLE001 - find which request it was, one at a time
            replies = []
            for queries in pristine:
                try:
                    replies.extend(self._act([queries]))
                except Exception as exc:  # noqa: BLE001 - reported to that request only
                    replies.append(WorkerReply(error=f"{type(exc).__name__}: {exc}"))
            return replies

    def _act(self, requests: list[list[runtime.Query]]) -> list[WorkerReply]:
        actions = runtime.act_batch(self.policy, [q for request in requests for q in request])
        replies, start = [], 0
        for request in requests:
            end = start + len(request)
            replies.append(WorkerReply(actions[start:end], [q.memory for q in request]))
            start = end
        return replies


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
class Ingress:
    """The HTTP API: ``GET /healthz``, ``GET /v1/policy``, ``POST /v1/act``."""

    def __init__(
        self,
        worker: DeploymentHandle,
        sessions: DeploymentHandle | None,
        manifest: runtime.Manifest,
        about: dict[str, Any],
        token: str | None,
        max_body: int,
        max_batch_size: int,
        batch_wait_s: float,
    ):
        self.worker = worker
        self.sessions = sessions
        self.view = PolicyView.of(manifest)
        self.policy_document = {**manifest.to_json(), **about}
        self.token = token
        self.max_body = max_body
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
        try:
            body = await self._handle(request)
        except HttpError as exc:
            return JSONResponse({"error": exc.message}, exc.status, headers=exc.headers)
        except Exception:  # noqa: BLE001 - a bug: logged with its traceback, answered 500
            logger.exception("rlplat serve: unexpected error answering %s", request.url.path)
            return JSONResponse({"error": "internal error (see the replica's log)"}, 500)
        return JSONResponse(body)

    async def _handle(self, request: Request) -> dict[str, Any]:
        path = request.url.path.rstrip("/") or "/"
        if path == HEALTH:
            return {"status": "ok"}
        self._authorize(request)
        method = ROUTES.get(path)
        if method is None:
            raise HttpError(404, f"no such path {path}; the API: GET {HEALTH}, "
                                 + ", ".join(f"{m} {p}" for p, m in ROUTES.items()))
        if request.method != method:
            raise HttpError(405, f"{path} takes {method}, not {request.method}",
                            {"Allow": method})
        if path == "/v1/policy":
            return self.policy_document
        return await self._act(parse_act(parse_body(await self._body(request)), self.view))

    def _authorize(self, request: Request) -> None:
        if self.token is None:
            return
        given = request.headers.get("authorization", "")
        expected = f"Bearer {self.token}"
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise HttpError(401, "missing or wrong bearer token (Authorization: Bearer <token>)",
                            {"WWW-Authenticate": "Bearer"})

    async def _body(self, request: Request) -> bytes:
        too_large = HttpError(413, f"the body is larger than {self.max_body} bytes (--max-body)")
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise HttpError(400, f"invalid Content-Length {declared!r}")
            if int(declared) > self.max_body:
                raise too_large
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self.max_body:
                raise too_large
            chunks.append(chunk)
        return b"".join(chunks)

    async def _act(self, request: ActRequest) -> dict[str, Any]:
        session = request.session if self.view.stateful else None
        memories: dict[str, runtime.Memory | None] = {}
        version = 0
        if session is not None:
            version, stored = await self._sessions("get", session)
            if stored is not None and not request.reset:
                memories = stored
        for query in request.queries:
            query.memory = memories.get(query.agent or SINGLE_AGENT)
        reply: WorkerReply = await self._ask(request.queries)
        if reply.error is not None:
            raise HttpError(422, f"the policy cannot act on this request: {reply.error}")
        step = None
        if session is not None:
            for query, memory in zip(request.queries, reply.memories, strict=True):
                memories[query.agent or SINGLE_AGENT] = memory
            if not await self._sessions("put", session, memories, version):
                raise HttpError(409, f"session {session!r} took another step while this one was "
                                     "answered: send one request at a time per session")
            step = max((m.steps for m in reply.memories if m is not None), default=0)
        return response_body(request, reply.actions, session, step)

    async def _sessions(self, method: str, *args: Any) -> Any:
        try:
            return await getattr(self.sessions, method).remote(*args)
        except UNAVAILABLE:
            raise HttpError(503, "the session store is restarting; retry shortly",
                            {"Retry-After": "1"}) from None

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
