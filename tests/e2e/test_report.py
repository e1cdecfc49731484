"""Seeds, ``rlplat report`` and ``rlplat runs``: one trial per seed, statistics that an
independent scipy computation reproduces, figures, and the status of every kind of run."""

from __future__ import annotations

import csv
import json
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import stats as scipy_stats

from rlplat.callbacks.search_report import BEST_YAML, RESULTS_CSV
from rlplat.checkpoints import RESOLVED_EXPERIMENT, CheckpointInfo
from rlplat.experiment.yaml_io import parse_yaml
from tests.e2e.helpers import run_cli, runs_json, train_yaml
from tests.helpers import TINY_PPO, launch, read_until_iteration, replace


def report_json(capsys, *args) -> dict:
    code, out, err = run_cli(capsys, "report", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def yaml_file(path: Path) -> dict:
    return parse_yaml(path.read_text(), str(path))[0]


# -- seeds -------------------------------------------------------------------------------------


def test_seeds_run_one_trial_per_seed(seeded_cartpole):
    run_dir = Path(seeded_cartpole.run_dir)
    assert yaml_file(run_dir / RESOLVED_EXPERIMENT)["seeds"] == [0, 1]
    assert [t.status for t in seeded_cartpole.trials] == ["finished"] * 2
    seeds = []
    for trial in seeded_cartpole.trials:
        # Each trial's checkpoint keeps a one-seed experiment: rlplat train on it reruns that seed.
        experiment = yaml_file(Path(trial.last_checkpoint) / RESOLVED_EXPERIMENT)
        assert "seeds" not in experiment
        seeds.append(experiment["seed"])
        assert trial.final_return >= 475
    assert sorted(seeds) == [0, 1]
    # Different seeds sample different episodes: the two runs differ.
    assert len({(t.env_steps, t.final_return) for t in seeded_cartpole.trials}) == 2
    with open(run_dir / RESULTS_CSV) as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(int(row["seed"]) for row in rows) == [0, 1]
    finals = [float(row["episode_return_mean_final"]) for row in rows]
    assert {row["rank"] for row in rows} == {"1"}  # one configuration
    mean = float(rows[0]["episode_return_mean_final_mean_over_seeds"])
    assert mean == pytest.approx(np.mean(finals))
    assert not (run_dir / BEST_YAML).exists()  # nothing to choose between


def test_search_with_seeds_ranks_configurations_by_their_mean(ray_session, tmp_path):
    """A grid of two learning rates on two seeds: four trials, the learning rate the same on
    both seeds of a configuration; best.yaml is the winning configuration with its seeds."""
    text = replace(TINY_PPO, "seed: 3\n", "seed: 3\nseeds: [5, 9]\n")
    summary = train_yaml(text, tmp_path, "training.lr={grid: [0.0001, 0.003]}")
    run_dir = Path(summary.run_dir)
    with open(run_dir / RESULTS_CSV) as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4
    by_config: dict[str, list[dict]] = {}
    for row in rows:
        by_config.setdefault(row["rank"], []).append(row)
    assert sorted(by_config) == ["1", "2"]
    means = {}
    for rank, group in by_config.items():
        assert sorted(int(row["seed"]) for row in group) == [5, 9]
        assert len({row["training.lr"] for row in group}) == 1
        finals = [float(row["episode_return_mean_final"]) for row in group]
        means[rank] = float(group[0]["episode_return_mean_final_mean_over_seeds"])
        assert means[rank] == pytest.approx(np.mean(finals))
    assert means["1"] >= means["2"]
    best = yaml_file(run_dir / BEST_YAML)
    assert best["seeds"] == [5, 9]
    assert best["training"]["lr"] == float(by_config["1"][0]["training.lr"])


# -- rlplat report -----------------------------------------------------------------------------


def test_report_statistics_equal_scipy_on_the_per_seed_scores(seeded_cartpole, capsys, tmp_path):
    """--score training: the seeds' own final windowed returns. IQM and its interval are
    recomputed here with scipy from report.json's per-seed scores and the same bootstrap seed."""
    run_dir = Path(seeded_cartpole.run_dir)
    report = report_json(
        capsys, run_dir, "--score", "training", "--out", tmp_path / "r", "--bootstrap-seed", "7"
    )
    [entry] = report["experiments"]
    finals = {t.name: t.final_return for t in seeded_cartpole.trials}
    assert entry["final_scores"] == [finals[t["trial"]] for t in entry["trials"]]
    scores = np.array(entry["final_scores"])
    expected = scipy_stats.bootstrap(
        (scores,),
        lambda x, axis: scipy_stats.trim_mean(x, 0.25, axis=axis),
        n_resamples=10_000,
        method="percentile",
        random_state=np.random.default_rng(7),
    )
    iqm = entry["aggregates"]["iqm"]
    assert iqm["estimate"] == pytest.approx(scipy_stats.trim_mean(scores, 0.25))
    assert iqm["ci"] == pytest.approx(list(expected.confidence_interval))
    assert iqm["ci"][0] < iqm["ci"][1]
    assert entry["aggregates"]["median"]["estimate"] == pytest.approx(np.median(scores))
    # The target is the experiment's stop.episode_return_mean; every seed reached it.
    assert report["target"] == 475
    assert all(t["to_target"]["env_steps"] <= t["env_steps"] for t in entry["trials"])
    assert entry["aggregates"]["optimality_gap"]["estimate"] == pytest.approx(
        np.mean(np.maximum(475 - scores, 0))
    )


def band_pixels(image: np.ndarray, colour: str) -> int:
    """Pixels of a band: ``colour`` at 20% opacity over white (matplotlib's fill_between)."""
    rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)], dtype=float)
    band = 0.2 * rgb + 0.8 * 255
    return int((np.abs(image[..., :3].astype(float) - band).max(axis=-1) <= 3).sum())


def test_report_scores_seeds_by_greedy_episodes_of_their_last_checkpoint(
    seeded_cartpole, capsys, tmp_path
):
    """The default score: 20 greedy episodes of each seed's last checkpoint, the same numbers
    rlplat eval gives; report.md, curves (PNG, SVG) and final.png are written."""
    from rlplat.report.plots import COLOURS

    report = report_json(capsys, seeded_cartpole.run_dir, "--out", tmp_path / "r")
    directory = Path(report["directory"])
    assert directory == tmp_path / "r"
    [entry] = report["experiments"]
    first = entry["trials"][0]
    code, out, err = run_cli(capsys, "eval", Path(first["path"]), "--last", "-n", "20", "--json")
    assert code == 0, err
    assert first["final_score"] == pytest.approx(json.loads(out)["returns"]["mean"])
    assert first["checkpoint"] == json.loads(out)["checkpoint"]
    assert all(score >= 475 for score in entry["final_scores"])  # solved: greedy 500
    for name in ("report.md", "report.json", "curves.png", "curves.svg", "final.png"):
        assert (directory / name).stat().st_size > 0
    assert "| cartpole-ppo | 2 |" in (directory / "report.md").read_text()
    image = np.asarray(Image.open(directory / "curves.png").convert("RGB"))
    assert image.std() > 10  # not blank
    # One experiment's band between its seeds (as wide as their curves part: seeds 0 and 1 of
    # this run stay within a few percent of each other, ~900 pixels) ...
    assert band_pixels(image, COLOURS[0]) > 300
    assert band_pixels(image, COLOURS[1]) == 0  # ... and no other
    # The greedy evaluation during training, up to the final checkpoint's, and captions.
    assert len(entry["eval_curve"]["x"]) > 1
    assert entry["eval_curve"]["x"][-1] == pytest.approx(entry["curve"]["x"][-1], rel=0.01)
    text = (directory / "report.md").read_text()
    assert "*Greedy evaluation during training (eval_curves.png" in text
    assert "by the exploring policy, not the greedy one scored above" in text
    # A second report never overwrites the first; figure options for a paper.
    again = report_json(
        capsys, seeded_cartpole.run_dir, "--out", tmp_path / "r", "--score", "training",
        "--label", "cartpole-ppo=PPO", "--size", "3.4x2.4", "--font-size", "8",
    )
    assert Path(again["directory"]) == tmp_path / "r-1"
    assert again["experiments"][0]["label"] == "PPO"
    width, height = Image.open(tmp_path / "r-1" / "curves.png").size
    assert width < Image.open(directory / "curves.png").size[0] and height < 480


def test_report_compares_configurations_with_probability_of_improvement(
    ray_session, capsys, tmp_path
):
    """Two runs of one experiment with different learning rates, two seeds each: labelled by
    the key that differs, P(a > b) as counted over the seed pairs, and --marl-eval's layout."""
    runs = []
    for lr in ("0.0001", "0.003"):
        text = replace(TINY_PPO, "seed: 3\n", "seed: 3\nseeds: 2\n")
        (tmp_path / lr).mkdir()
        runs.append(train_yaml(text, tmp_path / lr, f"training.lr={lr}").run_dir)
    report = report_json(
        capsys, *runs, "--score", "training", "--marl-eval", "--out", tmp_path / "r"
    )
    labels = [entry["label"] for entry in report["experiments"]]
    assert labels == ["lr=1e-4", "lr=3e-3"]  # one experiment: only the key that differs
    a, b = (entry["final_scores"] for entry in report["experiments"])
    pairs = {(p["x"], p["y"]): p for p in report["probability_of_improvement"]}
    counted = np.mean([(x > y) + 0.5 * (x == y) for x in a for y in b])
    assert pairs[labels[0], labels[1]]["estimate"] == pytest.approx(counted)
    assert pairs[labels[1], labels[0]]["estimate"] == pytest.approx(1 - counted)
    marl = json.loads((Path(report["directory"]) / "marl_eval.json").read_text())
    seeds = marl["gymnasium"]["CartPole-v1"][labels[0]]
    assert sorted(seeds) == ["seed_3", "seed_4"]
    assert seeds["seed_3"]["step_2"]["step_count"] > seeds["seed_3"]["step_0"]["step_count"]


def test_report_refuses_bad_input_and_writes_nothing(seeded_cartpole, spread_run, capsys, tmp_path):
    out = tmp_path / "r"

    def refused(*args: str | Path) -> str:
        code, _, err = run_cli(capsys, "report", *args, "--out", out)
        assert code == 2, err
        assert "Traceback" not in err
        assert not out.exists()
        return " ".join(err.split())

    run_dir = Path(seeded_cartpole.run_dir)
    assert "is not a run directory" in refused(tmp_path)
    assert "Did you mean 'episode_return_mean'?" in refused(
        run_dir, "--metric", "episode_retrun_mean"
    )
    assert "measures returns or successes" in refused(run_dir, "--metric", "episode_len_mean")
    assert "--x 'steps' is not one of env_steps, time_s" in refused(run_dir, "--x", "steps")
    assert "no experiment is labelled 'cartpole'" in refused(run_dir, "--label", "cartpole=PPO")
    assert "is not WIDTHxHEIGHT" in refused(run_dir, "--size", "big")
    # A copy of the run (its own directory name, so its own label) ranked by another metric:
    # scores that do not compare.
    other = tmp_path / "other" / f"{run_dir.name}-copy"
    shutil.copytree(run_dir, other)
    text = (other / RESOLVED_EXPERIMENT).read_text()
    (other / RESOLVED_EXPERIMENT).write_text(text + "tune: {metric: episode_len_mean}\n")
    assert "rank by different metrics" in refused(run_dir, other)
    # A run without checkpoints cannot be scored by evaluation.
    for checkpoint in other.glob("trial_*/checkpoint_*"):
        shutil.rmtree(checkpoint)
    message = refused(other, "--metric", "episode_return_mean")
    assert "have no checkpoint to evaluate" in message and "--score training" in message
    # Different environments: allowed, with a warning line.
    code, said, err = run_cli(
        capsys, "report", run_dir, spread_run.run_dir, "--score", "training", "--out", out
    )
    assert code == 0, err
    assert "warning: the experiments ran on different environments" in " ".join(said.split())


def test_report_scores_an_agent_of_a_multi_agent_run(spread_run, capsys, tmp_path):
    """--metric agent_return_mean/<agent>: each seed's score is that agent's greedy return, as
    rlplat eval reports it; the curves follow the run's windowed return of the agent."""
    report = report_json(
        capsys,
        spread_run.run_dir,
        "--metric",
        "agent_return_mean/agent_1",
        "--eval-episodes",
        "3",
        "--out",
        tmp_path / "r",
    )
    [entry] = report["experiments"]
    code, out, err = run_cli(capsys, "eval", spread_run.run_dir, "--last", "-n", "3", "--json")
    assert code == 0, err
    evaluation = json.loads(out)
    assert entry["final_scores"] == [evaluation["agent_returns"]["agent_1"]["mean"]]
    assert entry["trials"][0]["episode_scores"] == [
        episode["agent_returns"]["agent_1"] for episode in evaluation["per_episode"]
    ]
    assert report["metric_path"] == "window/agent_return_mean/agent_1"
    message = " ".join(
        run_cli(
            capsys,
            "report",
            spread_run.run_dir,
            "--metric",
            "agent_return_mean/agent_9",
            "--out",
            tmp_path / "x",
        )[2].split()
    )
    assert "Did you mean 'agent_return_mean/agent_" in message, message


# -- rlplat runs -------------------------------------------------------------------------------


def test_runs_lists_finished_running_interrupted_and_failed_runs(ray_session, capsys, tmp_path):
    out = tmp_path / "out"
    train_yaml(replace(TINY_PPO, "name: tiny-ppo", "name: done"), tmp_path)
    crashing = replace(
        TINY_PPO,
        "  id: CartPole-v1\n",
        "  factory: envs.flaky:FlakyCartPole\n  kwargs: {crash_in_ray_actors: true}\n",
    )
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    path = tmp_path / "crash.yaml"
    path.write_text(
        replace(crashing, "name: tiny-ppo", "name: crashed").replace("OUTPUT", str(out))
    )
    # The env crashes in Ray actors only: the trial's own actor, not the command's process.
    failed = train(
        load_experiment(path, ["resources.driver.process=actor"]), console=Console(quiet=True)
    )
    assert failed.trials[0].status == "error"
    # SIGTERM (like a first Ctrl-C) during the third iteration (at least 3 s long): that
    # iteration ends, a checkpoint of it is written although checkpoint.every has not come round,
    # no iteration starts after it (a slow one would hold the stop for as long again), exit code
    # 130, and the run says how to resume.
    long_run = replace(TINY_PPO, "iterations: 3", "iterations: 1000")
    long_run = replace(long_run, "every: 1", "every: 100")
    long_run += "reporting: {min_time_s_per_iteration: 3}\n"
    path = tmp_path / "stopped.yaml"
    path.write_text(
        replace(long_run, "name: tiny-ppo", "name: stopped").replace("OUTPUT", str(out))
    )
    process = launch([str(path)], ray_session)
    run_dir, lines = read_until_iteration(process, 2)
    assert runs_json(capsys, out)["stopped"] == "running"
    time.sleep(1)  # into the third iteration (a signal between two stops at once)
    process.send_signal(signal.SIGTERM)
    lines += process.stdout.readlines()
    process.wait(timeout=120)
    output = "".join(lines)
    assert process.returncode == 130, output[-3000:]
    assert "SIGTERM: stopping after the current iteration" in output
    assert "continue with: rlplat train --resume" in output
    [checkpoint] = run_dir.glob("trial_*/checkpoint_*")
    info = CheckpointInfo.read(checkpoint)
    rows = (checkpoint.parent / "result.json").read_text().splitlines()
    assert info is not None and info.iteration == len(rows) == 3, (info, len(rows))
    statuses = runs_json(capsys, out)
    assert statuses == {"stopped": "interrupted", "crashed": "failed", "done": "finished"}
    code, table, _ = run_cli(capsys, "runs", out)
    assert code == 0
    lines = [
        line
        for line in table.splitlines()
        if line.strip().startswith(("done", "crashed", "stopped"))
    ]
    assert [line.split()[0] for line in lines] == ["stopped", "crashed", "done"]  # newest first
    done = lines[-1]
    assert " greedy " in done, "the best score is the greedy one eval, export and serve pick by"
    code, _, err = run_cli(capsys, "runs", tmp_path / "missing")
    assert code == 2 and "is not a directory" in err
