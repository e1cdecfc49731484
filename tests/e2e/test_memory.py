"""rlplat's GRU and attention memories (``rl_module.model_config.memory``) on Recall
(envs/recall.py), a task only a policy with memory solves: each learns it through ``rlplat
train``, its checkpoint plays it greedily under ``rlplat eval``, and it exports with its state
travelling flat and a passing parity certificate."""

from __future__ import annotations

import json
import statistics

import pytest

from tests.e2e.helpers import eval_json, export_json, train_yaml

# Two classes, name the one shown 2 steps ago; 12 steps per episode, 10 of them paid. A policy
# without memory earns 5 on average. Each memory learned it on seeds 0, 1 and 2 at this budget.
RECALL = """\
name: recall
algorithm: PPO
seed: 0
env: {factory: "envs.recall:Recall", kwargs: {classes: 2, delay: 2, length: 12}}
training: {lr: 0.003, train_batch_size_per_learner: 256, minibatch_size: 64, num_epochs: 4}
rl_module:
  model_config: {memory: MEMORY, max_seq_len: 12, fcnet_hiddens: [32]}
resources: {env_runners: {count: 0}}
stop: {env_steps: 4096}
checkpoint: {every: 0, at_end: true}
output_dir: OUTPUT
"""
PAID, MEMORYLESS = 10, 5.0
# The state's leaves and their sizes, per encoder (PPO's actor and critic each have one).
STATES = {
    "gru": ("{type: gru, size: 16}", [("h", 16)]),
    "attention": ("{type: attention, size: 16, steps: 4}", [("filled", 4), ("memory", 64)]),
}


@pytest.mark.parametrize("kind", sorted(STATES))
def test_the_memory_learns_to_recall_and_exports(kind, ray_session, tmp_path, capsys):
    memory, leaves = STATES[kind]
    summary = train_yaml(RECALL.replace("MEMORY", memory), tmp_path)
    played = eval_json(capsys, summary.run_dir, "-n", "10", "--seed", "100")
    mean = statistics.mean(episode["return"] for episode in played["per_episode"])
    assert mean >= 0.8 * PAID, f"{kind}: greedy return {mean:.2f}, without memory ~{MEMORYLESS}"

    report = export_json(capsys, summary.run_dir, "--out", tmp_path / "x", "-n", "3")
    parity = report["parity"]
    assert parity["passed"] and parity["agreement"] == 1.0 and parity["compared_actions"] > 0
    spec = json.loads((tmp_path / "x" / "policy.json").read_text())["policies"]["default_policy"]
    layout = [(part["name"], part["size"]) for part in spec["state"]["layout"]]
    assert layout == [
        (f"{net}.{leaf}", size) for net in ("actor", "critic") for leaf, size in leaves
    ]
