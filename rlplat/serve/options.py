"""``rlplat serve``'s options (light: read when the CLI starts, without Ray Serve)."""

from __future__ import annotations

from dataclasses import dataclass

from rlplat.checkpoints import last_option
from rlplat.serve.sessions import DEFAULT_MAX_SESSIONS, DEFAULT_TTL_S
from rlplat.util.options import option


@dataclass
class ServeOptions:
    """How and where a policy is served; each field but ``verbose`` is an option of
    ``rlplat serve``."""

    host: str = option(
        "127.0.0.1", help="Address to listen on; other than 127.0.0.1 needs --token-env."
    )
    port: int = option(8000, help="HTTP port.")
    replicas: int | None = option(  # default 1
        None, help="Policy replicas (default 1; not with --autoscale)."
    )
    autoscale: str | None = option(  # MIN:MAX
        None, help="MIN:MAX replicas, scaled by Ray Serve with the load."
    )
    replica_resources: str | None = option(  # YAML: {cpus: 1, gpus: 0, custom: {npu: 1}}
        None,
        flags=("--replica-resources",),
        help="Each replica's resources, as under resources: in an experiment, e.g. "
        "'{cpus: 1, custom: {npu: 1}}' (default {cpus: 1}).",
    )
    max_batch_size: int = option(
        32, help="Requests one graph run answers at most (1: no batching)."
    )
    batch_wait_ms: float = option(2.0, help="How long a batch waits to fill, in milliseconds.")
    backend: str = option("onnx", help="onnx (onnxruntime, no torch) or torch (checkpoints only).")
    token_env: str | None = option(
        None, help="Environment variable holding the bearer token requests must carry."
    )
    max_body: int = option(1 << 20, help="Largest request body in bytes (larger: 413).")
    max_sessions: int = option(
        DEFAULT_MAX_SESSIONS, help="Recurrent policies: episode sessions kept at most."
    )
    session_ttl_s: float = option(
        DEFAULT_TTL_S,
        flags=("--session-ttl",),
        help="Recurrent policies: seconds a session lives without requests.",
    )
    engine: str = option(
        "auto",
        help="local (this process answers, no Ray), ray (Ray Serve: replicas, autoscaling, "
        "clusters) or auto (local where it can serve: no --address, one replica, CPUs only).",
    )
    address: str | None = option(
        None, help="Deploy onto a running Ray cluster (auto or host:port) and return."
    )
    name: str = option("rlplat", help="Ray Serve application name.")
    stop: bool = option(False, help="Remove the application --name from the cluster.")
    episodes: int = option(  # parity episodes when serving a checkpoint
        10, flags=("--episodes", "-n"), help="Parity episodes when serving a checkpoint."
    )
    last: bool = last_option()
    verbose: bool = False  # the command's --verbose
