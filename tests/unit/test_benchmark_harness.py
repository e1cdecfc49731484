"""benchmarks/harness.py without running anything: how it reads a run directory (a cut-off last
result line skipped), reuses a run that is already there, takes turns with a peer, names and
checks commands, and keeps results files. No Ray, no training, no subprocess."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

HARNESS_FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "harness.py"


def _load_harness() -> ModuleType:
    """benchmarks/ is a folder of scripts, not a package: load harness.py from its file."""
    spec = importlib.util.spec_from_file_location("benchmark_harness", HARNESS_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


harness = _load_harness()


def _result(iteration: int) -> dict:
    return {
        "training_iteration": iteration,
        "num_env_steps_sampled_lifetime": 1000 * iteration,
        "time_total_s": 1.25 * iteration,
        "window": {"episode_return_mean": 10.0 * iteration},
    }


def _fake_run(out: Path, iterations: int = 2, cut_off: bool = True) -> Path:
    """What ``rlplat train ... output_dir=<out>`` leaves: one run with one trial, whose
    result.json may end in a half-written line (a killed or still-running trial)."""
    run_dir = out / "tiny" / "2026-01-01_00-00-00"
    trial = run_dir / "trial_00000"
    trial.mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"drivers": [{"timings": {"first": 1}}]}))
    (run_dir / "summary.json").write_text(json.dumps({"run_dir": str(run_dir), "trials": []}))
    lines = [json.dumps(_result(i)) for i in range(1, iterations + 1)]
    tail = '{"training_iteration": 3, "num_env' if cut_off else ""
    (trial / "result.json").write_text("\n".join(lines) + "\n" + tail)
    return run_dir


def test_trial_results_skip_a_cut_off_last_line(tmp_path: Path) -> None:
    run_dir = _fake_run(tmp_path, iterations=2, cut_off=True)
    rows = harness.trial_results(run_dir / "trial_00000")
    assert [row["training_iteration"] for row in rows] == [1, 2]


def test_training_reads_its_one_run(tmp_path: Path) -> None:
    run_dir = _fake_run(tmp_path / "out")
    training = harness.Training(tmp_path / "out", wall_s=3.5)
    assert training.run_dir == run_dir
    assert training.summary()["run_dir"] == str(run_dir)
    assert training.driver() == {"timings": {"first": 1}}
    assert [row["training_iteration"] for row in training.results()] == [1, 2]


def test_train_reuses_an_existing_run_without_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    _fake_run(out)

    def no_process(*args: object, **kwargs: object) -> None:
        raise AssertionError("reuse=True must not start rlplat when out exists")

    monkeypatch.setattr(harness.subprocess, "run", no_process)
    row = harness.train_row("tiny.yaml", ["seed=1"], out)
    assert row == {
        "command": "rlplat train experiments/tiny.yaml seed=1",
        "run_dir": str(harness.Training(out, None).run_dir),
        "iterations": 2,
        "env_steps": 2000,
        "training_s": 2.5,
        "final_window_return": 20.0,
        "command_wall_s": None,
    }


def test_take_turns_rotates_who_goes_first() -> None:
    calls: list[str] = []

    def side(name: str):
        def run() -> str:
            calls.append(name)
            return f"{name} result"

        return run

    sides = {name: side(name) for name in ("a", "b", "c")}
    rows = [harness.take_turns(round_, sides) for round_ in range(4)]
    assert [row["first"] for row in rows] == ["a", "b", "c", "a"]
    assert calls[3:6] == ["b", "c", "a"]
    assert list(rows[1]) == ["first", "b", "c", "a"]  # the sides in the order they ran
    assert rows[1]["a"] == "a result"
    peers = {"rlplat": side("x"), "sb3": side("y")}
    assert [harness.take_turns(round_, peers)["first"] for round_ in (0, 1)] == ["rlplat", "sb3"]


def test_rlplat_runs_under_this_interpreter_and_is_shown_as_rlplat() -> None:
    assert harness.RLPLAT == (sys.executable, "-m", "rlplat.cli")
    assert harness.shown([*harness.RLPLAT, "eval", "run", "-n", "1"]) == "rlplat eval run -n 1"
    assert harness.shown(["python", "-c", "pass"]) == "python -c pass"


def test_a_checked_failure_ends_the_benchmark_with_the_output_tail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def failed(command: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess(command, 2, "x" * 5000, "bad override\n")

    monkeypatch.setattr(harness.subprocess, "run", failed)
    unchecked = harness.rlplat("train", "exp.yaml", check=False)
    assert not unchecked.ok and unchecked.tail().endswith("bad override\n")
    assert len(unchecked.tail()) == harness.TAIL
    with pytest.raises(SystemExit, match=r"rlplat train exp.yaml failed \(exit 2\)"):
        harness.rlplat("train", "exp.yaml")
    training = harness.train("exp.yaml", "seed=0", out=Path("/nowhere"), check=False)
    assert training.error is not None and training.error.endswith("bad override\n")


def test_results_files_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "results" / "bench.json"
    assert harness.load_results(path) == {}
    harness.save_results(path, {"a": {"b": 1}})
    assert path.read_text().endswith("\n")
    assert harness.load_results(path) == {"a": {"b": 1}}
