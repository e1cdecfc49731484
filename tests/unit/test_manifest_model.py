"""The export manifest (policy.json) as rlplat.runtime's dataclasses: exports written by main
(tests/fixtures/export_*) still load, act, and are written again byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlplat.runtime import (
    ExportError,
    Manifest,
    MultiAgentPolicy,
    PolicySpec,
    from_manifest,
    read_manifest,
)
from rlplat.serve.protocol import PolicyView, parse_act

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXPORTS = sorted(FIXTURES.glob("export_*"))


class Recorder:
    """Stands in for onnxruntime: remembers the feed and answers zeros (action 1)."""

    def __init__(self, spec: PolicySpec):
        self.spec = spec
        self.feeds: list[dict[str, np.ndarray]] = []

    def run(self, output_names: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        self.feeds.append(feed)
        batch = len(next(iter(feed.values())))
        outputs = {o.name: o for o in self.spec.outputs}
        return [
            np.ones(batch, np.int64) if name == "action"
            else np.zeros((batch, *outputs[name].shape[1:]), np.float32)
            for name in output_names
        ]


def runners(manifest: Manifest) -> dict[str, Recorder]:
    return {pid: Recorder(spec) for pid, spec in manifest.policies.items() if spec.kind == "onnx"}


def test_there_are_exports_written_by_main():
    assert [path.name for path in EXPORTS] == [
        "export_cartpole_ppo", "export_connect_four_random", "export_two_step_qmix"
    ]


@pytest.mark.parametrize("directory", EXPORTS, ids=lambda path: path.name)
def test_a_manifest_written_by_main_is_written_again_byte_for_byte(directory):
    text = (directory / "policy.json").read_text()
    manifest = read_manifest(directory)
    assert json.dumps(manifest.to_json(), indent=2) + "\n" == text
    assert Manifest.from_json(manifest.to_json()) == manifest


def test_a_single_agent_export_of_main_loads_with_its_fields():
    manifest = read_manifest(FIXTURES / "export_cartpole_ppo")
    assert (manifest.multi_agent, manifest.team, manifest.agents) == (False, False, None)
    assert manifest.verified is True
    assert manifest.experiment.name == "tiny-ppo" and manifest.experiment.algorithm == "PPO"
    assert manifest.experiment.file == "experiment.yaml"
    assert manifest.env.label == "CartPole-v1" and manifest.env.team is None
    assert manifest.checkpoint.path.endswith("checkpoint_000000")
    assert manifest.training["env_steps"] == 256
    assert {"rlplat", "onnx", "onnxruntime"} <= set(manifest.versions)
    (spec,) = manifest.policies.values()
    assert spec.kind == "onnx" and spec.file == "policy.onnx" and spec.opset == 17
    (obs,) = spec.inputs
    assert (obs.name, obs.shape, obs.path, obs.observation_dtype) == (
        "obs", ["batch", 4], [], "float32"
    )
    assert [o.name for o in spec.outputs] == ["action", "action_dist_inputs"]
    assert (spec.action.type, spec.action.n, spec.action.start) == ("Discrete", 2, 0)
    assert spec.can_sample and not spec.carries_memory


def test_a_qmix_export_of_main_acts_per_agent_with_its_own_id_in_the_state():
    manifest = read_manifest(FIXTURES / "export_two_step_qmix")
    assert manifest.team and manifest.multi_agent
    assert manifest.env.team == {"team_reward": "common", "global_state": "env"}
    spec = manifest.policies["default_policy"]
    assert spec.carries_memory and not spec.can_sample
    assert spec.state.size == 68
    assert [(p.name, p.start, p.size) for p in spec.state.layout] == [
        ("hidden", 0, 64), ("previous_action", 64, 2), ("agent_id", 66, 2)
    ]
    recorders = runners(manifest)
    policy = from_manifest(manifest, runners=recorders)
    assert isinstance(policy, MultiAgentPolicy)
    assert policy.agents == ["agent_0", "agent_1"]
    assert policy.policy_for("agent_1").initial_state()[66:].tolist() == [0.0, 1.0]
    assert policy.act({"agent_0": np.zeros(3), "agent_1": np.zeros(3)}) == {
        "agent_0": 1, "agent_1": 1
    }
    (feed,) = recorders["default_policy"].feeds  # one graph run for both agents
    assert feed["state_in"].shape == (2, 68)
    assert feed["state_in"][:, 66:].tolist() == [[1.0, 0.0], [0.0, 1.0]]
    assert feed["action_mask"].tolist() == [[1.0, 1.0], [1.0, 1.0]]  # the env has no mask


def test_a_random_opponent_of_main_plays_a_legal_move():
    manifest = read_manifest(FIXTURES / "export_connect_four_random")
    assert manifest.random_agents == {"player_1"}
    assert manifest.policy_of("player_1").observation_keys == ["action_mask", "observation"]
    policy = from_manifest(manifest, runners=runners(manifest))
    policy.seed(0)
    mask = np.zeros(7, np.int8)
    mask[4] = 1
    board = np.zeros((6, 7, 2), np.int8)
    assert policy.act({"player_1": {"observation": board, "action_mask": mask}}) == {
        "player_1": 4
    }


def test_serve_checks_a_request_against_a_manifest_of_main():
    view = PolicyView.of(read_manifest(FIXTURES / "export_connect_four_random"))
    board = np.zeros((6, 7, 2), int).tolist()
    request = parse_act(
        {"observations": {"player_0": {"observation": board, "action_mask": [1] * 7}}}, view
    )
    (query,) = request.queries
    assert query.observation["observation"].dtype == np.int8
    example = view.example()
    assert example["observations"]["player_0"]["observation"] == board
    assert example["observations"]["player_0"]["action_mask"] == [1] * 7, "every move legal"
    assert len(parse_act(example, view).queries) == 2, "the printed curl line is a valid request"


def test_stacked_frames_round_trip_and_the_env_gives_one_frame():
    data = {
        "kind": "onnx", "file": "policy.onnx", "opset": 17,
        "inputs": [{"name": "obs", "shape": ["batch", 84, 84, 16], "dtype": "float32",
                    "path": [], "observation_dtype": "uint8", "observation_range": None}],
        "outputs": [{"name": "action", "shape": ["batch"], "dtype": "int64"}],
        "action": {"type": "Discrete", "n": 6, "start": 0, "dtype": "int64"},
        "state": None, "frame_stack": {"num_frames": 4}, "exploration": "categorical",
    }
    spec = PolicySpec.from_json(data)
    assert spec.to_json() == data
    assert spec.carries_memory
    assert spec.inputs[0].part_shape(spec.frame_stack) == (84, 84, 4)


def test_a_directory_that_is_no_export_of_this_format_is_refused(tmp_path):
    with pytest.raises(ExportError, match="has no policy.json"):
        read_manifest(tmp_path)
    (tmp_path / "policy.json").write_text(json.dumps({"format": "rlplat-export/0"}))
    with pytest.raises(ExportError, match="rlplat-export/1"):
        read_manifest(tmp_path)
    (tmp_path / "policy.json").write_text(json.dumps({"format": "rlplat-export/1"}))
    with pytest.raises(ExportError, match="cannot read"):
        read_manifest(tmp_path)
