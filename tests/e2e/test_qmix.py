"""QMIX / VDN / IQL for real: the env runner, training, a Tune grid over mixers, eval, export."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlplat.environments.make import EnvCreator
from rlplat.environments.team import TeamEnvCreator
from tests.e2e.helpers import eval_json, export_report
from tests.helpers import EXPERIMENTS


def test_env_runner_plays_new_episodes_each_call_yet_reproducibly(ray_session):
    """RLlib re-seeds at every whole-episode sample() call; QMIX's runner seeds only once."""
    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare

    config = prepare(load_experiment(EXPERIMENTS / "simple_spread_qmix.yaml")).algo_config

    def first_states() -> list[float]:
        runner = config.env_runner_cls(config=config)
        states = [float(runner.sample()[0].get_observations(0)["state"].sum()) for _ in range(3)]
        runner.stop()
        return states

    states = first_states()
    assert len(set(states)) == 3, "every call must start a different episode"
    assert first_states() == states, "the same seed must give the same episodes"


def test_env_runner_acts_with_the_learners_own_parameters(ray_session, tmp_path):
    """QMIX learns between sampling calls: with no remote env runner, its env runner's module
    holds the learner's parameter tensors, so each update is what the next episode plays with."""
    import torch

    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare
    from rlplat.run.trials import trainable_for

    overrides = [
        "training.batch_episodes=4",
        "training.learning_starts_episodes=4",
        "training.recurrent=false",
        f"output_dir={tmp_path}",
    ]
    experiment = load_experiment(EXPERIMENTS / "simple_spread_qmix.yaml", overrides)
    algo = trainable_for("QMIX")(config=prepare(experiment, step_env=False).resolved())
    try:
        learner = dict(algo.learner_group._learner.module["default_policy"].named_parameters())
        before = {name: tensor.detach().clone() for name, tensor in learner.items()}
        acting = dict(algo.env_runner_group.local_env_runner.module.named_parameters())
        algo.train()
        assert acting and all(tensor is learner[name] for name, tensor in acting.items())
        assert any(not torch.equal(before[name], acting[name]) for name in acting), "no update"
    finally:
        algo.stop()


# --- training, Tune, eval -----------------------------------------------------------------------


def test_tune_grid_over_mixers_qmix_finds_8_vdn_settles_for_7(ray_session, tmp_path):
    """The two-step game of the QMIX paper, seed 0, as a Tune grid search over the mixer."""
    from ray import tune

    from rlplat.algorithms.qmix import QMIX
    from rlplat.experiment.load import load_experiment
    from rlplat.policy.restore import Policy
    from rlplat.policy.rollout import run_episode
    from rlplat.prepare import prepare

    loaded = prepare(load_experiment(EXPERIMENTS / "two_step_qmix.yaml"))
    config = loaded.algo_config.copy(copy_frozen=False)
    config.training(mixer=tune.grid_search(["qmix", "vdn"]))
    results = tune.Tuner(
        QMIX,
        param_space=config,
        run_config=tune.RunConfig(
            storage_path=str(tmp_path),
            stop={"num_env_steps_sampled_lifetime": 10_000},
            checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=True),
            verbose=0,
        ),
    ).fit()
    assert not results.errors
    greedy = {}
    env = EnvCreator(loaded.experiment.env)
    for result in results:
        policy = Policy.from_checkpoint(Path(result.checkpoint.path))
        team = TeamEnvCreator(env, "common")()
        greedy[result.config["mixer"]] = run_episode(policy.actor(), team, seed=0, explore=False)
    assert greedy["qmix"].episode_return == 8.0
    assert greedy["vdn"].episode_return == 7.0
    assert greedy["qmix"].agent_returns == {"agent_0": 8.0, "agent_1": 8.0}


def test_simple_spread_qmix_trains_on_env_runners_and_evaluates(spread_qmix_run, tmp_path, capsys):
    trial = spread_qmix_run.trials[0]
    assert trial.env_steps == 2000
    report = eval_json(
        capsys, spread_qmix_run.run_dir, "-n", "2", "--render", "gif", "--out", tmp_path
    )
    assert list(report["agent_returns"]) == ["agent_0", "agent_1", "agent_2"]
    for episode in report["per_episode"]:
        assert episode["return"] == pytest.approx(sum(episode["agent_returns"].values()))
        assert episode["length"] == 25
    from PIL import Image

    assert Image.open(report["videos"][0]).n_frames == 25


def test_another_cooperative_pettingzoo_env_trains_and_evaluates(ray_session, tmp_path, capsys):
    """mpe2 simple_reference: 2 agents, 50 discrete actions (move x say), a 42-dim env state."""
    from rich.console import Console

    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare
    from rlplat.run.launch import train

    loaded = load_experiment(
        EXPERIMENTS / "simple_spread_qmix.yaml",
        [
            f"output_dir={tmp_path / 'out'}",
            "env.pettingzoo=mpe2.simple_reference_v3",
            "env.kwargs={max_cycles: 25, continuous_actions: false}",
            "stop.iterations=1",
            "training.batch_episodes=4",
            "training.learning_starts_episodes=4",
            "training.mixer=vdn",
        ],
    )
    assert prepare(loaded).experiment.training["global_state"] == "env"
    summary = train(loaded, console=Console(quiet=True))
    assert summary.trials[0].status == "finished", summary.trials[0].error
    report = eval_json(capsys, summary.run_dir, "-n", "1")
    assert list(report["agent_returns"]) == ["agent_0", "agent_1"]


def test_qmix_exports_its_agent_network_with_the_gru_state(spread_qmix_run, tmp_path, capsys):
    """Decentralised execution: one agent network call per agent, its GRU state carried."""
    report, manifest = export_report(capsys, spread_qmix_run.run_dir, tmp_path / "qmix")
    parity = report["parity"]
    assert parity["passed"] and parity["agreement"] == 1.0
    assert parity["compared_actions"] == 2 * 5 * 25  # joint actions, every step
    assert parity["checkpoint"]["returns"] == parity["onnx"]["returns"]
    policy = manifest["policies"]["default_policy"]
    assert [i["name"] for i in policy["inputs"]] == ["obs", "action_mask", "state_in"]
    assert [o["name"] for o in policy["outputs"]] == ["action", "action_dist_inputs", "state_out"]
    assert [part["name"] for part in policy["state"]["layout"]][0] == "hidden"
    assert manifest["agents"] == dict.fromkeys(["agent_0", "agent_1", "agent_2"], "default_policy")

    from rlplat.runtime import load

    agent = load(report["directory"]).policy_for("agent_0")
    obs = np.zeros(18, np.float32)
    first = agent.forward([obs])["action_dist_inputs"]
    second = agent.forward([obs])["action_dist_inputs"]
    assert not np.allclose(first, second), "the same observation, a different memory"
    agent.reset()
    assert np.allclose(agent.forward([obs])["action_dist_inputs"], first)
