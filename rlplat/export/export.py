"""``rlplat export``: a checkpoint's policy as ONNX files, a manifest and a parity certificate.

    <out>/policy.onnx        one graph per policy (multi-agent: <policy_id>.onnx)
    <out>/policy.json        the manifest: env recipe, spaces, agent -> policy, inputs and
                             outputs, the checkpoint and its training metrics, versions
    <out>/parity.json        the certificate (rlplat.export.parity)
    <out>/experiment.yaml    the run's resolved experiment (rlplat eval rebuilds the env from it)

Everything is written into a hidden sibling directory first and renamed into place at the end,
so an ``<out>`` that exists is never touched (the export gets the next free sibling name) and an
export that fails before its certificate leaves nothing behind. A failed certificate keeps the
files, for inspection, with ``"verified": false`` in the manifest.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import shutil
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import gymnasium as gym
import onnx
import torch
from ray.rllib.core import DEFAULT_MODULE_ID

from rlplat.algorithms.registry import AlgorithmRecord, algorithm_record, is_team_algorithm
from rlplat.checkpoints import RESOLVED_EXPERIMENT, find_checkpoint
from rlplat.environments.team import TEAM_SETTINGS
from rlplat.errors import RlplatError, UserError
from rlplat.experiment.load import load_experiment
from rlplat.export.graph import GraphParts, Unsupported, build_graph, describe_action
from rlplat.export.options import ExportOptions
from rlplat.export.parity import Certificate, certify
from rlplat.export.team import agent_graph
from rlplat.policy.exported import export_actor
from rlplat.policy.restore import MODULES_DIR, Policy
from rlplat.policy.rollout import Stats
from rlplat.rllib.env_creator import rebuild_env
from rlplat.rllib.modules import UniformRandomModule
from rlplat.rllib.multi_agent import PolicyMapping, mapping_for
from rlplat.runtime import (
    MANIFEST,
    PARITY,
    CheckpointRef,
    EnvRecord,
    ExperimentRef,
    GraphInput,
    Manifest,
    PolicySpec,
    TensorInfo,
)
from rlplat.util.atomic import write_atomic
from rlplat.util.disk import free_space, storage_reason
from rlplat.util.paths import publish_dir
from rlplat.util.versions import versions

OPSET = 17


class ParityFailed(RlplatError):
    """The export does not act like the checkpoint (exit 1)."""


@dataclass
class ExportReport:
    directory: Path
    checkpoint: Path
    files: list[str]
    certificate: Certificate | None
    seconds: float
    graphs: dict[str, torch.nn.Module] = field(default_factory=dict, repr=False)  # by policy

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "checkpoint": str(self.checkpoint),
            "files": self.files,
            "parity": self.certificate.to_json() if self.certificate else {"verified": False},
            "seconds": round(self.seconds, 3),
        }


def check_options(options: ExportOptions) -> None:
    if options.episodes < 1:
        raise UserError(f"--episodes must be at least 1, got {options.episodes}.")
    if options.tolerance < 0:
        raise UserError(f"--tolerance must be 0 or more, got {options.tolerance}.")
    if not 0.0 <= options.min_agreement <= 1.0:
        raise UserError(f"--min-agreement must be between 0 and 1, got {options.min_agreement}.")
    out = options.out
    if out is not None and out.exists() and not out.is_dir():
        raise UserError(
            f"--out {out} is an existing file; give a directory path to export into (created if "
            "missing; an existing directory is never touched: the export then goes to the next "
            f"free sibling name, such as {out.name}-1)."
        )


def export(
    path: Path, options: ExportOptions, *, say: Callable[[str], None] = print
) -> ExportReport:
    """Export the checkpoint ``path`` designates (a checkpoint, trial, run or experiment dir)."""
    start = time.perf_counter()
    check_options(options)
    picked = find_checkpoint(path, last=options.last)
    say(f"Checkpoint: {picked.path}\n  ({picked.why})")
    experiment_file = picked.experiment_file
    if experiment_file is None:
        raise UserError(
            f"no experiment.yaml next to {picked.path} or in its run directory, so its "
            "environment and policy mapping are unknown. Copy the run's experiment.yaml into the "
            "checkpoint directory."
        )
    experiment = load_experiment(experiment_file).experiment
    team = is_team_algorithm(experiment.algorithm)
    env = _env_or_none(experiment, experiment_file, options.verify or team)
    out = options.out or Path("exported") / experiment.name
    with _said_if_the_disk_fails(out), contextlib.ExitStack() as cleanup:
        if env is not None:
            cleanup.callback(env.close)
        mapping = (
            mapping_for(experiment, env)
            if env is not None
            else _mapping_without_env(experiment, picked.path)
        )
        policy = Policy.from_checkpoint(picked.path, mapping)
        graphs = _graphs(policy, env, algorithm_record(experiment.algorithm))
        draft = cleanup.enter_context(publish_dir(out))  # published as the block ends
        staging = draft.path
        onnx_specs = {
            pid: _write_onnx(parts, staging / _file_name(pid, policy))
            for pid, parts in graphs.items()
            if parts is not None
        }
        shutil.copyfile(experiment_file, staging / RESOLVED_EXPERIMENT)
        manifest = _manifest(experiment, picked, policy, graphs, onnx_specs, team, env)
        write_atomic(staging / MANIFEST, json.dumps(manifest.to_json(), indent=2) + "\n")
        certificate = None
        if options.verify:
            say(
                f"Parity: {options.episodes} seeded episode(s) with the checkpoint, then with "
                "the ONNX export..."
            )
            certificate = certify(
                policy.actor(),
                export_actor(staging, manifest),
                env,
                episodes=options.episodes,
                seed=options.seed,
                tolerance=options.tolerance,
                min_agreement=options.min_agreement,
                skip_agents=manifest.random_agents,
                not_compared=[f"{pid} (random)" for pid, parts in graphs.items() if parts is None],
            )
            parity = certificate.to_json()
        else:
            parity = {"verified": False, "reason": "exported with --no-verify"}
        manifest.verified = bool(certificate and certificate.passed)
        write_atomic(staging / PARITY, json.dumps(parity, indent=2) + "\n")
        write_atomic(staging / MANIFEST, json.dumps(manifest.to_json(), indent=2) + "\n")
    directory = draft.destination
    report = ExportReport(
        directory=directory,
        checkpoint=picked.path,
        files=sorted(p.name for p in directory.iterdir()),
        certificate=certificate,
        seconds=time.perf_counter() - start,
        graphs={pid: parts.graph for pid, parts in graphs.items() if parts is not None},
    )
    if certificate is not None and not certificate.passed:
        raise ParityFailed(parity_failure(report))
    return report


@contextlib.contextmanager
def _said_if_the_disk_fails(out: Path) -> Iterator[None]:
    """A disk that fails while the export is written is one paragraph: nothing was published
    (the draft is removed as the export's block ends), an earlier export is untouched."""
    try:
        yield
    except Exception as exc:  # torch and onnx wrap the OSError in their own errors
        reason = storage_reason(exc)
        if reason is None:
            raise
        raise RlplatError(
            f"exporting to {out} failed: {reason}{free_space(out.parent, reason)}. Nothing was "
            "published: an export made before under that name is intact, and the half-written "
            "files were removed. Free some space (or make the directory writable) and export "
            "again."
        ) from None


def print_export(report: ExportReport, console: Any) -> None:
    """Where the files went and what the certificate says."""
    console.print(f"Exported to {report.directory}: {', '.join(report.files)}", highlight=False)
    cert = report.certificate
    if cert is None:
        console.print("Not verified (--no-verify): no parity certificate.", highlight=False)
    else:
        returns = (
            f"return {Stats.of(cert.checkpoint_returns).mean:.2f} (checkpoint) vs "
            f"{Stats.of(cert.onnx_returns).mean:.2f} (ONNX)"
        )
        ties = f" ({cert.near_ties} near-ties the checkpoint scores alike)" * bool(cert.near_ties)
        console.print(
            f"Parity: passed. {cert.compared_actions} visited observations over "
            f"{cert.episodes} episode(s) x 2, actions agree on {cert.agreement:.2%}{ties}, "
            f"largest difference {cert.max_abs_diff:.3g}; {returns}.",
            highlight=False,
        )
    console.print(f"Took {report.seconds:.1f} s. Next:", highlight=False)
    console.print(f"  rlplat eval {report.directory}", highlight=False)
    console.print(
        f"  python -c \"from rlplat.runtime import load; p = load('{report.directory}')\"",
        highlight=False,
    )


def parity_failure(report: ExportReport) -> str:
    cert = report.certificate
    first = cert.first_disagreement or {}
    return (
        f"the export in {report.directory} does not act like the checkpoint {report.checkpoint}: "
        f"the actions agree on {cert.agreement:.2%} of {cert.compared_actions} visited "
        f"observations (needed: {cert.min_agreement:.2%}; continuous actions within "
        f"{cert.tolerance:g}, largest difference {cert.max_abs_diff:.3g}). First difference: "
        f"{json.dumps(first)}. The files are kept for inspection (parity.json); do not deploy "
        "them. --tolerance and --min-agreement loosen the test."
    )


def _env_or_none(experiment: Any, source: Path, needed: bool) -> Any:
    try:
        return rebuild_env(experiment, None, source)
    except UserError as exc:
        if needed:
            raise UserError(
                f"{exc} The parity episodes need the environment: install what it needs, or "
                "export with --no-verify (no certificate; the manifest says so)."
            ) from None
        return None


def _mapping_without_env(experiment: Any, checkpoint: Path) -> PolicyMapping | None:
    if (checkpoint / MODULES_DIR / DEFAULT_MODULE_ID).is_dir():
        return None
    policies = experiment.multi_agent.policies if experiment.multi_agent else "shared"
    return PolicyMapping(policies)


def _graphs(policy: Policy, env: Any, record: AlgorithmRecord) -> dict[str, GraphParts | None]:
    """The acting graph of every policy (None for a random policy, which has no network), as
    the algorithm's registration says its modules act."""
    if record.view == "team":
        return {DEFAULT_MODULE_ID: agent_graph(policy.module, env)}
    acting = {
        "q_values": record.export_acting == "q_values",
        "epsilon_greedy": record.epsilon_greedy,
    }
    spaces_in = policy.env_to_module.input_observation_space
    actions_in = policy.env_to_module.input_action_space
    if not policy.multi_agent:
        return {
            DEFAULT_MODULE_ID: build_graph(
                policy.module,
                spaces_in,
                actions_in,
                policy.env_to_module,
                policy.module_to_env,
                **acting,
            )
        }
    agents_of: dict[str, list[str]] = {}
    for agent in spaces_in.spaces:
        pid = policy.mapping(agent)
        if pid is not None:
            agents_of.setdefault(pid, []).append(agent)
    filtered = any(type(p).__name__ == "MeanStdFilter" for p in policy.env_to_module.connectors)
    graphs: dict[str, GraphParts | None] = {}
    for pid, agents in agents_of.items():
        agent = agents[0]
        module = policy.module[pid]
        if isinstance(module, UniformRandomModule):
            if not isinstance(actions_in[agent], gym.spaces.Discrete):
                raise Unsupported(
                    f"the random policy {pid!r} acts in {actions_in[agent]}; an export's random "
                    "policies support Discrete actions only"
                )
            graphs[pid] = None
            continue
        if filtered and len(agents) > 1:
            raise Unsupported(
                f"the policy {pid!r} plays {', '.join(agents)} with a mean_std_filter, which "
                "keeps its statistics per agent: one graph cannot hold them all"
            )
        graphs[pid] = build_graph(
            module,
            spaces_in[agent],
            actions_in[agent],
            policy.env_to_module,
            policy.module_to_env,
            agent=agent,
            **acting,
        )
    return graphs


def _file_name(policy_id: str, policy: Policy) -> str:
    return f"{policy_id}.onnx" if policy.multi_agent else "policy.onnx"


def _write_onnx(parts: GraphParts, path: Path) -> PolicySpec:
    """Export the graph with batch as the dynamic first axis, check it with onnx's full checker;
    the policy's spec: the file, its inputs and outputs as the ONNX model declares them, and what
    ``parts`` says of its action, state, frames and exploration."""
    examples = tuple(torch.zeros((2, *entry.shape), dtype=torch.float32) for entry in parts.inputs)
    names = [entry.name for entry in parts.inputs]
    outputs = parts.outputs
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        # The TorchScript exporter: torch.export (dynamo=True) cannot trace RLlib's modules
        # (their forward passes branch on Python dicts of columns).
        try:
            torch.onnx.export(
                parts.graph,
                examples,
                str(path),
                input_names=names,
                output_names=outputs,
                dynamic_axes={name: {0: "batch"} for name in [*names, *outputs]},
                opset_version=OPSET,
                dynamo=False,
            )
        except Exception as exc:  # noqa: BLE001 - the exporter raises many types
            first_line = (str(exc).strip().splitlines() or [""])[0]
            raise Unsupported(
                f"torch's ONNX exporter cannot write the graph for {path.stem}: "
                f"{type(exc).__name__}: {first_line}"
            ) from None
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    declared = {entry.name: entry for entry in parts.inputs}
    inputs = []
    for value in model.graph.input:
        info, entry = _value_info(value), declared[value.name]
        observation_range = list(entry.observation_range) if entry.observation_range else None
        inputs.append(
            GraphInput(
                info.name,
                info.shape,
                info.dtype,
                entry.path,
                entry.observation_dtype,
                observation_range,
            )
        )
    return PolicySpec(
        kind="onnx",
        action=parts.action,
        file=path.name,
        opset=model.opset_import[0].version,
        inputs=inputs,
        outputs=[_value_info(v) for v in model.graph.output],
        state=parts.state,
        frame_stack=parts.frame_stack,
        exploration=parts.exploration,
    )


def _value_info(value: Any) -> TensorInfo:
    tensor = value.type.tensor_type
    return TensorInfo(
        value.name,
        [d.dim_param or d.dim_value for d in tensor.shape.dim],
        onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name,
    )


def _nanmean(g: Any, x: Any, dim: Any, keepdim: Any, dtype: Any) -> Any:
    """ONNX for ``aten::nanmean`` (RLlib's dueling DQN head uses it; the exporter has none):
    the sum of the non-NaN entries over their count."""
    from torch.onnx import symbolic_helper  # noqa: PLC0415 - private, used only here

    axes = g.op("Constant", value_t=torch.tensor(symbolic_helper._get_const(dim, "is", "dim")))
    keep = int(symbolic_helper._get_const(keepdim, "i", "keepdim"))
    missing = g.op("IsNaN", x)
    zero = g.op("Constant", value_t=torch.tensor(0.0))
    present = g.op("Cast", g.op("Not", missing), to_i=1)  # 1 = float
    total = g.op("ReduceSum", g.op("Where", missing, zero, x), axes, keepdims_i=keep)
    count = g.op("ReduceSum", present, axes, keepdims_i=keep)
    return g.op("Div", total, count)


torch.onnx.register_custom_op_symbolic("aten::nanmean", _nanmean, OPSET)


def _space_text(space: Any) -> Any:
    if hasattr(space, "spaces") and isinstance(space.spaces, dict):
        return {str(key): _space_text(sub) for key, sub in space.spaces.items()}
    return str(space)


def _manifest(
    experiment: Any,
    picked: Any,
    policy: Policy,
    graphs: dict[str, GraphParts | None],
    onnx_specs: dict[str, PolicySpec],
    team: bool,
    env: Any,
) -> Manifest:
    """The manifest, not yet verified (``verified`` is set once the certificate passes)."""
    policies: dict[str, PolicySpec] = {}
    for pid, parts in graphs.items():
        if parts is None:
            policies[pid] = PolicySpec(
                kind="random",
                action=describe_action(policy.module[pid].action_space),
                observation_keys=list(
                    getattr(policy.module[pid].observation_space, "spaces", {}) or []
                ),
                note="uniformly random among the legal actions; no network",
            )
            continue
        policies[pid] = onnx_specs[pid]
    if team:
        agents = dict.fromkeys(env.members, DEFAULT_MODULE_ID)
    elif policy.multi_agent:
        agents = {
            str(agent): policy.mapping(agent)
            for agent in policy.env_to_module.input_observation_space.spaces
        }
    else:
        agents = None
    info = picked.info
    return Manifest(
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        experiment=ExperimentRef(
            experiment.name, experiment.algorithm, experiment.seed, RESOLVED_EXPERIMENT
        ),
        env=EnvRecord(
            label=experiment.env.label,
            recipe=experiment.env.model_dump(mode="json"),
            team={
                key: experiment.training[key] for key in TEAM_SETTINGS if key in experiment.training
            }
            if team
            else None,
            observation_space=_space_text(policy.env_to_module.input_observation_space),
            action_space=_space_text(policy.env_to_module.input_action_space),
        ),
        multi_agent=agents is not None,
        team=team,
        agents=agents,
        policies=policies,
        checkpoint=CheckpointRef(str(picked.path), picked.why),
        training=asdict(info) if info else None,
        versions={**versions(), **_export_versions()},
    )


def _export_versions() -> dict[str, str]:
    found = {}
    for package in ("onnx", "onnxruntime"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found
