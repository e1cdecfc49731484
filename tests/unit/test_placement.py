"""Fitting bundles onto nodes and resolving preference lists, on described clusters (no Ray):
the answers rlplat plan and rlplat train act on."""

from __future__ import annotations

import pytest

from rlplat.cluster.placement import LabelledBundle, Node, make_plan, place
from rlplat.cluster.preferences import resolve_preferences
from rlplat.errors import UserError


def node(name: str, **resources: float) -> Node:
    return Node(node_id=name * 8, address=name, head=False, total=resources, available=resources)


def runners(count: int, **resources: float) -> list[LabelledBundle]:
    driver = LabelledBundle("driver", "resources.driver", {"CPU": 1})
    runner = LabelledBundle("env runner", "resources.env_runners", resources)
    return [driver] + [runner] * count


def test_strict_pack_needs_one_node_with_everything():
    bundles = [{"CPU": 1}, {"CPU": 1}, {"CPU": 1}]
    assert place(bundles, "STRICT_PACK", [{"CPU": 2}, {"CPU": 2}]) is None
    assert place(bundles, "STRICT_PACK", [{"CPU": 2}, {"CPU": 4}]) == [1, 1, 1]


def test_strict_spread_needs_a_node_per_bundle():
    bundles = [{"CPU": 1}, {"CPU": 1, "npu": 1}]
    # The only npu node must take the npu bundle; the driver goes elsewhere.
    assert place(bundles, "STRICT_SPREAD", [{"CPU": 4, "npu": 1}, {"CPU": 1}]) == [1, 0]
    assert place(bundles * 2, "STRICT_SPREAD", [{"CPU": 8, "npu": 8}] * 3) is None


def test_pack_prefers_one_node_and_falls_back_to_several():
    capacities = [{"CPU": 2}, {"CPU": 3}]
    assert place([{"CPU": 1}] * 3, "PACK", capacities) == [1, 1, 1]
    assert place([{"CPU": 1}] * 5, "PACK", [{"CPU": 2}, {"CPU": 3}]) is not None


def test_spread_finds_a_split_that_first_fit_would_miss():
    # Largest bundles first: the 2-CPU bundle must take the 2-CPU node.
    bundles = [{"CPU": 1}, {"CPU": 1}, {"CPU": 2}]
    assert place(bundles, "SPREAD", [{"CPU": 2}, {"CPU": 2}]) is not None


@pytest.mark.parametrize(
    ("bundles", "nodes", "expected"),
    [
        (runners(2, CPU=1, npu=1), [node("a", CPU=8)], "no node of the cluster has 'npu'"),
        (runners(1, CPU=1, GPU=2), [node("a", CPU=8, GPU=1)], "the largest has 1"),
        (runners(4, CPU=1), [node("a", CPU=2), node("b", CPU=2)], "needs 5 CPU in all"),
        (
            runners(1, CPU=1, npu=1),
            [node("a", CPU=8), node("b", CPU=0, npu=4)],
            "no single node has all of these resources together",
        ),
    ],
    ids=["unknown resource", "too much on one node", "too little in all", "never together"],
)
def test_impossible_demands_name_the_resource_and_the_key(bundles, nodes, expected):
    plan = make_plan(bundles, "PACK", nodes, trials=1, max_concurrent=None)
    assert not plan.fits
    message = " ".join(plan.problems)
    assert expected in message
    assert "resources.env_runners" in message or "env runners x" in message


def test_concurrent_trials_are_limited_by_the_scarcest_resource_and_max_concurrent():
    nodes = [node("a", CPU=16), node("b", CPU=16, npu=4)]
    plan = make_plan(runners(2, CPU=1, npu=1), "PACK", nodes, trials=10, max_concurrent=None)
    assert plan.fits and plan.concurrent == 2  # 4 npu, 2 per trial
    plan = make_plan(runners(2, CPU=1), "PACK", nodes, trials=10, max_concurrent=None)
    assert plan.concurrent == 10  # 3 CPU per trial, 32 CPU: all ten at once
    plan = make_plan(runners(2, CPU=1), "PACK", nodes, trials=10, max_concurrent=3)
    assert plan.concurrent == 3


def resources_data(**groups) -> dict:
    base = {"cpus": 1, "gpus": 0, "custom": {}, "prefer": []}
    return {"resources": {g: {**base, **groups.get(g, {})} for g in ("env_runners", "learners")}}


def test_the_first_preference_some_node_offers_wins():
    data = resources_data(
        env_runners={"prefer": [{"custom": {"tpu": 1}}, {"custom": {"npu": 1}}, {}]},
        learners={"cpus": "auto", "prefer": [{"gpus": 1}, {}]},
    )
    nodes = [node("a", CPU=4), node("b", CPU=4, npu=2)]
    data, choices = resolve_preferences(data, nodes)
    runner_choice, learner_choice = choices
    assert runner_choice.index == 1 and data["resources"]["env_runners"]["custom"] == {"npu": 1}
    assert "no node has enough tpu" in runner_choice.passed_over[0]
    assert learner_choice.index == 1 and data["resources"]["learners"]["gpus"] == 0
    assert data["resources"]["env_runners"]["prefer"] == []  # the run's file is concrete


def test_a_preference_list_nothing_fits_is_refused():
    data = resources_data(env_runners={"prefer": [{"custom": {"tpu": 1}}, {"gpus": 1}]})
    with pytest.raises(UserError, match="no entry fits a node of this cluster.*tpu.*GPU"):
        resolve_preferences(data, [node("a", CPU=4)])
