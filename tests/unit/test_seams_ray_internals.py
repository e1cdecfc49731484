"""Canaries of rlplat/seams/ray_internals.py: Ray core's and Serve's private modules and
names its seams rely on (imported, not called: no Ray starts)."""

from __future__ import annotations

import importlib

from tests.seam_canary import has

SEAM = "rlplat.seams.ray_internals."


def _module(name: str):
    return importlib.import_module(name)


def test_reread_auth_mode():
    seam = SEAM + "reread_auth_mode"
    raylet = _module("ray._raylet")
    for name in ("AuthenticationMode", "Config", "get_authentication_mode"):
        has(seam, raylet, name)
    has(seam, raylet.Config, "initialize")
    has(seam, raylet.AuthenticationMode, "TOKEN")


def test_actor_restarts():
    has(SEAM + "actor_restarts", _module("ray._private.state"), "actors", params=("actor_id",))


def test_env_runner_actor_ids():
    from ray.actor import ActorHandle
    from ray.rllib.env.env_runner_group import EnvRunnerGroup
    from ray.rllib.utils.actor_manager import FaultTolerantActorManager

    seam = SEAM + "env_runner_actor_ids"
    has(seam, EnvRunnerGroup, "_worker_manager")
    has(seam, FaultTolerantActorManager, "actors", params=())
    has(seam, ActorHandle, "_actor_id")


def test_available_resources_per_node():
    state = _module("ray._private.state")
    has(SEAM + "available_resources_per_node", state, "available_resources_per_node", params=())


def test_machine_cpus():
    has(SEAM + "machine_cpus", _module("ray._private.utils"), "get_num_cpus")


def test_machine_gpus():
    accelerators = _module("ray._private.accelerators")
    has(SEAM + "machine_gpus", accelerators, "NvidiaGPUAcceleratorManager")
    has(
        SEAM + "machine_gpus",
        accelerators.NvidiaGPUAcceleratorManager,
        "get_current_node_num_accelerators",
        params=(),
    )


def test_kv_put():
    params = ("key", "value", "overwrite", "namespace")
    has(SEAM + "kv_put", _module("ray.experimental.internal_kv"), "_internal_kv_put", params=params)


def test_kv_get():
    params = ("key", "namespace")
    has(SEAM + "kv_get", _module("ray.experimental.internal_kv"), "_internal_kv_get", params=params)


def test_kv_delete():
    params = ("key", "namespace")
    has(
        SEAM + "kv_delete",
        _module("ray.experimental.internal_kv"),
        "_internal_kv_del",
        params=params,
    )


def test_serve_http_address():
    seam = SEAM + "serve_http_address"
    has(seam, _module("ray.serve.context"), "_get_global_client", params=())
    client = _module("ray.serve._private.client").ServeControllerClient
    has(seam, client, "http_config")
