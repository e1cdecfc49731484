"""Helpers of the end-to-end tests only: the ``rlplat`` command in this process, and training an
experiment file on the session's Ray. Unit tests use ``tests/helpers.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def run_cli(capsys, *argv: str | Path) -> tuple[int, str, str]:
    """``rlplat ...`` in this process: (exit code, stdout, stderr)."""
    from rlplat.cli import main

    try:
        main([*map(str, argv)])
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_eval(capsys, *argv: str | Path) -> tuple[int, str, str]:
    """``rlplat eval ...`` in this process: (exit code, stdout, stderr)."""
    return run_cli(capsys, "eval", *argv)


def eval_json(capsys, *argv: str | Path) -> dict:
    """``rlplat eval ... --json``'s report; the command must succeed."""
    code, out, err = run_eval(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def runs_json(capsys, directory: Path) -> dict[str, str]:
    """``rlplat runs <directory> --json`` in this process: each run's name and status."""
    import json

    code, out, err = run_cli(capsys, "runs", directory, "--json")
    assert code == 0, err
    return {record["name"]: record["status"] for record in json.loads(out)}


def train_yaml(text: str, tmp_path: Path, *overrides: str):
    """Train the experiment ``text`` (its OUTPUT: tmp_path/out) on the session's Ray; the run
    summary of its finished trial."""
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    path = tmp_path / "exp.yaml"
    path.write_text(text.replace("OUTPUT", str(tmp_path / "out")))
    summary = train(load_experiment(path, list(overrides)), console=Console(quiet=True))
    assert summary.trials[0].status == "finished", summary.trials[0].error
    return summary


def export_json(capsys, *argv: str | Path) -> dict:
    """``rlplat export ... --json``'s report; the command must succeed."""
    code, out, err = run_cli(capsys, "export", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def export_report(capsys, run_dir: str, out: Path) -> tuple[dict, dict]:
    """``rlplat export`` in this process (parity over 5 episodes): its report, its manifest."""
    report = export_json(capsys, run_dir, "--out", out, "-n", "5")
    return report, json.loads((Path(report["directory"]) / "policy.json").read_text())


def wandb_offline_runs(run_dir: Path) -> dict[str, dict]:
    """What W&B's offline runs under ``<run dir>/wandb`` hold, by run id (a resumed run's later
    sessions merged): name, group, config and the ``env_steps`` of each history row."""
    from rlplat.callbacks.wandb_tracker import history_rows, offline_records

    runs: dict[str, dict] = {}
    for path in sorted(run_dir.glob("wandb/offline-run-*/run-*.wandb")):
        run = runs.setdefault(path.stem.removeprefix("run-"), {"steps": []})
        for record in offline_records(path):
            if record.WhichOneof("record_type") == "run":
                run["name"], run["group"] = record.run.display_name, record.run.run_group
                run["config"] = {
                    item.key: json.loads(item.value_json) for item in record.run.config.update
                }
            row = history_rows(record)
            if row and "env_steps" in row:
                run["steps"].append(row["env_steps"])
    return runs


def resume(run_dir: Path, address: str) -> subprocess.CompletedProcess:
    """``rlplat train --resume run_dir`` on the test session's cluster, which must succeed."""
    resumed = subprocess.run(
        [sys.executable, "-m", "rlplat.cli", "train", "--address", address, "--resume"]
        + [str(run_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    return resumed
