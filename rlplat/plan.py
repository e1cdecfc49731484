"""``rlplat plan`` and the check ``rlplat train`` runs first: resource preferences resolved
against the cluster, each trial's bundles, where they fit and how many trials run at once."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from rlplat.config.load import LoadedExperiment, experiment_from_data
from rlplat.config.schema import TuneSpec
from rlplat.errors import UserError
from rlplat.placement import (
    Bundle,
    Node,
    Plan,
    fits_in,
    format_bundle,
    make_plan,
    missing_resources,
    trial_bundles,
)

PREFERENCE_GROUPS = ("env_runners", "learners")


@dataclass
class ResourceChoice:
    """Which entry of a ``prefer`` list won, and why the ones before it lost."""

    group: str
    index: int  # of the chosen entry
    chosen: dict[str, Any]  # the group's cpus/gpus/custom after the choice
    passed_over: list[str]  # one line per earlier entry: what no node offers

    def describe(self) -> str:
        skipped = f" ({'; '.join(self.passed_over)})" if self.passed_over else ""
        custom = self.chosen["custom"] or "{}"
        return (
            f"resources.{self.group}.prefer: entry {self.index + 1} wins{skipped}: "
            f"cpus {self.chosen['cpus']}, gpus {self.chosen['gpus']}, custom {custom}"
        )


def _unit_bundle(fields: dict[str, Any]) -> Bundle:
    """What one env runner or learner asks for (RLlib's rule for learners' cpus: auto)."""
    cpus = fields["cpus"]
    if cpus == "auto":
        cpus = 0 if fields["gpus"] else 1
    return {"CPU": cpus, "GPU": fields["gpus"], **fields["custom"]}


def _missing(bundle: Bundle, nodes: list[Node]) -> str:
    names = missing_resources(bundle, nodes)
    return f"no node has enough {', '.join(names)}" if names else "no node holds all of it"


def resolve_preferences(
    data: dict[str, Any], nodes: list[Node]
) -> tuple[dict[str, Any], list[ResourceChoice]]:
    """Replace each ``prefer`` list by the first entry some node can hold (in place)."""
    choices = []
    for group in PREFERENCE_GROUPS:
        fields = data["resources"][group]
        options = fields.get("prefer") or []
        if not options:
            continue
        passed_over = []
        for index, option in enumerate(options):
            candidate = {**fields, **{k: v for k, v in option.items() if v is not None}}
            bundle = _unit_bundle(candidate)
            if any(fits_in(bundle, node.total) for node in nodes):
                fields.update(candidate, prefer=[])
                chosen = {key: fields[key] for key in ("cpus", "gpus", "custom")}
                choices.append(ResourceChoice(group, index, chosen, passed_over))
                break
            passed_over.append(
                f"entry {index + 1} {format_bundle(bundle)}: {_missing(bundle, nodes)}"
            )
        else:
            raise UserError(
                f"resources.{group}.prefer: no entry fits a node of this cluster ("
                + "; ".join(passed_over)
                + "). End the list with an entry every node offers, such as {} (the group's own "
                "cpus/gpus/custom) or {cpus: 1}."
            )
    return data, choices


def trial_count(loaded: LoadedExperiment) -> int:
    """Trials the experiment runs in all: num_samples for each point of its grid."""
    tune_spec = loaded.experiment.tune or TuneSpec()
    grid = math.prod(len(space.args) for space in loaded.spaces if space.kind == "grid")
    return tune_spec.num_samples * grid


@dataclass
class ResolvedRun:
    """The experiment with its preferences resolved, and its plan on the cluster."""

    loaded: LoadedExperiment
    choices: list[ResourceChoice]
    plan: Plan

    def record(self) -> dict[str, Any]:
        """What run.json keeps: the nodes seen at launch, the choices, the bundles."""
        return {
            "nodes": [
                {"node_id": n.node_id, "address": n.address, "head": n.head, "resources": n.total}
                for n in self.plan.nodes
            ],
            "resource_choices": [asdict(choice) for choice in self.choices],
            "placement_strategy": self.plan.strategy,
            "trial_bundles": [asdict(bundle) for bundle in self.plan.bundles],
        }


def plan_run(loaded: LoadedExperiment) -> ResolvedRun:
    """Resolve preferences against the connected cluster and plan the trials (Ray is running)."""
    from rlplat.placement import cluster_nodes
    from rlplat.trainable import trainable_for

    nodes = cluster_nodes()
    data, choices = resolve_preferences(loaded.resolved(), nodes)
    if choices:
        loaded = experiment_from_data(data, loaded.locate)
    tune_spec = loaded.experiment.tune or TuneSpec()
    bundles, strategy = trial_bundles(
        loaded.algo_config, trainable_for(loaded.experiment.algorithm)
    )
    plan = make_plan(bundles, strategy, nodes, trial_count(loaded), tune_spec.max_concurrent)
    return ResolvedRun(loaded, choices, plan)


def storage_note(run: ResolvedRun) -> str | None:
    """On several nodes, trials write checkpoints from wherever they run: say where that must be."""
    if len(run.plan.nodes) < 2:
        return None
    return (
        f"{len(run.plan.nodes)} nodes: output_dir ({run.loaded.experiment.output_dir}) must be a "
        "directory every node mounts at the same path (NFS, a shared volume); Tune cannot "
        "checkpoint trials on other nodes into a path only this machine has."
    )


def refuse_if_impossible(run: ResolvedRun) -> None:
    """A run that would stay PENDING forever is a user error, said before anything starts."""
    plan = run.plan
    if plan.fits:
        return
    nodes = "; ".join(f"{node.label} {format_bundle(node.total)}" for node in plan.nodes)
    raise UserError(
        f"{run.loaded.locate('resources')}: no trial can start on this Ray cluster: "
        + "; ".join(plan.problems)
        + f". The cluster's nodes: {nodes}. Lower the demand under resources (count, cpus, gpus, "
        "custom; count 0 samples in the algorithm's own process), add a prefer list that falls "
        "back to what the nodes have, or join a cluster that has it with --address (see "
        "docs/cluster.md)."
    )


def print_plan(run: ResolvedRun, console: Console) -> None:
    """The bundles of one trial, the nodes, where the trial goes and how many run at once."""
    plan = run.plan
    for choice in run.choices:
        console.print(choice.describe(), highlight=False)
    bundles = Table(title=f"Bundles of one trial (placement {plan.strategy})", title_justify="left")
    for column in ("#", "role", "set by", "resources", "node"):
        bundles.add_column(column)
    for index, bundle in enumerate(plan.bundles):
        node = plan.nodes[plan.placement[index]].label if plan.placement else "-"
        bundles.add_row(str(index), bundle.role, bundle.key, format_bundle(bundle.resources), node)
    console.print(bundles)
    nodes = Table(title=f"Cluster: {len(plan.nodes)} node(s)", title_justify="left")
    for column in ("node", "resources", "free now"):
        nodes.add_column(column)
    for node in plan.nodes:
        nodes.add_row(node.label, format_bundle(node.total), format_bundle(node.available))
    console.print(nodes)
    note = storage_note(run)
    if note:
        console.print(f"[yellow]{note}[/yellow]", highlight=False)
    if not plan.fits:
        return
    if plan.undecided:
        console.print(
            "Fit: undecided (too many bundle/node combinations to check); Ray may still place it.",
            highlight=False,
        )
        return
    limit = (
        f", tune.max_concurrent {plan.max_concurrent}"
        if plan.max_concurrent and plan.max_concurrent < plan.trials
        else ""
    )
    console.print(
        f"Fits: yes. Trials: {plan.trials}; at once: {plan.concurrent} on this cluster{limit}; "
        f"{plan.startable_now} could start on the resources free now.",
        highlight=False,
    )
