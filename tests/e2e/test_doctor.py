"""The training-health diagnoses on a run: said while it trains, kept in summary.json and the
TensorBoard file, flagged by ``rlplat runs`` and told again by ``rlplat doctor``."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from rlplat.checkpoints import SUMMARY
from rlplat.cli import main
from rlplat.experiment.load import load_experiment
from rlplat.run.launch import train
from tests.helpers import EXPERIMENTS


def _command_json(capsys, *args: str):
    capsys.readouterr()
    try:
        main(list(args))
    except SystemExit as done:
        assert done.code in (0, None)
    return json.loads(capsys.readouterr().out)


def test_a_learning_rate_of_one_is_diagnosed_while_it_trains(ray_session, tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    loaded = load_experiment(
        EXPERIMENTS / "diagnoses" / "ppo_lr_too_high.yaml",
        [f"output_dir={tmp_path}", "stop.env_steps=4000"],
    )
    console = Console(record=True, width=400)
    summary = train(loaded, console=console)
    said = console.export_text()
    assert "diagnosis trial_00000 (kl_divergence): each update moves the policy too far" in said
    assert "lower training.lr (now 1.0)" in said
    [trial] = summary.trials
    [diagnosis] = trial.diagnoses
    assert diagnosis.startswith("kl_divergence: each update moves the policy too far")
    stored = json.loads((Path(summary.run_dir) / SUMMARY).read_text())
    assert stored["trials"][0]["diagnoses"] == trial.diagnoses

    events = EventAccumulator(trial.path, size_guidance={"tensors": 0})
    events.Reload()
    assert "diagnoses/kl_divergence/text_summary" in events.Tags()["tensors"]

    report = _command_json(capsys, "doctor", summary.run_dir, "--json")
    [findings] = [t["findings"] for t in report["trials"]]
    assert [f["rule"] for f in findings] == ["kl_divergence"]
    assert f"kl_divergence: {findings[0]['message']}" == diagnosis
    [record] = _command_json(capsys, "runs", str(tmp_path), "--json")
    assert record["diagnoses"] == ["kl_divergence"]
