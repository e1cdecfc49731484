"""Fitting a trial's resource bundles onto the nodes of a Ray cluster, before anything waits.

Tune gives each trial one Ray placement group: the algorithm's own bundle, then one bundle per
env runner (and evaluation env runner) and per learner, placed by the experiment's strategy.
Ray keeps a placement group that no node set can hold PENDING forever; this module finds out
first, from the nodes' total resources, and says which resource is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ray

from rlplat.rllib.build import resource_request
from rlplat.seams.ray_internals import available_resources_per_node, machine_cpus, machine_gpus

Bundle = dict[str, float]

# Ray's bookkeeping resources: not something a bundle asks for.
_HIDDEN_PREFIXES = ("node:", "accelerator_type:")
_HIDDEN = ("memory", "object_store_memory")
_EPS = 1e-9
# Backtracking over bundle -> node assignments stops after this many steps and says "unknown".
_SEARCH_BUDGET = 200_000


@dataclass
class Node:
    """An alive node of the cluster and the resources it declares."""

    node_id: str
    address: str
    head: bool
    total: Bundle
    available: Bundle

    @property
    def label(self) -> str:
        return f"{self.address} ({self.node_id[:8]}{', head' if self.head else ''})"


def _schedulable(resources: dict[str, float]) -> Bundle:
    """Resources a bundle can ask for, CPU and GPU first, then by name (Ray's order varies)."""
    names = [n for n in resources if n not in _HIDDEN and not n.startswith(_HIDDEN_PREFIXES)]
    order = sorted(names, key=lambda name: (name not in ("CPU", "GPU"), name))
    return {name: float(resources[name]) for name in order}


def cluster_nodes() -> list[Node]:
    """The alive nodes of the connected Ray cluster, head first."""
    available = _available_per_node()
    nodes = [
        Node(
            node_id=info["NodeID"],
            address=info["NodeManagerAddress"],
            head="node:__internal_head__" in info["Resources"],
            total=_schedulable(info["Resources"]),
            available=available.get(info["NodeID"], _schedulable(info["Resources"])),
        )
        for info in ray.nodes()
        if info["Alive"]
    ]
    return sorted(nodes, key=lambda node: (not node.head, node.address, node.node_id))


LOCAL_NODE_ID = "local"  # the node of an embedded Ray not started yet (local_machine)


def only_this_machine(nodes: list[Node]) -> bool:
    """Whether ``nodes`` (an embedded Ray's, or the connected cluster's) are one node, the one
    this process runs on."""
    if len(nodes) != 1:
        return False
    node_id = nodes[0].node_id
    return node_id == LOCAL_NODE_ID or node_id == ray.get_runtime_context().get_node_id()


def local_machine() -> list[Node]:
    """The one node an embedded local Ray would have, found the way Ray finds it, without
    starting Ray: a demand it cannot meet is refused in the time the other checks take."""
    total = {"CPU": float(machine_cpus())}
    gpus = machine_gpus()
    if gpus:
        total["GPU"] = float(gpus)
    return [Node(LOCAL_NODE_ID, "this machine", True, total, dict(total))]


def _available_per_node() -> dict[str, Bundle]:
    """Free resources per node id, from the GCS (no dashboard needed); {} where not readable."""
    try:
        return {
            node_id: _schedulable(resources)
            for node_id, resources in available_resources_per_node().items()
        }
    except Exception:  # noqa: BLE001 - a private API: the plan then shows totals only
        return {}


def fits_in(bundle: Bundle, capacity: Bundle) -> bool:
    return all(
        amount <= capacity.get(name, 0.0) + _EPS for name, amount in bundle.items() if amount
    )


def _take(bundle: Bundle, capacity: Bundle, sign: float) -> None:
    for name, amount in bundle.items():
        if amount:
            capacity[name] = capacity.get(name, 0.0) - sign * amount


def _sum(bundles: list[Bundle]) -> Bundle:
    total: Bundle = {}
    for bundle in bundles:
        for name, amount in bundle.items():
            total[name] = total.get(name, 0.0) + amount
    return total


def place(bundles: list[Bundle], strategy: str, capacities: list[Bundle]) -> list[int] | None:
    """Node index for each bundle, or None when the bundles cannot all be placed.

    ``capacities`` are consumed when a placement is found (so repeated calls place repeated
    trials). Raises ``SearchExhausted`` if the search gave up before deciding.
    """
    if strategy == "STRICT_PACK":
        return _pack_on_one_node(bundles, capacities)
    if strategy == "PACK":  # Ray tries one node first, then any placement
        packed = _pack_on_one_node(bundles, capacities)
        if packed is not None:
            return packed
    return _search(bundles, capacities, spread=strategy == "STRICT_SPREAD")


def _pack_on_one_node(bundles: list[Bundle], capacities: list[Bundle]) -> list[int] | None:
    need = _sum(bundles)
    for index, capacity in enumerate(capacities):
        if fits_in(need, capacity):
            _take(need, capacity, 1)
            return [index] * len(bundles)
    return None


def _search(bundles: list[Bundle], capacities: list[Bundle], *, spread: bool) -> list[int] | None:
    """Depth-first placement, largest bundles first; ``spread``: one bundle per node."""
    order = sorted(range(len(bundles)), key=lambda i: -sum(bundles[i].values()))
    assignment: list[int] = [-1] * len(bundles)
    steps = 0

    def search(position: int) -> bool:
        nonlocal steps
        if position == len(order):
            return True
        bundle = bundles[order[position]]
        tried: list[Bundle] = []
        for index, capacity in enumerate(capacities):
            steps += 1
            if steps > _SEARCH_BUDGET:
                raise SearchExhausted
            if spread and index in assignment:
                continue
            if not fits_in(bundle, capacity) or capacity in tried:  # same free space: same outcome
                continue
            tried.append(dict(capacity))
            _take(bundle, capacity, 1)
            assignment[order[position]] = index
            if search(position + 1):
                return True
            _take(bundle, capacity, -1)
            assignment[order[position]] = -1
        return False

    return assignment if search(0) else None


class SearchExhausted(Exception):
    """The bundle placement search gave up before finding a placement or proving none exists."""


@dataclass
class LabelledBundle:
    """A bundle of a trial's placement group and where in the experiment it comes from."""

    role: str  # driver, env runner, evaluation env runner, learner
    key: str  # the experiment key that sets it
    resources: Bundle


@dataclass
class Plan:
    """What one trial asks for and how the cluster can hold it."""

    strategy: str
    bundles: list[LabelledBundle]
    nodes: list[Node]
    trials: int  # trials the experiment will run in all (num_samples x grid)
    max_concurrent: int | None
    placement: list[int] | None = None  # node index per bundle on an empty cluster
    undecided: bool = False  # the placement search gave up: Ray may or may not place it
    problems: list[str] = field(default_factory=list)
    concurrent: int = 0  # trials that run at once on an empty cluster
    startable_now: int = 0  # trials that could start on the currently free resources

    @property
    def fits(self) -> bool:
        return not self.problems


def trial_bundles(config: Any, algo_cls: type) -> tuple[list[LabelledBundle], str]:
    """The placement group bundles RLlib asks Tune for, each labelled with its YAML key."""
    request = resource_request(config, algo_cls)
    bundles = [_schedulable(bundle) for bundle in request.bundles]
    runners = config.num_env_runners
    learners = config.num_learners
    data = [("offline data pipeline", "offline_data.map_batches_kwargs")] * config.is_offline
    roles = (
        [("driver", "resources.driver")]
        + [("env runner", "resources.env_runners")] * runners
        + [("evaluation env runner", "evaluation.evaluation_num_env_runners")]
        * (len(bundles) - 1 - runners - learners - len(data))
        + [("learner", "resources.learners")] * learners
        + data
    )
    labelled = [
        LabelledBundle(role, key, {name: amount for name, amount in bundle.items() if amount})
        for (role, key), bundle in zip(roles, bundles, strict=True)
    ]
    return labelled, request.strategy


def make_plan(
    bundles: list[LabelledBundle],
    strategy: str,
    nodes: list[Node],
    trials: int,
    max_concurrent: int | None,
) -> Plan:
    """Check the bundles against the nodes: what is missing, where they go, how many trials
    fit at once."""
    plan = Plan(strategy, bundles, nodes, trials, max_concurrent)
    plan.problems = _impossible(bundles, strategy, nodes)
    if plan.problems:
        return plan
    demand = [bundle.resources for bundle in bundles]
    limit = min(trials, max_concurrent or trials)
    try:
        capacities = [dict(node.total) for node in nodes]
        plan.placement = place(demand, strategy, capacities)
        if plan.placement is None:
            plan.problems.append(_no_placement_reason(bundles, strategy, nodes))
            return plan
        plan.concurrent = 1 + _count_copies(demand, strategy, capacities, limit - 1)
        free = [dict(node.available) for node in nodes]
        plan.startable_now = _count_copies(demand, strategy, free, limit)
    except SearchExhausted:
        plan.undecided = True
    return plan


def _count_copies(demand: list[Bundle], strategy: str, capacities: list[Bundle], limit: int) -> int:
    copies = 0
    while copies < limit and place(demand, strategy, capacities) is not None:
        copies += 1
    return copies


def format_bundle(bundle: Bundle) -> str:
    return "{" + ", ".join(f"{name}: {amount:g}" for name, amount in bundle.items()) + "}"


def describe_nodes(nodes: list[Node]) -> str:
    """Each node and its total resources, for a message saying what the cluster has."""
    return "; ".join(f"{node.label} {format_bundle(node.total)}" for node in nodes)


def missing_resources(bundle: Bundle, nodes: list[Node]) -> list[str]:
    """The resources of ``bundle`` that no node has enough of on its own."""
    return [
        name
        for name, amount in bundle.items()
        if amount and not any(node.total.get(name, 0.0) + _EPS >= amount for node in nodes)
    ]


def _impossible(bundles: list[LabelledBundle], strategy: str, nodes: list[Node]) -> list[str]:
    """Reasons no placement can exist, each naming the resource and the key that asks for it."""
    problems: list[str] = []
    for bundle in _unique(bundles):
        if any(fits_in(bundle.resources, node.total) for node in nodes):
            continue
        missing = missing_resources(bundle.resources, nodes)
        if missing and all(not any(name in node.total for node in nodes) for name in missing):
            why = f"no node of the cluster has {_names(missing)}"
        elif missing:
            largest = {name: max(node.total.get(name, 0.0) for node in nodes) for name in missing}
            why = "no node has that much " + ", ".join(
                f"{name} (the largest has {amount:g})" for name, amount in largest.items()
            )
        else:
            why = "no single node has all of these resources together"
        asks = format_bundle(bundle.resources)
        problems.append(f"each {bundle.role} ({bundle.key}) asks for {asks}, but {why}")
    if problems:
        return problems
    total_need = _sum([bundle.resources for bundle in bundles])
    total_have = _sum([node.total for node in nodes])
    for name, amount in total_need.items():
        if amount > total_have.get(name, 0.0) + _EPS:
            problems.append(
                f"one trial needs {amount:g} {name} in all ({_breakdown(bundles, name)}), the "
                f"cluster has {total_have.get(name, 0.0):g}"
            )
    if strategy == "STRICT_SPREAD" and len(bundles) > len(nodes):
        problems.append(
            f"placement STRICT_SPREAD puts each of the {len(bundles)} bundles on its own node, "
            f"the cluster has {len(nodes)} nodes"
        )
    return problems


def _no_placement_reason(bundles: list[LabelledBundle], strategy: str, nodes: list[Node]) -> str:
    need = format_bundle(_sum([bundle.resources for bundle in bundles]))
    if strategy == "STRICT_PACK":
        return f"placement STRICT_PACK needs one node with {need}, and no node has that much"
    return (
        f"the cluster has enough resources in all ({need} per trial) but no way to split them "
        f"over its nodes that placement {strategy} allows"
    )


def _unique(bundles: list[LabelledBundle]) -> list[LabelledBundle]:
    seen: list[tuple[str, Bundle]] = []
    unique = []
    for bundle in bundles:
        if (bundle.role, bundle.resources) not in seen:
            seen.append((bundle.role, bundle.resources))
            unique.append(bundle)
    return unique


def _names(names: list[str]) -> str:
    return " or ".join(repr(name) for name in names)


def _breakdown(bundles: list[LabelledBundle], name: str) -> str:
    parts: dict[str, tuple[int, float]] = {}
    for bundle in bundles:
        amount = bundle.resources.get(name, 0.0)
        if amount:
            count, _ = parts.get(bundle.role, (0, amount))
            parts[bundle.role] = (count + 1, amount)
    return " + ".join(
        f"{count} {role}{'s' if count > 1 else ''} x {amount:g}"
        for role, (count, amount) in parts.items()
    )
