"""Hindsight relabelling (``replay.her``) on bit flipping (envs/bit_flip.py), the HER paper's
task: DQN with it learns to reach goals its sparse reward alone rarely shows, its greedy
episodes succeed under ``rlplat eval`` (which counts ``is_success``), and its export passes the
parity certificate; ``rlplat report --metric success_rate`` scores it by the same success."""

from __future__ import annotations

import json

from tests.e2e.helpers import eval_json, export_json, run_cli, train_yaml

# 6 bits, 15k env steps: greedy success over 20 episodes 100%, 95%, 80% on seeds 0, 1, 2 with
# hindsight goals; 10%, 5%, 5% without them (the same settings, replay={}).
BIT_FLIP = """\
name: bit-flip
algorithm: DQN
seed: 0
env: {factory: "envs.bit_flip:BitFlip", kwargs: {bits: 6}}
replay: {her: {strategy: future, goals_per_transition: 4}}
stop: {env_steps: 15000, success_rate: 0.95}
checkpoint: {every: 0, at_end: true}
output_dir: OUTPUT
"""


def test_hindsight_goals_teach_dqn_to_flip_the_bits_and_it_exports(ray_session, tmp_path, capsys):
    summary = train_yaml(BIT_FLIP, tmp_path)
    played = eval_json(capsys, summary.run_dir, "-n", "20")
    assert played["success_rate"] >= 0.75, played["success_rate"]
    assert all("success" in episode for episode in played["per_episode"])

    # rlplat report scores each seed by its greedy success rate.
    code, _, err = run_cli(
        capsys,
        "report",
        summary.run_dir,
        "--metric",
        "success_rate",
        "--eval-episodes",
        "20",
        "--out",
        tmp_path / "report",
    )
    assert code == 0, err
    [scored] = json.loads((tmp_path / "report" / "report.json").read_text())["experiments"]
    assert scored["final_scores"] == [played["success_rate"]]

    report = export_json(capsys, summary.run_dir, "--out", tmp_path / "x", "-n", "3")
    parity = report["parity"]
    assert parity["passed"] and parity["agreement"] == 1.0 and parity["compared_actions"] > 0
