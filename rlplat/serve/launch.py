"""``rlplat serve``: a checkpoint or an export behind an HTTP endpoint, on local Ray or a cluster.

The stages, in order: check the options (nothing starts for a bad one), get the policy's graphs
(an export's files, or a checkpoint exported with its parity certificate into a temporary
directory), check the replicas' resources against the machine or cluster, start Serve and the
application, ask ``/healthz`` over HTTP, print how to call it. Embedded (no ``--address``): runs
until Ctrl-C, then shuts Serve and Ray down. With ``--address`` the application stays on the
cluster until ``rlplat serve --stop``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import shlex
import signal
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rlplat import runtime
from rlplat.cluster.connect import cluster_address, embedded, start_ray
from rlplat.cluster.placement import (
    LabelledBundle,
    Node,
    cluster_nodes,
    describe_nodes,
    format_bundle,
    local_machine,
    make_plan,
)
from rlplat.errors import UserError, did_you_mean, not_among
from rlplat.experiment.schema import ResourceOption, entry_parts
from rlplat.experiment.yaml_io import parse_yaml
from rlplat.export import load_exporter
from rlplat.policy.exported import is_export
from rlplat.seams.ray_internals import serve_http_address
from rlplat.serve import require_serve, require_serve_http
from rlplat.serve.front import PolicyRunner, policy_runners
from rlplat.serve.local import LocalFront, serve_here
from rlplat.serve.options import ServeOptions
from rlplat.serve.protocol import PolicyView

BACKENDS = ("onnx", "torch")
ENGINES = ("auto", "local", "ray")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
MIN_TOKEN_LENGTH = 16
READY_TIMEOUT_S = 120.0
PARITY_SUMMARY = (
    "verified",
    "passed",
    "agreement",
    "compared_actions",
    "max_abs_diff",
    "tolerance",
    "episodes",
)


@dataclass
class Checked:
    """The options as the deployment takes them."""

    replicas: dict[str, Any]  # num_replicas or autoscaling_config
    min_replicas: int
    bundle: dict[str, float]  # one worker replica's resources, in Ray's names
    actor_options: dict[str, Any]
    token: str | None


@dataclass
class ServedPolicy:
    """What the replicas get: the manifest, a graph per policy (ONNX bytes or torch modules)
    and the facts ``GET /v1/policy`` adds to the manifest."""

    manifest: runtime.Manifest
    graphs: dict[str, Any]
    about: dict[str, Any]
    source: str


def check_options(path: Path | None, options: ServeOptions) -> Checked:
    """Every option, before anything starts (a slip costs no Ray start-up)."""
    if options.backend not in BACKENDS:
        raise UserError(
            f"--backend {options.backend!r} is not a backend."
            + not_among(options.backend, BACKENDS)
        )
    if options.engine not in ENGINES:
        raise UserError(
            f"--engine {options.engine!r} is not an engine." + not_among(options.engine, ENGINES)
        )
    if path is not None and not path.exists():
        raise UserError(
            f"{path} does not exist: give a checkpoint, a trial/run/experiment "
            "directory of rlplat train, or a directory written by rlplat export."
        )
    if not 0 < options.port < 65536:
        raise UserError(f"--port must be between 1 and 65535, got {options.port}.")
    for name, value, least in (
        ("--max-batch-size", options.max_batch_size, 1),
        ("--max-body", options.max_body, 1024),
        ("--max-sessions", options.max_sessions, 1),
        ("--episodes", options.episodes, 1),
    ):
        if value < least:
            raise UserError(f"{name} must be at least {least}, got {value}.")
    for name, value, zero in (
        ("--batch-wait-ms", options.batch_wait_ms, True),
        ("--session-ttl", options.session_ttl_s, False),
    ):
        if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
            bound = "0 or more" if zero else "more than 0"
            raise UserError(f"{name} must be a finite number, {bound}; got {value}.")
    token = _token(options)
    replicas, least = _replicas(options)
    bundle, actor_options = _resources(options.replica_resources)
    return Checked(replicas, least, bundle, actor_options, token)


def _token(options: ServeOptions) -> str | None:
    if options.token_env is None:
        if options.host not in LOOPBACK:
            raise UserError(
                f"--host {options.host} makes the policy reachable from other machines, so "
                "requests must carry a bearer token: put a secret of at least "
                f"{MIN_TOKEN_LENGTH} characters in an environment variable and name it with "
                "--token-env VAR (clients send 'Authorization: Bearer <secret>'). Without a "
                "token, serve on 127.0.0.1 (the default)."
            )
        return None
    token = os.environ.get(options.token_env, "")
    if len(token) < MIN_TOKEN_LENGTH:
        state = (
            "is not set"
            if options.token_env not in os.environ
            else (f"holds {len(token)} characters")
        )
        raise UserError(
            f"--token-env {options.token_env}: the environment variable {state}; it must hold "
            f"the bearer token, at least {MIN_TOKEN_LENGTH} characters (for example: export "
            f"{options.token_env}=$(python -c 'import secrets; print(secrets.token_urlsafe())'))."
        )
    return token


def _replicas(options: ServeOptions) -> tuple[dict[str, Any], int]:
    if options.autoscale is None:
        count = 1 if options.replicas is None else options.replicas
        if count < 1:
            raise UserError(f"--replicas must be at least 1, got {count}.")
        return {"num_replicas": count}, count
    if options.replicas is not None:
        raise UserError("give --replicas N or --autoscale MIN:MAX, not both.")
    low, _, high = options.autoscale.partition(":")
    if not (low.strip().isdigit() and high.strip().isdigit()) or not (
        1 <= int(high) and int(low) <= int(high)
    ):
        raise UserError(
            f"--autoscale {options.autoscale!r}: expected MIN:MAX replicas with 0 <= MIN <= MAX "
            "and MAX >= 1, such as 1:4."
        )
    config = {
        "min_replicas": int(low),
        "max_replicas": int(high),
        "initial_replicas": max(1, int(low)),
    }
    return {"autoscaling_config": config}, max(1, int(low))


def _resources(text: str | None) -> tuple[dict[str, float], dict[str, Any]]:
    """One replica's resources from ``--replica-resources`` (the YAML ``resources:`` words)."""
    key = "--replica-resources"
    data: Any = {"cpus": 1}
    if text is not None:
        data, _ = parse_yaml(text, key)
        if not isinstance(data, dict):
            raise UserError(
                f"{key} {text!r}: expected a mapping such as "
                "'{cpus: 1, gpus: 0, custom: {npu: 1}}'."
            )
    try:
        option = ResourceOption.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        if first["type"] == "extra_forbidden":
            why = f"unknown key {where!r}." + did_you_mean(where, ResourceOption.model_fields)
        else:
            why = f"{where}: {first['msg'].removeprefix('Value error, ')}."
        raise UserError(
            f"{key} {text!r}: {why} Allowed: cpus, gpus and custom (a mapping of "
            "the nodes' custom resources), as under resources: in an experiment."
        ) from None
    cpus = 1.0 if option.cpus is None else option.cpus
    gpus = option.gpus or 0.0
    custom = dict(option.custom or {})
    bundle = {"CPU": cpus, "GPU": gpus, **custom}
    actor_options: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus}
    if custom:
        actor_options["resources"] = custom
    return {name: amount for name, amount in bundle.items() if amount}, actor_options


def served_policy(path: Path, options: ServeOptions, say: Any) -> ServedPolicy:
    """The graphs to serve: an export's, or a checkpoint's exported (and certified) now."""
    if is_export(path):
        if options.backend == "torch":
            raise UserError(
                f"--backend torch runs the policy's torch module, which a checkpoint holds and "
                f"an export ({path}) does not: serve the checkpoint it came from instead, or "
                "serve the export with the default onnx backend."
            )
        return _from_export(path, f"export {path}")
    exporter = load_exporter()
    with tempfile.TemporaryDirectory(prefix="rlplat-serve-") as scratch:
        report = exporter.export(
            path,
            exporter.ExportOptions(
                out=Path(scratch) / "export", episodes=options.episodes, last=options.last
            ),
            say=say,
        )
        served = _from_export(report.directory, f"checkpoint {report.checkpoint}")
    if options.backend == "torch":
        served.graphs = dict(report.graphs)
    return served


def _from_export(directory: Path, source: str) -> ServedPolicy:
    try:
        manifest = runtime.read_manifest(directory)
    except runtime.ExportError as exc:
        raise UserError(f"cannot serve {directory}: {exc}.") from None
    graphs = {}
    for pid, spec in manifest.policies.items():
        if spec.kind == "onnx":
            file = directory / spec.file
            if not file.is_file():
                raise UserError(f"the export {directory} is incomplete: {spec.file} is missing.")
            graphs[pid] = file.read_bytes()
    parity_file = directory / runtime.PARITY
    parity = json.loads(parity_file.read_text()) if parity_file.is_file() else {"verified": False}
    summary = {key: parity[key] for key in PARITY_SUMMARY if key in parity}
    return ServedPolicy(manifest, graphs, {"parity": summary}, source)


def pick_engine(options: ServeOptions, checked: Checked) -> str:
    """``local`` (this process answers) or ``ray`` (Ray Serve), as ``--engine`` asks; ``auto``
    is local unless something needs Ray Serve."""
    needs_ray = []
    if not embedded(options.address):
        needs_ray.append("a Ray cluster (--address or RAY_ADDRESS)")
    if "num_replicas" not in checked.replicas or checked.replicas["num_replicas"] > 1:
        needs_ray.append("more than one replica (--replicas, --autoscale)")
    if set(checked.bundle) - {"CPU"}:
        needs_ray.append("GPUs or custom resources (--replica-resources), which Ray places")
    if options.engine == "local" and needs_ray:
        raise UserError(
            "--engine local answers from this process, on this machine's CPUs: it cannot serve "
            f"{' or '.join(needs_ray)}. Use --engine ray (or auto, which picks it)."
        )
    return "ray" if options.engine == "ray" or needs_ray else "local"


def check_placement(checked: Checked, nodes: list[Node]) -> list[str]:
    """Refuse replicas the cluster can never hold; the node of each replica on an empty one."""
    bundles = [LabelledBundle("replica", "--replica-resources", checked.bundle)] * (
        checked.min_replicas
    )
    plan = make_plan(bundles, "SPREAD", nodes, 1, None)
    if plan.problems:
        raise UserError(
            f"--replica-resources: {checked.min_replicas} replica(s) cannot run on this Ray "
            f"cluster: " + "; ".join(plan.problems) + f". The cluster's nodes: "
            f"{describe_nodes(nodes)}. "
            "Ask for less (cpus, gpus, custom), run fewer replicas, or join a cluster that has it "
            "with --address (see docs/cluster.md)."
        )
    return [nodes[index].label for index in plan.placement or []]


def port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def url_of(host: str, port: int, *, public: bool) -> str:
    """Where clients reach the proxy: this machine's name (public) or loopback (local) for a
    wildcard host; IPv6 literals in brackets."""
    if host in ("0.0.0.0", "::"):
        host = socket.gethostname() if public else "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def proxy_address(serve: Any, options: ServeOptions) -> tuple[str, int]:
    """The host and port Serve's proxies listen on: a Serve that already ran on the cluster
    keeps its own, whatever this command asked for."""
    try:
        return serve_http_address()
    except Exception:  # noqa: BLE001 - a private API: the options asked for then
        return options.host, options.port


def wait_healthy(url: str, timeout_s: float = READY_TIMEOUT_S) -> None:
    """``GET /healthz`` until it answers 200 (the proxy can lag the application by a moment)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise UserError(
                f"the application was deployed but {url}/healthz did not answer "
                f"within {timeout_s:.0f} s; see Ray's logs (--verbose)."
            )
        time.sleep(0.2)


def curl_line(url: str, view: PolicyView, token_env: str | None) -> str:
    auth = f' -H "Authorization: Bearer ${token_env}"' if token_env else ""
    body = json.dumps(view.example(), separators=(", ", ": "))
    return f"curl -s {url}/v1/act{auth} -d {shlex.quote(body)}"


def summary_lines(
    served: ServedPolicy,
    options: ServeOptions,
    checked: Checked,
    placement: list[str],
    url: str,
    engine: str,
) -> list[str]:
    manifest = served.manifest
    experiment = manifest.experiment
    view = PolicyView.of(manifest)
    parity = served.about["parity"]
    verified = (
        f"parity verified over {parity.get('episodes')} episode(s), actions agree on "
        f"{parity.get('agreement', 0):.2%}"
        if parity.get("verified") and parity.get("passed", True)
        else "NOT verified against its checkpoint (exported with --no-verify or failed)"
    )
    if manifest.multi_agent:
        acting = ", ".join(f"{agent} -> {pid}" for agent, pid in (manifest.agents or {}).items())
    else:
        acting = "one policy"
    size = (
        f"{checked.replicas['num_replicas']} replica(s)"
        if "num_replicas" in checked.replicas
        else "autoscaling {min_replicas}..{max_replicas} replicas".format(
            **checked.replicas["autoscaling_config"]
        )
    )
    if engine == "local":
        where = (
            f"  in this process (local engine) on {local_threads(checked)} CPU thread(s) with the "
            f"{options.backend} backend, batches of up to {options.max_batch_size} (whatever "
            "arrives while the policy runs; no wait)"
        )
    else:
        where = (
            f"  {size} x {format_bundle(checked.bundle)} on Ray Serve with the {options.backend} "
            f"backend, batches of up to {options.max_batch_size} (waiting "
            f"{options.batch_wait_ms:g} ms)"
            + (f"; on {', '.join(sorted(set(placement)))}" if placement else "")
        )
    lines = [
        f"Serving {experiment and experiment.name} ({experiment and experiment.algorithm} on "
        f"{manifest.env.label}) from the {served.source}",
        f"  policy: {acting}; {verified}",
        where,
    ]
    wrappers = (manifest.env.recipe.get("wrappers") or []) if manifest.env else []
    if wrappers:
        names = ", ".join(entry_parts(wrapper)[0] for wrapper in wrappers)
        lines.append(
            f"  observations: as {manifest.env.label!r} returns them after its "
            f"env.wrappers ({names}), which the server does not apply (docs/serve.md)"
        )
    if view.stateful:
        lines.append(
            "  recurrent: send a 'session' id with each step and 'reset': true with an "
            f"episode's first; sessions expire after {options.session_ttl_s:g} s"
        )
    lines += [
        f"URL: {url}   (GET /healthz, GET /v1/policy, POST /v1/act)",
        f"Try: {curl_line(url, view, options.token_env)}",
    ]
    return lines


def serve_command(path: Path | None, options: ServeOptions, say: Any) -> None:
    """``rlplat serve``: serve the policy at ``path``, or with ``--stop`` remove the application
    ``options.name`` from the cluster."""
    if options.stop:
        if path is not None:
            raise UserError("--stop removes the application --name; it takes no path.")
        stop_application(options, say)
    elif path is None:
        raise UserError(
            "rlplat serve needs a path: a checkpoint, a run directory of rlplat train, or a "
            "directory written by rlplat export (or --stop to remove a deployed application)."
        )
    else:
        serve_policy(path, options, say)


def local_threads(checked: Checked) -> int:
    """The CPU threads one replica's graph runs use: its whole CPUs, at least one."""
    return max(1, int(checked.actor_options.get("num_cpus") or 1))


def serve_policy(path: Path, options: ServeOptions, say: Any) -> None:
    """Serve the policy until Ctrl-C (or SIGTERM): from this process (the local engine), or
    deployed on Ray Serve (with ``--address`` it stays on the cluster and this returns)."""
    checked = check_options(path, options)
    if pick_engine(options, checked) == "local":
        serve_locally(path, options, checked, say)
    else:
        serve_on_ray(path, options, checked, say)


def serve_locally(path: Path, options: ServeOptions, checked: Checked, say: Any) -> None:
    """The local engine: no Ray; uvicorn and the policy in this process."""
    require_serve_http()
    check_placement(checked, local_machine())
    if not port_is_free(options.host, options.port):
        raise UserError(
            f"port {options.port} on {options.host} is in use (another rlplat "
            "serve?): pick another with --port."
        )
    served = served_policy(path, options, say)
    threads = local_threads(checked)
    runners = policy_runners(served.manifest, served.graphs, options.backend, threads, gpu=False)
    app = LocalFront(
        served.manifest,
        {**served.about, "backend": options.backend, "engine": "local"},
        checked.token,
        options.max_body,
        PolicyRunner(served.manifest, runners),
        options.max_batch_size,
        options.max_sessions,
        options.session_ttl_s,
    )
    url = url_of(options.host, options.port, public=True)

    def ready() -> None:
        for line in summary_lines(served, options, checked, [], url, "local"):
            say(line)
        say("Serving until Ctrl-C.")

    serve_here(app, options.host, options.port, options.verbose, ready)
    say("Stopped.")


def serve_on_ray(path: Path, options: ServeOptions, checked: Checked, say: Any) -> None:
    """The Ray Serve engine; embedded, until Ctrl-C (or SIGTERM)."""
    serve = require_serve()
    local = embedded(options.address)
    if local:
        placement = check_placement(checked, local_machine())
        if not port_is_free(options.host, options.port):
            raise UserError(
                f"port {options.port} on {options.host} is in use (another rlplat "
                "serve or Ray Serve?): pick another with --port."
            )
    served = served_policy(path, options, say)
    # Serve's controller and proxy outlive their command on a Ray that stays up: a Ray of its own.
    start_ray(options.address, options.verbose, keep_warm=False)
    quiet_serve_logs(options.verbose)
    if not local:
        placement = check_placement(checked, cluster_nodes())
    # Imported here: Ray Serve's deployments load with the optional serve extra only.
    from rlplat.serve.app import build_app  # noqa: PLC0415

    app = build_app(
        served.manifest,
        served.graphs,
        {**served.about, "backend": options.backend, "engine": "ray"},
        backend=options.backend,
        replicas=checked.replicas,
        actor_options=checked.actor_options,
        max_batch_size=options.max_batch_size,
        batch_wait_s=options.batch_wait_ms / 1000,
        token=checked.token,
        max_body=options.max_body,
        max_sessions=options.max_sessions,
        session_ttl_s=options.session_ttl_s,
    )
    logging_config = {
        "enable_access_log": options.verbose,
        "log_level": "INFO" if options.verbose else "WARNING",
    }
    try:
        serve.start(
            http_options={"host": options.host, "port": options.port}, logging_config=logging_config
        )
        host, port = proxy_address(serve, options)
        if (host, port) != (options.host, options.port):
            say(
                f"Ray Serve already runs on this cluster with its proxies on {host}:{port}; the "
                "application goes there (--host and --port apply when Serve starts)."
            )
        _run_application(serve, app, options.name, logging_config)
        quiet_serve_logs(options.verbose)
        wait_healthy(url_of(host, port, public=False))
        for line in summary_lines(
            served, options, checked, placement, url_of(host, port, public=True), "ray"
        ):
            say(line)
        metrics = metrics_url()
        if metrics:
            say(f"Metrics (Prometheus, this node): {metrics} (ray_serve_*, ray_rlplat_serve_*)")
        if not local:
            say(
                f"The application {options.name!r} runs on the cluster until: rlplat serve "
                f"--stop --name {options.name} --address {options.address or '$RAY_ADDRESS'}"
            )
            return
        say("Serving until Ctrl-C.")
        _wait_for_interrupt()
        say("Stopping...")
    finally:
        if local:
            _shut_down(serve, options.verbose)
    say("Stopped.")


def _shut_down(serve: Any, verbose: bool) -> None:
    """Drain and stop Serve, then the local Ray. Ray's driver prints the internal errors of its
    own teardown (a controller task retried as it is killed): only --verbose shows them."""
    import ray  # noqa: PLC0415 - loaded with Serve already

    quiet = contextlib.nullcontext() if verbose else contextlib.redirect_stdout(io.StringIO())
    with quiet, contextlib.redirect_stderr(sys.stderr if verbose else io.StringIO()):
        serve.shutdown()
        ray.shutdown()


def _run_application(serve: Any, app: Any, name: str, logging_config: dict[str, Any]) -> None:
    """Deploy (or update) the application ``name`` at the route prefix /."""
    from ray.serve.exceptions import RayServeException  # noqa: PLC0415

    try:
        serve.run(app, name=name, route_prefix="/", logging_config=logging_config)
    except RayServeException as exc:
        raise UserError(
            f"Ray Serve refused the application {name!r}: {exc}. Another application on this "
            "cluster may hold the route prefix / (rlplat serve --stop --name <it> removes one "
            "that rlplat deployed)."
        ) from None


def quiet_serve_logs(verbose: bool) -> None:
    """Serve's own log lines (started, deployed, ready) only with ``--verbose``."""
    logging.getLogger("ray.serve").setLevel(logging.INFO if verbose else logging.ERROR)


def metrics_url() -> str | None:
    """This node's Prometheus endpoint, where Ray exports Serve's metrics (None: not known)."""
    import ray  # noqa: PLC0415 - loaded with Serve already

    here = ray.util.get_node_ip_address()
    for node in ray.nodes():
        if node["Alive"] and node["NodeManagerAddress"] == here and node.get("MetricsExportPort"):
            return f"http://{here}:{node['MetricsExportPort']}/metrics"
    return None


def _wait_for_interrupt() -> None:
    # Ctrl-C, and kill <pid>, stop cleanly (also when started where SIGINT is ignored, as
    # background jobs of a non-interactive shell are).
    for stop_signal in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop_signal, signal.default_int_handler)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return


def stop_application(options: ServeOptions, say: Any) -> None:
    """Remove the application ``options.name`` from the running cluster."""
    if cluster_address(options.address) is None:
        raise UserError(
            "--stop removes an application that rlplat serve --address deployed onto a running "
            "Ray cluster: give that --address (auto, or host:port). An embedded rlplat serve "
            "stops with Ctrl-C."
        )
    serve = require_serve()
    start_ray(options.address, options.verbose)
    try:
        applications = list(serve.status().applications)
    except Exception as exc:  # noqa: BLE001 - Serve raises various errors when it is not running
        raise UserError(f"Ray Serve does not answer on that cluster: {exc}") from None
    if options.name not in applications:
        known = ", ".join(applications) or "none"
        raise UserError(
            f"no Serve application named {options.name!r} on the cluster"
            f"{did_you_mean(options.name, applications)} (applications: {known})."
        )
    serve.delete(options.name)
    say(f"Removed the application {options.name!r} from the cluster.")
