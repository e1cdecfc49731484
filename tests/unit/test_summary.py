"""What ``rlplat train`` prints at the end of a run, from its summary."""

from __future__ import annotations

from rich.console import Console

from rlplat.run.summary import RunSummary, TrialSummary, print_summary


def _trial(name: str, error: str | None) -> TrialSummary:
    checkpoint = f"/runs/r/{name}/checkpoint_000000"
    return TrialSummary(
        name, f"/runs/r/{name}", "ERROR" if error else "TERMINATED", 3, 3000, 20.0, 22.0,
        checkpoint, checkpoint, error=error,
    )  # fmt: skip


def _printed(*trials: TrialSummary) -> str:
    console = Console(record=True, width=200)
    print_summary(RunSummary("/runs/r", 5.0, list(trials)), console)
    return console.export_text()


def test_a_failed_run_suggests_retrying_it_not_evaluating_its_checkpoints():
    text = _printed(_trial("trial_00000", "RuntimeError: the env crashed"))
    next_steps = text.split("Next:")[1]
    assert "rlplat train --resume /runs/r --retry-errored" in next_steps
    assert "rlplat eval" not in next_steps


def test_a_run_with_a_finished_trial_suggests_evaluating_it_and_retrying_the_failed_one():
    text = _printed(_trial("trial_00000", None), _trial("trial_00001", "RuntimeError: crash"))
    next_steps = text.split("Next:")[1]
    assert "rlplat eval /runs/r" in next_steps and "the 1 failed trial(s)" in next_steps
    clean = _printed(_trial("trial_00000", None)).split("Next:")[1]
    assert "rlplat eval /runs/r" in clean and "--retry-errored" not in clean


def test_run_files_a_crash_left_broken_are_read_as_missing(tmp_path):
    """A result.json with bytes that are not UTF-8 and rows that are not objects, a run.json and
    a summary.json with fields of the wrong type: rlplat runs, doctor and report read what is
    sound (they exited 1 with a traceback)."""
    import json

    from rlplat.checkpoints import read_results
    from rlplat.report.runs import run_record
    from tests.helpers import TINY_PPO

    run_dir = tmp_path / "tiny-ppo" / "2026-12-05_10-00-00"
    trial = run_dir / "trial_00000"
    trial.mkdir(parents=True)
    (run_dir / "experiment.yaml").write_text(TINY_PPO.replace("OUTPUT", str(tmp_path)))
    row = {"training_iteration": 1, "num_env_steps_sampled_lifetime": 256}
    (trial / "result.json").write_bytes(
        json.dumps(row).encode() + b"\n\xff\xfe garbage\n[1, 2]\n\"text\"\n"
    )
    (run_dir / "run.json").write_text('{"drivers": "x", "started_unix": "y", "started": 5}')
    (run_dir / "summary.json").write_text('{"trials": "none", "wall_time_s": "x"}')
    assert read_results(trial) == [row]
    record = run_record(run_dir)
    assert record.status == "interrupted" and record.algorithm == "PPO"
