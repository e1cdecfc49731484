"""The local engine of ``rlplat serve``: the HTTP API and the policy in one process, no Ray.

On one machine with one replica (the default without ``--address``), a request to the Ray Serve
engine crosses three processes (Serve's proxy, the ingress, the worker); for a policy that runs in
microseconds those hops are nearly all of its time. Here uvicorn hands each request to the same
``Front`` as the Ray Serve ingress (the same checks, errors and sessions), and the policy's graph
runs in this process. Batching adapts to the load with no timer: a request that arrives alone
runs at once; those that arrive while a graph run is under way share the next one (at most
``--max-batch-size`` requests).
"""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

from rlplat import runtime
from rlplat.serve.front import Front, PolicyRunner, WorkerReply
from rlplat.serve.sessions import SessionStore


class Batcher:
    """One graph run for every request waiting when the previous run ends."""

    def __init__(self, runner: PolicyRunner, max_batch_size: int):
        self.runner = runner
        self.max_batch_size = max_batch_size
        self.waiting: list[tuple[list[runtime.Query], asyncio.Future]] = []
        self.scheduled = False

    async def ask(self, queries: list[runtime.Query]) -> WorkerReply:
        loop = asyncio.get_running_loop()
        reply = loop.create_future()
        self.waiting.append((queries, reply))
        if not self.scheduled:
            # After the callbacks already due: requests read in the same turn of the event
            # loop join this run.
            self.scheduled = True
            loop.call_soon(self._run)
        return await reply

    def _run(self) -> None:
        batch = self.waiting[: self.max_batch_size]
        self.waiting = self.waiting[self.max_batch_size :]
        if self.waiting:
            asyncio.get_running_loop().call_soon(self._run)
        else:
            self.scheduled = False
        try:
            replies = self.runner.act([queries for queries, _ in batch])
        except Exception as exc:  # noqa: BLE001 - a bug: each request gets it (answered 500)
            for _, reply in batch:
                if not reply.done():
                    reply.set_exception(exc)
            return
        for (_, reply), answer in zip(batch, replies, strict=True):
            if not reply.done():  # its client is gone
                reply.set_result(answer)


class LocalFront(Front):
    """The HTTP API as an ASGI application, asking the policy in this process."""

    def __init__(
        self,
        manifest: runtime.Manifest,
        about: dict[str, Any],
        token: str | None,
        max_body: int,
        runner: PolicyRunner,
        max_batch_size: int,
        max_sessions: int,
        session_ttl_s: float,
    ):
        super().__init__(manifest, about, token, max_body)
        self.batcher = Batcher(runner, max_batch_size)
        self.store = SessionStore(max_sessions, session_ttl_s)

    async def ask(self, queries: list[runtime.Query]) -> WorkerReply:
        return await self.batcher.ask(queries)

    async def sessions(self, method: str, *args: Any) -> Any:
        return getattr(self.store, method)(*args)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # uvicorn runs without lifespan events
            return
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope["headers"]
        }
        answer = await self.answer(scope["method"], scope["path"], headers, _chunks(receive))
        body = answer.encoded()
        extra = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers.items()
        ]
        await send(
            {
                "type": "http.response.start",
                "status": answer.status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *extra,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


async def _chunks(receive: Any) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            return
        yield message.get("body", b"")
        if not message.get("more_body"):
            return


def serve_here(
    app: LocalFront, host: str, port: int, verbose: bool, ready: Callable[[], None]
) -> None:
    """Serve ``app`` until Ctrl-C or SIGTERM (then finish the requests under way and return);
    ``ready`` runs once the port listens."""
    import uvicorn  # noqa: PLC0415 - the serve extra

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="off",
        access_log=verbose,
        log_level="info" if verbose else "warning",
    )
    server = uvicorn.Server(config)

    async def run() -> None:
        serving = asyncio.ensure_future(server.serve())
        while not server.started and not serving.done():
            await asyncio.sleep(0.01)
        if server.started:
            ready()
        await serving

    # The policy, onnxruntime and the server live as long as the process: out of the
    # collector's full passes, which otherwise stalled requests by tens of ms under load.
    gc.freeze()
    # uvicorn stops on either signal and raises it again once stopped: both end here as
    # KeyboardInterrupt (SIGTERM's default would kill the process without "Stopped.").
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.default_int_handler)
    try:
        with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
            runner.run(run())
    except KeyboardInterrupt:
        return
