"""Envs from packages rlplat does not ship, each from a shipped file of a few lines with no
RLlib keys: MiniGrid (Dict observations), highway-env (a 2D Box) and PettingZoo's Knights
Archers Zombies (a 2D Box per agent) train through Tune and play back in ``rlplat eval``."""

from __future__ import annotations

import pytest
from rich.console import Console

from tests.e2e.helpers import eval_json
from tests.helpers import EXPERIMENTS

TINY = [
    "training.train_batch_size_per_learner=128",
    "training.minibatch_size=64",
    "training.num_epochs=1",
    "stop.iterations=1",
    "resources.env_runners.count=0",
    "evaluation.evaluation_interval=null",
]
FLATTENED = {
    "minigrid_ppo": "rlplat.environments.observations:FlatObservation",
    "highway_ppo": "rlplat.environments.observations:FlatObservation",
    "kaz_ppo": "flatten_v0",
}


@pytest.mark.parametrize("name", list(FLATTENED))
def test_a_package_env_trains_and_plays_back(name, ray_session, tmp_path, capsys):
    from rlplat.experiment.load import load_experiment
    from rlplat.experiment.yaml_io import parse_yaml
    from rlplat.run.launch import train

    path = EXPERIMENTS / "packages" / f"{name}.yaml"
    assert len(path.read_text().splitlines()) <= 15
    loaded = load_experiment(path, [*TINY, f"output_dir={tmp_path / 'out'}"])
    summary = train(loaded, console=Console(quiet=True))
    assert summary.trials[0].status == "finished", summary.trials[0].error
    recorded, _ = parse_yaml(
        (tmp_path / "out").glob("*/*/experiment.yaml").__next__().read_text(), ""
    )
    assert FLATTENED[name] in recorded["env"]["wrappers"], "the default is in experiment.yaml"
    report = eval_json(capsys, summary.run_dir, "-n", "1")
    assert report["episodes"] == 1 and report["per_episode"][0]["length"] > 0
