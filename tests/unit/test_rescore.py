"""What the end-of-run re-scoring (checkpoint.rescore) says about a trial's checkpoints, on
recorded checkpoint infos: which one is best with its interval, which one the training-time
score had ranked first, and a stop condition that fired on a noisy window."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from rlplat.checkpoints import CHECKPOINT_INFO, RLLIB_MARKER, CheckpointInfo
from rlplat.experiment.load import load_experiment
from rlplat.policy.rollout import Stats
from rlplat.run import rescore
from rlplat.run.rescore import Rescored, _noisy_stop, _verdict
from tests.helpers import TINY_PPO


def _rescored(name: str, score: float, interval: float, training: float) -> Rescored:
    info = CheckpointInfo(
        score=score, score_interval=interval, training_score=training, evaluation_episodes=5
    )
    return Rescored(Path("trial_00000") / name, info)


def test_the_verdict_names_the_best_and_the_checkpoint_training_had_ranked_first():
    lucky = _rescored("checkpoint_000001", -329.6, 95.2, training=-120.4)
    steady = _rescored("checkpoint_000002", -152.1, 41.3, training=-180.0)
    line = _verdict([lucky, steady], first_pick=lucky.checkpoint, pick=steady.checkpoint)
    assert line.startswith("  best: checkpoint_000002 -152.10 ± 41.30; checkpoint_000001 -329.60")
    assert "During training checkpoint_000001 ranked first (-120.40 over 5 episodes)" in line


def test_the_verdict_says_nothing_of_training_when_both_rankings_agree():
    first = _rescored("checkpoint_000001", -140.0, 40.0, training=-150.0)
    second = _rescored("checkpoint_000002", -300.0, 150.0, training=-190.0)
    line = _verdict([first, second], first_pick=first.checkpoint, pick=first.checkpoint)
    assert "During training" not in line


def test_a_stop_on_a_window_the_greedy_policy_does_not_reach_is_called_noisy():
    newest = CheckpointInfo(episode_return_mean=-195.0)
    below = CheckpointInfo(score=-300.0, score_interval=60.0)
    said = _noisy_stop(-200.0, newest, below)
    assert said is not None and "read -195.00" in said and "-300.00 ± 60.00" in said
    within = CheckpointInfo(score=-230.0, score_interval=40.0)  # the target is inside its interval
    assert _noisy_stop(-200.0, newest, within) is None
    not_reached = CheckpointInfo(episode_return_mean=-250.0)  # another condition stopped it
    assert _noisy_stop(-200.0, not_reached, below) is None


def _trial(tmp_path: Path, scores: list[float]) -> Path:
    """A trial directory whose checkpoints carry only what ranking reads (their score)."""
    trial = tmp_path / "run" / "trial_00000"
    for index, score in enumerate(scores):
        checkpoint = trial / f"checkpoint_{index:06d}"
        checkpoint.mkdir(parents=True)
        (checkpoint / RLLIB_MARKER).write_text("{}")
        CheckpointInfo(iteration=index, score=score, score_metric="eval_episode_return_mean").write(
            checkpoint
        )
    return trial


def _experiment(tmp_path: Path):
    path = tmp_path / "exp.yaml"
    path.write_text(TINY_PPO.replace("OUTPUT", str(tmp_path / "out")))
    return load_experiment(path).experiment


def test_a_checkpoint_that_cannot_be_replayed_leaves_every_score_as_training_left_it(
    tmp_path, monkeypatch
):
    """The second checkpoint's env raises while it is replayed: no score of the trial changes
    (a trial is never ranked by scores of two kinds), nothing is raised, and the run says why."""
    trial = _trial(tmp_path, [-200.0, -150.0])
    played = []

    class Report:
        returns = Stats(-100.0, 10.0, -120.0, -80.0)
        episodes = 20

    def evaluate(checkpoint, options, say, deadline=None, before_episode=None):
        played.append(checkpoint.name)
        if len(played) == 2:
            raise KeyError("agent_7")
        return Report()

    monkeypatch.setattr(rescore, "evaluate", evaluate)
    before = {c: (c / CHECKPOINT_INFO).read_text() for c in trial.glob("checkpoint_*")}
    console = Console(record=True, width=200)
    assert not rescore.rescore_run(trial.parent, _experiment(tmp_path), console)
    assert played == ["checkpoint_000000", "checkpoint_000001"]
    assert {c: (c / CHECKPOINT_INFO).read_text() for c in before} == before
    assert "not re-scored (KeyError: 'agent_7')" in console.export_text()


def test_a_replayed_trial_is_ranked_by_the_new_mean(tmp_path, monkeypatch):
    trial = _trial(tmp_path, [-100.0, -300.0])  # training ranked the first one best

    class Report:
        def __init__(self, mean):
            self.returns = Stats(mean, 20.0, mean - 40, mean + 40)
            self.episodes = 20

    means = {"checkpoint_000000": -250.0, "checkpoint_000001": -140.0}
    monkeypatch.setattr(rescore, "evaluate", lambda c, o, say, **_: Report(means[c.name]))
    console = Console(record=True, width=200)
    assert rescore.rescore_run(trial.parent, _experiment(tmp_path), console)
    infos = {c.name: CheckpointInfo.read(c) for c in trial.glob("checkpoint_*")}
    assert infos["checkpoint_000001"].score == -140.0
    assert infos["checkpoint_000001"].training_score == -300.0
    assert infos["checkpoint_000001"].score_interval > 0
    said = console.export_text()
    assert "best: checkpoint_000001 -140.00" in said
    assert "During training checkpoint_000000 ranked first (-100.00)" in said


def test_a_budget_too_small_to_play_more_than_training_did_keeps_the_training_scores(
    tmp_path, monkeypatch
):
    """checkpoint.rescore_share 0.1 of 10 s of training: 1 s for two checkpoints, in which
    (this stand-in says) 3 episodes fit, fewer than the 5 each played during training."""
    trial = _trial(tmp_path, [-200.0, -150.0])
    (trial / "result.json").write_text(
        '{"time_total_s": 10.0, "training_iteration": 4, '
        '"evaluation_cost": {"time_total_s": 1.5}}\n'
    )
    deadlines = []

    class Report:
        returns = Stats(-100.0, 10.0, -120.0, -80.0)
        episodes = 3

    def evaluate(checkpoint, options, say, deadline=None, before_episode=None):
        deadlines.append(deadline)
        return Report()

    monkeypatch.setattr(rescore, "evaluate", evaluate)
    before = {c: (c / CHECKPOINT_INFO).read_text() for c in trial.glob("checkpoint_*")}
    console = Console(record=True, width=300)
    assert not rescore.rescore_run(trial.parent, _experiment(tmp_path), console)
    assert {c: (c / CHECKPOINT_INFO).read_text() for c in before} == before
    said = console.export_text()
    assert "Re-scoring within 1.0 s (10% of 10 s of training: checkpoint.rescore_share" in said
    assert "Greedy evaluation during training took 1.5 s of those (15%" in said
    assert "the budget let checkpoint_000000 play 3 episode(s)" in said
    assert len(deadlines) == 1 and deadlines[0] is not None, "stopped after the first checkpoint"


def test_a_ctrl_c_python_drops_in_a_weakref_callback_stops_the_block_at_its_next_check(monkeypatch):
    """Python ignores an exception raised while a weakref callback runs ("Exception ignored
    in ..."): a Ctrl-C landing there was lost and re-scoring went on. The next episode's check
    stops it."""
    import os
    import signal
    import weakref

    from rlplat.util.signals import stopped_by_signals

    class Collected:
        pass

    def signal_inside_the_callback(_ref: object) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(1000))  # bytecode for the handler to run in, here

    dropped = []
    monkeypatch.setattr("sys.unraisablehook", lambda raised: dropped.append(raised.exc_type))
    episodes = []
    try:
        with stopped_by_signals() as stop:
            for episode in range(10):
                stop.raise_if_asked()
                episodes.append(episode)
                if episode == 2:
                    thing = Collected()
                    held = weakref.ref(thing, signal_inside_the_callback)
                    del thing
                    assert held() is None
    except KeyboardInterrupt as stopped:
        assert str(stopped) == "SIGINT"
    assert dropped == [KeyboardInterrupt], "Python dropped the handler's exception"
    assert episodes == [0, 1, 2]
