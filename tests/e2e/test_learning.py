"""Every registered algorithm learns: each trains on its identity task (tests/learning_tasks.py)
through ``rlplat train``'s path, and its checkpoint, played greedily by ``rlplat eval``, earns
what only a learned policy earns. The list is the registry's, so a broken loss or a new
algorithm without a task fails here."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from rlplat.algorithms.registry import algorithm_names, algorithm_record
from rlplat.metrics import lookup
from tests.e2e.helpers import eval_json
from tests.helpers import read_results, write_dataset
from tests.learning_tasks import EPISODES, LEARNING_TASKS, identity_act


def _dataset(kind: str, path, episodes: int):
    from envs.identity import Identity, IdentityBox

    continuous = kind == "continuous"
    env = IdentityBox() if continuous else Identity()
    recipe = {"factory": f"envs.identity:{type(env).__name__}"}
    act = identity_act(continuous, noise=0.1)
    actions = "the identity expert, Gaussian noise 0.1" if continuous else "the identity expert"
    return write_dataset(path, env, recipe, act, episodes, actions)


@pytest.mark.parametrize("algorithm", algorithm_names())
def test_the_algorithm_learns_its_identity_task(algorithm, ray_session, tmp_path, capsys):
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.run.launch import train

    task = LEARNING_TASKS.get(algorithm)
    assert task is not None, f"{algorithm} has no learning task: add one to tests/learning_tasks.py"
    text = task.experiment.replace("OUTPUT", str(tmp_path / "out"))
    if task.dataset:
        data = _dataset(task.dataset, tmp_path / "data", task.dataset_episodes)
        text = text.replace("DATA", str(data))
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    summary = train(load_experiment(path), console=Console(quiet=True))
    [trial] = summary.trials
    assert trial.error is None, trial.error
    rows = read_results(Path(trial.path))
    _assert_q_metrics_logged(algorithm, rows)
    if task.loss:
        losses = [lookup(row, task.loss) for row in rows if lookup(row, task.loss) is not None]
        assert losses[-1] < losses[0] / 2, f"{algorithm}'s {task.loss} did not halve: {losses}"
        return
    report = eval_json(capsys, summary.run_dir, "-n", str(EPISODES), "--seed", "100")
    mean = statistics.mean(_per_agent(episode) for episode in report["per_episode"])
    assert mean >= task.solved_above, (
        f"{algorithm} did not learn its identity task: greedy return {mean:.2f} per agent over "
        f"{EPISODES} episodes, learned is >= {task.solved_above:.2f}, random {task.random:.2f}"
    )


def _assert_q_metrics_logged(algorithm: str, rows: list[dict]) -> None:
    """The Q-value estimates the algorithm declares (what the doctor's q_divergence reads) are
    among its learner's metrics once it has trained."""
    declared = algorithm_record(algorithm).q_metrics
    logged = {
        key
        for row in rows
        for module, stats in (row.get("learners") or {}).items()
        if module != "__all_modules__" and isinstance(stats, dict)
        for key in stats
    }
    missing = [name for name in declared if name not in logged]
    assert not missing, f"{algorithm} declares Q metrics it never logged: {missing}"


def _per_agent(episode: dict) -> float:
    """An episode's return per agent (a team's agents each earn the team's mean reward)."""
    agents = episode.get("agent_returns")
    return statistics.mean(agents.values()) if agents else episode["return"]
