"""The KubeRay manifest in deploy/: valid YAML of the shape KubeRay reads, running a shipped
experiment (with its overrides) on a cluster that offers what that experiment prefers."""

from __future__ import annotations

import json
import shlex

import ray
from ruamel.yaml import YAML

from rlplat.experiment.load import load_experiment
from rlplat.prepare import prepare
from tests.helpers import REPO

RAYJOB = REPO / "deploy" / "kuberay" / "rayjob.yaml"


def rayjob() -> dict:
    return YAML(typ="safe", pure=True).load(RAYJOB.read_text())


def pods(spec: dict) -> list[dict]:
    cluster = spec["rayClusterSpec"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    return [group["template"]["spec"] for group in groups]


def test_rayjob_is_a_kuberay_v1_rayjob_for_this_ray_version():
    job = rayjob()
    assert job["apiVersion"] == "ray.io/v1" and job["kind"] == "RayJob"
    cluster = job["spec"]["rayClusterSpec"]
    major_minor = ".".join(ray.__version__.split(".")[:2])
    assert cluster["rayVersion"].startswith(major_minor)
    assert cluster["authOptions"] == {"mode": "token"}
    for group in cluster["workerGroupSpecs"]:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        assert isinstance(group["rayStartParams"], dict)  # KubeRay wants strings in it
        assert all(isinstance(v, str) for v in group["rayStartParams"].values())


def test_entrypoint_trains_a_shipped_experiment_that_validates(tmp_path):
    job = rayjob()
    command = shlex.split(job["spec"]["entrypoint"])
    assert command[:2] == ["rlplat", "train"]
    experiment, *overrides = command[2:]
    assert (REPO / experiment).is_file(), experiment
    loaded = prepare(load_experiment(REPO / experiment, overrides))
    # Checkpoints go to the volume every pod mounts there.
    output_dir = loaded.experiment.output_dir
    for pod in pods(job["spec"]):
        [container] = pod["containers"]
        mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
        assert output_dir in mounts, (container["name"], mounts)


def test_the_npu_group_declares_the_resource_the_experiment_prefers():
    job = rayjob()
    declared = {}
    for group in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        raw = group["rayStartParams"].get("resources")
        if raw:  # KubeRay passes it to `ray start --resources` as a quoted JSON string
            declared.update(json.loads(json.loads(raw)))
    experiment = shlex.split(job["spec"]["entrypoint"])[2]
    loaded = load_experiment(REPO / experiment)
    wanted = {
        name
        for option in loaded.experiment.resources.env_runners.prefer
        for name in (option.custom or {})
    }
    assert wanted and wanted <= set(declared), (wanted, declared)
