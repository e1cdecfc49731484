"""Ray core's and Serve's private parts rlplat reads: the actor table, free resources per node,
the machine's CPUs and GPUs as Ray counts them, its key-value store, its auth settings cache,
a running Serve's HTTP options.

Ray's private modules are imported inside each function: they load on use, as the rest of Ray
does in the CLI's light commands, and a function whose module moved fails alone (callers that
can do without catch it).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "actor_restarts",
    "available_resources_per_node",
    "env_runner_actor_ids",
    "kv_delete",
    "kv_get",
    "kv_put",
    "machine_cpus",
    "machine_gpus",
    "reread_auth_mode",
    "serve_http_address",
]


def reread_auth_mode(token: bool) -> None:
    """Make this process's Ray client use token authentication (``token``) or not, as
    ``RAY_AUTH_MODE`` now says: Ray reads that variable once, when it loads, into a settings
    cache (``ray._raylet.Config``) that only its private ``initialize`` reads again."""
    from ray._raylet import AuthenticationMode, Config, get_authentication_mode  # noqa: PLC0415

    if (get_authentication_mode() == AuthenticationMode.TOKEN) != token:
        Config.initialize("")


def actor_restarts(actor_id: str) -> int:
    """How many times Ray restarted the actor, from the GCS's actor table (no dashboard
    needed): ``ray._private.state.actors``. The public ``ray.util.state`` API asks the
    dashboard, which a warm or minimal Ray does not run."""
    from ray._private.state import actors  # noqa: PLC0415

    return int(actors(actor_id)["NumRestarts"])


def env_runner_actor_ids(env_runner_group: Any) -> list[str]:
    """The Ray actor ids of an RLlib ``EnvRunnerGroup``'s remote env runners (an actor keeps
    its id across restarts). RLlib keeps the handles in its private ``_worker_manager``; an
    actor handle's id is its private ``_actor_id``.

    RLlib's public ``foreach_env_runner`` could have each runner say its own id, at a round trip
    per runner, and only the runners that answer: one that exited (a failing env's, the case
    the ids are read for) or is being restarted does not."""
    handles = env_runner_group._worker_manager.actors().values()
    return [handle._actor_id.hex() for handle in handles]


def available_resources_per_node() -> dict[str, dict[str, float]]:
    """Free resources by node id, from the GCS: ``ray._private.state.available_resources_per_node``
    (a developer API in a private module). The public ``ray.available_resources()`` sums the
    cluster; ``ray.util.state`` needs the dashboard."""
    from ray._private.state import available_resources_per_node as per_node  # noqa: PLC0415

    return per_node()


def machine_cpus() -> int:
    """The CPUs a local Ray would count on this machine (cgroup-aware), without starting Ray:
    ``ray._private.utils.get_num_cpus``.

    Ray's public API counts them only once Ray runs (``ray.cluster_resources``); the standard
    library's ``os.cpu_count`` and ``os.sched_getaffinity`` do not read a container's CPU quota
    (cgroups) as Ray does."""
    from ray._private.utils import get_num_cpus  # noqa: PLC0415

    return int(get_num_cpus())


def machine_gpus() -> int:
    """The NVIDIA GPUs a local Ray would count on this machine, without starting Ray:
    ``ray._private.accelerators.NvidiaGPUAcceleratorManager``.

    Ray's public API counts them only once Ray runs (``ray.cluster_resources``);
    ``ray.util.accelerators`` only names accelerator types."""
    from ray._private.accelerators import NvidiaGPUAcceleratorManager  # noqa: PLC0415

    return int(NvidiaGPUAcceleratorManager.get_current_node_num_accelerators() or 0)


def kv_put(
    key: bytes | str, value: bytes, *, overwrite: bool, namespace: str | None = None
) -> bool:
    """Store ``value`` in the cluster's key-value store (the GCS); whether the key existed.
    Ray's ``ray.experimental.internal_kv`` is the store every process of a job can reach
    without an actor; its functions are private (``_internal_kv_put``)."""
    from ray.experimental import internal_kv  # noqa: PLC0415

    return bool(internal_kv._internal_kv_put(key, value, overwrite=overwrite, namespace=namespace))


def kv_get(key: bytes | str, namespace: str | None = None) -> bytes | None:
    """The value stored under ``key`` (``_internal_kv_get``), or None.

    No public API reads the store (see :func:`kv_put`)."""
    from ray.experimental import internal_kv  # noqa: PLC0415

    return internal_kv._internal_kv_get(key, namespace=namespace)


def kv_delete(key: bytes | str, namespace: str | None = None) -> None:
    """Remove ``key`` from the store (``_internal_kv_del``).

    No public API edits the store (see :func:`kv_put`)."""
    from ray.experimental import internal_kv  # noqa: PLC0415

    internal_kv._internal_kv_del(key, namespace=namespace)


def serve_http_address() -> tuple[str, int]:
    """The host and port a running Serve's proxies listen on: Serve's public API does not say
    which HTTP options a running Serve has; its controller client does
    (``ray.serve.context._get_global_client``)."""
    from ray.serve.context import _get_global_client  # noqa: PLC0415

    config = _get_global_client().http_config
    return str(config.host), int(config.port)
