"""``prefer`` lists: each resource group takes the first entry some node of the cluster can hold."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from rlplat.cluster.placement import Bundle, Node, fits_in, format_bundle, missing_resources
from rlplat.errors import UserError

PREFERENCE_GROUPS = ("env_runners", "learners")


@dataclass(frozen=True)
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
    """A copy of the experiment data (its ``resources`` filled in as the schema does) with each
    ``prefer`` list replaced by the first entry some node can hold, and the choices made."""
    resolved = copy.deepcopy(data)
    choices = []
    for group in PREFERENCE_GROUPS:
        fields = resolved["resources"][group]
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
    return resolved, choices
