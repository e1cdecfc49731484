"""A killed or interrupted ``rlplat train`` continues exactly where its checkpoint left it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas
import pytest
from rich.console import Console

from rlplat.checkpoints import CheckpointInfo
from rlplat.errors import UserError
from rlplat.experiment.load import load_experiment
from rlplat.run.launch import resume as launch_resume
from rlplat.run.launch import train
from tests.e2e.helpers import resume, runs_json
from tests.helpers import (
    REPO,
    TINY_PPO,
    iterations_logged,
    launch,
    read_until_iteration,
    read_until_resumable,
    rest_of_output,
)

EXPERIMENTS = {
    "PPO": """\
name: resume-ppo
algorithm: PPO
seed: 5
env: {id: CartPole-v1}
training: {train_batch_size_per_learner: 256, minibatch_size: 128, num_epochs: 1}
""",
    "DQN": """\
name: resume-dqn
algorithm: DQN
seed: 5
env: {id: CartPole-v1}
training:
  train_batch_size_per_learner: 32
  replay_buffer_config: {type: EpisodeReplayBuffer, capacity: 50000}
  num_steps_sampled_before_learning_starts: 64
  training_intensity: 0.25
# One step per call (and one env, in COMMON): a vector of envs restarts its episodes on
# resume, and their ends decide how many env steps each later call samples.
env_runners: {rollout_fragment_length: auto}
reporting: {min_sample_timesteps_per_iteration: 250}
evaluation: {evaluation_interval: null}   # PPO's run resumes with evaluation; this one without
""",
}
COMMON = """\
resources:
  env_runners: {count: 0, envs: 1}
stop: {iterations: 12}
checkpoint: {every: 3, keep: null}
output_dir: OUTPUT
"""


def episode_return_steps(trial_dir: Path) -> list[int]:
    """The x values of episode/return_mean across all of a trial's event files, in file order."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    return [
        event.step
        for path in sorted(trial_dir.glob("events.out.tfevents.*"))
        for event in EventFileLoader(str(path)).Load()
        for value in event.summary.value
        if value.tag == "episode/return_mean"
    ]


@pytest.mark.parametrize(
    ("algorithm", "driver"), [("PPO", "auto"), ("DQN", "auto"), ("PPO", "actor")]
)
def test_sigkilled_run_resumes_exactly(
    algorithm, driver, ray_session, write_yaml, capsys, tmp_path
):
    """SIGKILL mid-run: ``rlplat runs`` calls it interrupted; ``--resume``: the same final counts
    as an uninterrupted run, one curve. On both paths a single trial can take: rlplat's own loop
    in the command's process, which keeps no Tune state and resumes from its newest complete
    checkpoint, and a trial actor under Tune (``resources.driver.process: actor``), resumed from
    Tune's saved state (a killed search: test_search.py::test_killed_search_resumes_with_every_
    trial_accounted_for)."""
    # PPO's iterations take ~0.1 s: enough of them that the kill lands mid-run.
    iterations, kill_at = {"PPO": (24, 12), "DQN": (12, 8)}[algorithm]
    text = (EXPERIMENTS[algorithm] + COMMON).replace("iterations: 12", f"iterations: {iterations}")
    path = write_yaml(text.replace("OUTPUT", str(tmp_path / "out")), name="killed.yaml")
    process = launch([str(path), f"resources.driver.process={driver}"], ray_session)
    killed: dict[str, Path] = {}

    def kill_mid_run() -> None:
        try:
            killed["run_dir"] = read_until_resumable(process, kill_at)
        finally:
            os.killpg(process.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_mid_run)
    killer.start()  # the uninterrupted reference trains meanwhile, in this process
    reference = train(
        load_experiment(write_yaml(text.replace("OUTPUT", str(tmp_path / "reference")))),
        console=Console(quiet=True),
    ).trials[0]
    killer.join(timeout=600)
    process.wait()
    assert process.returncode == -signal.SIGKILL and "run_dir" in killed
    run_dir = killed["run_dir"]
    [trial_dir] = run_dir.glob("trial_*")
    name = f"resume-{algorithm.lower()}"
    deadline = time.monotonic() + 30  # a killed driver takes a moment to be gone from /proc
    while (status := runs_json(capsys, tmp_path / "out")).get(name) == "running":
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert status == {name: "interrupted"}
    tune_state = list(run_dir.glob("experiment_state-*.json"))
    assert bool(tune_state) == (driver == "actor"), "only a run on Tune keeps Tune's state"

    resumed = resume(run_dir, ray_session)
    assert runs_json(capsys, tmp_path / "out") == {name: "finished"}
    summary = json.loads((run_dir / "summary.json").read_text())["trials"][0]
    assert summary["iterations"] == reference.iterations == iterations
    assert summary["env_steps"] == reference.env_steps
    assert iterations_logged(trial_dir) == list(range(1, iterations + 1)), "none logged twice"
    progress = pandas.read_csv(trial_dir / "progress.csv")  # one table across the restart
    assert list(progress["training_iteration"]) == list(range(1, iterations + 1))

    steps = episode_return_steps(trial_dir)
    assert len(steps) == iterations and steps[0] > 0
    assert all(a < b for a, b in zip(steps, steps[1:], strict=False)), f"x goes back: {steps}"
    assert steps[-1] == reference.env_steps

    continued = [line for line in resumed.stdout.splitlines() if "continues from" in line]
    assert continued, resumed.stdout[-2000:]
    checkpoint = trial_dir / continued[0].split("continues from ")[1].split()[0]
    info = CheckpointInfo.read(checkpoint)
    assert info is not None and info.iteration % 3 == 0 and 3 <= info.iteration < iterations
    if algorithm == "DQN":
        first_after = json.loads(
            (trial_dir / "result.json").read_text().splitlines()[info.iteration]
        )
        assert first_after["training_iteration"] == info.iteration + 1
        restored = first_after["replay"]["env_steps_restored"]
        assert restored == info.replay_env_steps == info.env_steps > 0, (
            "the replay buffer holds every step sampled before the checkpoint"
        )
        assert f"replay buffer restored ({restored:,} env steps)" in resumed.stdout


def test_ctrl_c_through_a_pipe_whose_reader_died_still_ends_with_a_checkpoint(
    ray_session, write_yaml, tmp_path
):
    """``rlplat train exp.yaml | tee log`` and Ctrl-C, which stops tee too: the run still
    writes its final checkpoint, and the rest of its output (the --resume hint) goes to stderr."""
    text = (EXPERIMENTS["PPO"] + COMMON).replace("every: 3", "every: 100")
    path = write_yaml(text.replace("iterations: 12", "iterations: 400"))
    path.write_text(path.read_text().replace("OUTPUT", str(tmp_path / "out")))
    with open(tmp_path / "stderr.txt", "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "rlplat.cli", "train", "--address", ray_session, str(path)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
        run_dir, _ = read_until_iteration(process, 2)
        process.stdout.close()  # the reader is gone
        os.killpg(process.pid, signal.SIGINT)
        process.wait(timeout=120)
    errors = (tmp_path / "stderr.txt").read_text()
    assert process.returncode == 130, errors[-3000:]
    assert "continue with: rlplat train --resume" in errors and "BrokenPipeError" not in errors
    [trial_dir] = run_dir.glob("trial_*")
    assert list(trial_dir.glob("checkpoint_*")), "the final checkpoint of the graceful stop"


def test_second_ctrl_c_stops_at_once(ray_session, write_yaml, tmp_path):
    """Two Ctrl-C in a row: no waiting for a final checkpoint; the run can still be resumed."""
    text = (EXPERIMENTS["DQN"] + COMMON).replace("iterations: 12", "iterations: 400")
    # Iterations of at least 3 s: the second Ctrl-C lands in the one the first asked to finish.
    text = text.replace("per_iteration: 250}", "per_iteration: 250, min_time_s_per_iteration: 3}")
    path = write_yaml(text.replace("OUTPUT", str(tmp_path / "out")))
    process = launch([str(path)], ray_session)
    read_until_iteration(process, 1)
    time.sleep(1)  # into the second iteration: the first Ctrl-C waits for its end
    os.killpg(process.pid, signal.SIGINT)
    time.sleep(0.3)
    os.killpg(process.pid, signal.SIGINT)
    output = rest_of_output(process, 60)
    assert process.returncode == 130, output[-3000:]
    assert "Stopping now" in output


def test_ctrl_c_during_rescoring_stops_it_and_the_command_ends(ray_session, write_yaml, tmp_path):
    """Ctrl-C while the kept checkpoints are re-scored: Tune's run is over, so not the training's
    "stopping after the current iteration" line, but re-scoring stops at once, the checkpoints
    keep their training scores and the run's summary is written."""
    common = COMMON.replace("iterations: 12", "iterations: 2").replace(
        "checkpoint: {every: 3, keep: null}",
        "checkpoint: {every: 1, keep: null, rescore: 10000, rescore_share: null}",
    )
    path = write_yaml((EXPERIMENTS["PPO"] + common).replace("OUTPUT", str(tmp_path / "out")))
    process = launch([str(path)], ray_session)
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("Re-scoring the"):
            break
    assert lines and lines[-1].startswith("Re-scoring the"), "".join(lines)[-3000:]
    time.sleep(1.0)
    os.killpg(process.pid, signal.SIGINT)
    started = time.monotonic()
    output = "".join(lines) + rest_of_output(process, 60)
    assert time.monotonic() - started < 20, "re-scoring went on"
    assert process.returncode == 0, output[-3000:]
    assert "SIGINT: re-scoring stopped" in output, output[-3000:]
    assert "stopping after the current iteration" not in output
    [run_dir] = (tmp_path / "out" / "resume-ppo").iterdir()
    assert (run_dir / "summary.json").exists()
    for checkpoint in run_dir.glob("trial_*/checkpoint_*"):
        assert CheckpointInfo.read(checkpoint).score_interval is None, "training scores kept"


CARTPOLE_PPO = REPO / "experiments/cartpole_ppo.yaml"


def adam_steps(checkpoint: Path) -> float:
    """The step count of the default policy's Adam optimizer stored in a checkpoint."""
    import pickle

    state = pickle.loads((checkpoint / "learner_group/learner/state.pkl").read_bytes())
    optimizer = state["optimizer"]["default_policy_default_optimizer"]["state"]["state"]
    return float(next(iter(optimizer.values()))["step"])


def test_from_checkpoint_starts_a_new_run_with_the_trained_policy(
    solved_cartpole, ray_session, tmp_path
):
    """``--from`` with a lower learning rate and a new env kwarg (episodes cut at 100 steps): a
    new run, counters from zero, the first episodes already reach the cut;
    ``init.optimizer=true`` carries Adam's state over too."""
    solved = Path(solved_cartpole.run_dir)
    base = Path(solved_cartpole.trials[0].best_checkpoint)
    processes = {  # both at once, one CPU each (and under run directories of their own names)
        name: subprocess.Popen(
            [sys.executable, "-m", "rlplat.cli", "train", str(CARTPOLE_PPO)]
            + ["--from", str(solved), "--address", ray_session]
            + ["stop.iterations=3", "training.lr=0.0001", "env.kwargs={max_episode_steps: 100}"]
            + [f"output_dir={tmp_path / name}", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, extra in (("weights", []), ("optimizer", ["init.optimizer=true"]))
    }
    runs = {}
    for name, process in processes.items():
        output = process.communicate(timeout=600)[0]
        assert process.returncode == 0, output[-3000:]
        [trial_dir] = (tmp_path / name).glob("cartpole-ppo/*/trial_*")
        results = [
            json.loads(line) for line in (trial_dir / "result.json").read_text().split("\n") if line
        ]
        assert [r["training_iteration"] for r in results] == [1, 2, 3], "counters start at 0"
        returns = [r["env_runners"].get("episode_return_mean") for r in results]
        assert min(r for r in returns if r is not None) > 90, "a random policy gets ~20 of 100"
        result = results[-1]
        assert result["learners"]["default_policy"]["default_optimizer_learning_rate"] == 0.0001
        resolved = (trial_dir.parent / "experiment.yaml").read_text()
        assert str(base) in resolved, "the run records the checkpoint it started from"
        runs[name] = adam_steps(next(trial_dir.glob("checkpoint_*")))
    assert runs["optimizer"] > adam_steps(base) > runs["weights"]


def test_a_file_with_a_first_stage_trains_both_and_resume_of_the_first_finishes_the_second(
    ray_session, tmp_path
):
    """``init.experiment``: one command trains the first file (with this file's seed) and then
    this one from the first run's best checkpoint; a run stopped between the stages is finished
    by ``--resume`` of the first run."""
    tiny = TINY_PPO.replace("OUTPUT", str(tmp_path / "out"))
    tiny = tiny.replace("iterations: 3", "iterations: 1")
    (tmp_path / "first.yaml").write_text(tiny.replace("name: tiny-ppo", "name: first"))
    main = tmp_path / "main.yaml"
    main.write_text(tiny + "init: {experiment: first.yaml}\n")
    trained = subprocess.run(
        [sys.executable, "-m", "rlplat.cli", "train", str(main), "--seed", "7"]
        + ["--address", ray_session],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    [first] = (tmp_path / "out/first").iterdir()
    [second] = (tmp_path / "out/tiny-ppo").iterdir()
    assert "seed: 7" in (first / "experiment.yaml").read_text(), "the first stage takes the seed"
    started_from = load_experiment(second / "experiment.yaml").experiment.init.checkpoint
    assert Path(started_from).parent.parent == first, started_from

    # As if stopped before the second stage's Tune state was written: its resume starts it anew.
    shutil.rmtree(second)
    resumed = resume(first, ray_session)
    assert "Next stage" in resumed.stdout
    [second_again] = (tmp_path / "out/tiny-ppo").iterdir()
    assert list(second_again.glob("trial_*/checkpoint_*")), "the second stage trained"


def test_resume_of_a_run_that_wrote_no_checkpoint_says_so(tmp_path):
    """Ctrl-C before the first checkpoint, then --resume: it said "Resuming" and started again
    from iteration 1 without a word; now it refuses and gives the command that starts it anew."""
    run_dir = tmp_path / "tiny-ppo" / "2026-12-05_10-00-00"
    (run_dir / "trial_00000").mkdir(parents=True)
    (run_dir / "experiment.yaml").write_text(TINY_PPO.replace("OUTPUT", str(tmp_path)))
    (run_dir / "tuner.pkl").write_bytes(b"")
    with pytest.raises(UserError, match="nothing to resume from") as raised:
        launch_resume(run_dir)
    assert f"rlplat train {run_dir / 'experiment.yaml'}" in str(raised.value)



def test_resume_after_a_kill_between_the_last_checkpoint_and_the_summary_trains_no_more(
    ray_session, tmp_path
):
    """Killed after the trial's last (stopping) checkpoint but before the run's summary was
    written: --resume trained one iteration past the stop condition; now it finishes at once."""
    path = tmp_path / "exp.yaml"
    text = TINY_PPO.replace("OUTPUT", str(tmp_path / "out"))
    path.write_text(text.replace("iterations: 3", "env_steps: 500"))
    summary = train(load_experiment(path), console=Console(quiet=True))
    trial_dir = Path(summary.trials[0].path)
    logged = iterations_logged(trial_dir)
    run_dir = Path(summary.run_dir)
    (run_dir / "summary.json").unlink()
    resumed = launch_resume(run_dir, console=Console(quiet=True))
    assert resumed.trials[0].status == "finished"
    assert iterations_logged(trial_dir) == logged
