"""The HTTP API of ``rlplat serve``, whichever engine answers it.

``Front`` holds the contract of docs/serve.md: the routes, the bearer token, the body limit, the
checks of every request against the policy (before any policy code sees it), sessions for
recurrent policies, and the error bodies. An engine supplies two things: ``ask`` (the policy's
answer to one request's queries) and ``sessions`` (the session store's ``get`` and ``put``). The
Ray Serve engine (``rlplat.serve.app``) asks a worker deployment through a handle; the local
engine (``rlplat.serve.local``) runs the policy in its own process.

This module needs numpy and ``rlplat.runtime`` only, so the HTTP-facing side loads no torch.
"""

from __future__ import annotations

import copy
import hmac
import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

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

logger = logging.getLogger(__name__)

ROUTES = {"/v1/policy": "GET", "/v1/act": "POST"}
HEALTH = "/healthz"


@dataclass
class WorkerReply:
    """A worker's reply to one request: the actions and the memories after the step, or why
    the policy could not act on it."""

    actions: list[Any] = field(default_factory=list)
    memories: list[runtime.Memory | None] = field(default_factory=list)
    error: str | None = None


@dataclass
class Answer:
    """An HTTP answer: status, JSON body and extra headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    def encoded(self) -> bytes:
        """The body as the client receives it (compact UTF-8 JSON, as Starlette writes it)."""
        return json.dumps(
            self.body, ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode()


class PolicyRunner:
    """Runs an export's policy for batches of requests, one graph run per policy per batch."""

    def __init__(self, manifest: runtime.Manifest, runners: dict[str, Any]):
        self.policy = runtime.from_manifest(manifest, runners=runners)
        self.remembers = any(spec.carries_memory for spec in manifest.policies.values())

    def act(self, requests: list[list[runtime.Query]]) -> list[WorkerReply]:
        """The replies to a batch of requests (each a list of queries). A request the policy
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


def policy_runners(
    manifest: runtime.Manifest, graphs: dict[str, Any], backend: str, threads: int, gpu: bool
) -> dict[str, Any]:
    """What runs each policy's graph on ``threads`` CPU threads: an onnxruntime session (onnx
    backend: ONNX bytes), or its torch module (torch backend; on the GPU with ``gpu``)."""
    if backend != "torch":
        return {pid: _onnx_runner(model, threads) for pid, model in graphs.items()}
    import torch  # noqa: PLC0415 - only the torch backend loads torch

    torch.set_num_threads(threads)
    device = torch.device("cuda" if gpu else "cpu")
    return {
        pid: TorchRunner(graph, manifest.policies[pid], device) for pid, graph in graphs.items()
    }


def _onnx_runner(model: bytes, threads: int) -> Any:
    import onnxruntime as ort  # noqa: PLC0415 - onnx backend only

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"])


class TorchRunner:
    """A policy graph's torch module behind onnxruntime's ``run(output_names, feed)``."""

    def __init__(self, graph: Any, spec: runtime.PolicySpec, device: Any):
        import torch  # noqa: PLC0415 - only the torch backend loads torch

        self.torch = torch
        self.device = device
        self.graph = graph.to(device).eval()
        self.input_names = [entry.name for entry in spec.inputs]
        self.output_names = [entry.name for entry in spec.outputs]

    def run(self, output_names: list[str], feed: dict[str, Any]) -> list[Any]:
        with self.torch.inference_mode():
            outputs = self.graph(
                *(self.torch.from_numpy(feed[name]).to(self.device) for name in self.input_names)
            )
        named = dict(zip(self.output_names, outputs, strict=True))
        return [named[name].cpu().numpy() for name in output_names]


class Front:
    """``GET /healthz``, ``GET /v1/policy`` and ``POST /v1/act`` on an engine's ``ask`` and
    ``sessions``."""

    def __init__(
        self,
        manifest: runtime.Manifest,
        about: dict[str, Any],
        token: str | None,
        max_body: int,
    ):
        self.view = PolicyView.of(manifest)
        self.policy_document = {**manifest.to_json(), **about}
        self.token = token
        self.max_body = max_body

    async def ask(self, queries: list[runtime.Query]) -> WorkerReply:
        """The policy's reply to one request's queries."""
        raise NotImplementedError

    async def sessions(self, method: str, *args: Any) -> Any:
        """``get(session)`` or ``put(session, memories, version)`` of the session store."""
        raise NotImplementedError

    async def answer(
        self, method: str, path: str, headers: Mapping[str, str], body: AsyncIterator[bytes]
    ) -> Answer:
        """The answer to one request (``headers`` by lower-case name; ``body`` its chunks)."""
        try:
            return Answer(200, await self._handle(method, path, headers, body))
        except HttpError as exc:
            return Answer(exc.status, {"error": exc.message}, exc.headers)
        except Exception:  # noqa: BLE001 - a bug: logged with its traceback, answered 500
            logger.exception("rlplat serve: unexpected error answering %s", path)
            return Answer(500, {"error": "internal error (see the server's log)"})

    async def _handle(
        self, method: str, path: str, headers: Mapping[str, str], body: AsyncIterator[bytes]
    ) -> dict[str, Any]:
        path = path.rstrip("/") or "/"
        if path == HEALTH:
            return {"status": "ok"}
        self._authorize(headers)
        allowed = ROUTES.get(path)
        if allowed is None:
            raise HttpError(
                404,
                f"no such path {path}; the API: GET {HEALTH}, "
                + ", ".join(f"{m} {p}" for p, m in ROUTES.items()),
            )
        if method != allowed:
            raise HttpError(405, f"{path} takes {allowed}, not {method}", {"Allow": allowed})
        if path == "/v1/policy":
            return self.policy_document
        return await self._act(parse_act(parse_body(await self._body(headers, body)), self.view))

    def _authorize(self, headers: Mapping[str, str]) -> None:
        if self.token is None:
            return
        given = headers.get("authorization", "")
        expected = f"Bearer {self.token}"
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise HttpError(
                401,
                "missing or wrong bearer token (Authorization: Bearer <token>)",
                {"WWW-Authenticate": "Bearer"},
            )

    async def _body(self, headers: Mapping[str, str], body: AsyncIterator[bytes]) -> bytes:
        too_large = HttpError(413, f"the body is larger than {self.max_body} bytes (--max-body)")
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise HttpError(400, f"invalid Content-Length {declared!r}")
            if int(declared) > self.max_body:
                raise too_large
        chunks, size = [], 0
        async for chunk in body:
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
            version, stored = await self.sessions("get", session)
            if stored is not None and not request.reset:
                memories = stored
        for query in request.queries:
            query.memory = memories.get(query.agent or SINGLE_AGENT)
        reply = await self.ask(request.queries)
        if reply.error is not None:
            raise HttpError(422, f"the policy cannot act on this request: {reply.error}")
        step = None
        if session is not None:
            for query, memory in zip(request.queries, reply.memories, strict=True):
                memories[query.agent or SINGLE_AGENT] = memory
            if not await self.sessions("put", session, memories, version):
                raise HttpError(
                    409,
                    f"session {session!r} took another step while this one was answered: send "
                    "one request at a time per session",
                )
            step = max((m.steps for m in reply.memories if m is not None), default=0)
        return response_body(request, reply.actions, session, step)
