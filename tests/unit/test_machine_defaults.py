"""Settings for one machine: a single-agent file that names only the algorithm, the env and a
stop condition gets each of its algorithm's ``machine_defaults``, named with its source in the
run's experiment; what a file sets stays its own, and no shipped file relies on them."""

from __future__ import annotations

import pytest

from rlplat.algorithms.registry import algorithm_record
from rlplat.experiment.load import load_experiment
from rlplat.prepare.run_spec import _fill_default, prepare
from tests.helpers import EXPERIMENTS

MINIMAL = """\
name: minimal
algorithm: {algorithm}
env: {{id: {env}}}
stop: {{env_steps: 1000}}
"""


def _value(experiment, path: str):
    value = experiment
    for key in path.split("."):
        value = value[key] if isinstance(value, dict) else getattr(value, key)
    return value


@pytest.mark.parametrize(
    "algorithm, env",
    [
        ("DQN", "CartPole-v1"),
        ("SAC", "Pendulum-v1"),
        ("TD3", "Pendulum-v1"),
        ("PPO", "CartPole-v1"),
        ("CrossQ", "Pendulum-v1"),
    ],
)
def test_a_minimal_file_gets_every_machine_default_with_its_source(algorithm, env, write_yaml):
    run = prepare(load_experiment(write_yaml(MINIMAL.format(algorithm=algorithm, env=env))),
                  probe=False)  # fmt: skip
    wanted = algorithm_record(algorithm).machine_defaults
    assert wanted
    for default in wanted:
        assert _value(run.experiment, default.path) == default.value
    assert run.experiment.defaults == {d.path: d.source for d in wanted}
    assert run.resolved()["defaults"] == run.experiment.defaults, "experiment.yaml names them"
    assert any(f"{algorithm} settings for one machine" in note for note in run.notes)
    config = run.algo_config
    if algorithm == "PPO":
        assert (config.lr, config.minibatch_size, config.grad_clip) == (3e-4, 64, 0.5), "SB3's"
        return
    intensity = next(d.value for d in wanted if d.path == "training.training_intensity")
    assert config.training_intensity == intensity
    assert config.rollout_fragment_length != "auto", "sampling calls of several env steps"


def test_a_size_cut_for_the_cpu_is_left_to_the_reference_where_the_learner_has_a_gpu(write_yaml):
    path = write_yaml(MINIMAL.format(algorithm="CrossQ", env="Pendulum-v1"))
    on_cpu = prepare(load_experiment(path), probe=False).experiment
    assert on_cpu.training["critic_hiddens"] == [256, 256]
    assert "2048x2048" in on_cpu.defaults["training.critic_hiddens"], "the reference one key away"
    on_gpu = prepare(load_experiment(path, ["resources.learners.gpus=1"]), probe=False).experiment
    assert "critic_hiddens" not in on_gpu.training


def test_what_a_file_sets_stays_its_own(write_yaml):
    text = MINIMAL.format(algorithm="DQN", env="CartPole-v1") + (
        "training: {training_intensity: 4, replay_buffer_config: {capacity: 5000}}\n"
    )
    run = prepare(load_experiment(write_yaml(text)), probe=False)
    assert run.experiment.training["training_intensity"] == 4
    assert run.experiment.training["replay_buffer_config"] == {
        "capacity": 5000, "type": "TransitionEpisodeReplayBuffer",
    }  # fmt: skip
    assert "training.training_intensity" not in run.experiment.defaults
    assert "training.replay_buffer_config.type" in run.experiment.defaults


def test_a_resolved_experiment_read_back_gets_no_defaults_again(write_yaml, tmp_path):
    from rlplat.experiment.yaml_io import dump_yaml

    first = prepare(load_experiment(write_yaml(MINIMAL.format(algorithm="SAC", env="Pendulum-v1"))),
                    probe=False)  # fmt: skip
    again_file = tmp_path / "experiment.yaml"
    again_file.write_text(dump_yaml(first.resolved()))
    again = prepare(load_experiment(again_file), probe=False)
    assert again.experiment.defaults == first.experiment.defaults
    assert again.algo_config.training_intensity == first.algo_config.training_intensity
    assert not any("settings for one machine" in note for note in again.notes)


# The package demos are minimal files on purpose: they show what a user's first file gets.
SHIPPED = sorted(p for p in EXPERIMENTS.rglob("*.yaml") if p.parent.name != "packages")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(EXPERIMENTS)))
def test_no_shipped_file_relies_on_machine_defaults(path):
    """A shipped single-agent file writes every setting its algorithm would otherwise default
    (RLlib's own where it relied on them), so its runs are what they were before the defaults
    existed."""
    experiment = load_experiment(path).experiment
    if not any(
        _fill_default(experiment, default.path.split("."), default.value) is not None
        for default in algorithm_record(experiment.algorithm).machine_defaults
    ):
        return
    applied = prepare(load_experiment(path), probe=False).experiment.defaults  # multi-agent: none
    assert applied == {}, f"{path.name} leaves out {sorted(applied)}: write them in the file"


def test_a_default_yields_to_the_key_the_file_gives_instead(write_yaml):
    """A minimal PPO file with RLlib's older train_batch_size was refused for the machine
    default train_batch_size_per_learner, named as a line of the file: the file's key stands."""
    text = (
        MINIMAL.format(algorithm="PPO", env="CartPole-v1") + "training: {train_batch_size: 4000}\n"
    )
    run = prepare(load_experiment(write_yaml(text)), probe=False)
    assert run.experiment.training["train_batch_size"] == 4000
    assert "training.train_batch_size_per_learner" not in run.experiment.defaults
    assert "train_batch_size_per_learner" not in run.experiment.training
    assert run.algo_config.total_train_batch_size == 4000
