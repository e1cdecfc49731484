"""Data-parallel learners: two learner actors on CPU (torch's gloo backend) train one policy."""

from __future__ import annotations

import numpy as np
import pytest

from rlplat.experiment.load import load_experiment
from rlplat.prepare import prepare
from tests.helpers import EXPERIMENTS, TINY_PPO, replace


def module_weights(learner) -> dict[str, np.ndarray]:
    state = learner.module["default_policy"].get_state()
    return {name: np.asarray(value) for name, value in state.items()}


def learners_weights(algo) -> list[dict[str, np.ndarray]]:
    return [result.get() for result in algo.learner_group.foreach_learner(module_weights)]


def learner_nodes(algo) -> list[str]:
    import ray

    def node(learner) -> str:
        return ray.get_runtime_context().get_node_id()

    return [result.get() for result in algo.learner_group.foreach_learner(node)]


def test_two_learners_on_two_nodes_hold_identical_weights_after_each_update(
    ray_cluster, ray_session, write_yaml, tmp_path
):
    """``resources.learners.count: 2`` splits each batch between two learner actors, whose
    gradients are averaged (torch's gloo, here between two nodes of a local cluster, one learner
    on each): after every update both hold the same weights, and the weights moved."""
    nodes = [ray_cluster.add_node(num_cpus=1, resources={"learner_node": 1}) for _ in range(2)]
    ray_cluster.wait_for_nodes()
    text = replace(
        TINY_PPO,
        "  env_runners: {count: 0}\n",
        "  env_runners: {count: 0}\n"
        "  learners: {count: 2, cpus: 0.5, custom: {learner_node: 1}}\n",
    ).replace("OUTPUT", str(tmp_path / "out"))
    run = prepare(load_experiment(write_yaml(text)))
    algo = run.algo_config.build_algo()
    try:
        assert sorted(learner_nodes(algo)) == sorted(node.node_id for node in nodes)
        [initial, _] = learners_weights(algo)
        for _ in range(2):
            algo.train()
            first, second = learners_weights(algo)
            assert first.keys() == second.keys() == initial.keys()
            assert all(np.array_equal(first[name], second[name]) for name in first)
        assert any(not np.array_equal(first[name], initial[name]) for name in first)
    finally:
        algo.stop()
        for node in nodes:
            ray_cluster.remove_node(node)


@pytest.mark.parametrize(
    ("runners", "shared"), [("{count: 0}", True), ("{count: 1, envs: 1}", False)]
)
def test_the_env_runner_acts_with_the_learners_weights(ray_session, runners, shared, tmp_path):
    """DQN learning in its own process: with no remote env runner, the env runner's module holds
    the learner's parameters themselves (no copy after each training step); with one, RLlib's
    copy. Either way, after every training step the acting weights are the learned ones."""
    from rlplat.run.trials import trainable_for

    overrides = [
        "training.num_steps_sampled_before_learning_starts=64",
        "reporting.min_sample_timesteps_per_iteration=128",
        f"resources.env_runners={runners}",
        f"output_dir={tmp_path}",
    ]
    run = prepare(load_experiment(EXPERIMENTS / "cartpole_dqn.yaml", overrides), step_env=False)
    algo = trainable_for("DQN")(config=run.resolved())
    try:
        before = module_weights(algo.learner_group._learner)
        for _ in range(3):
            algo.train()
            learned = module_weights(algo.learner_group._learner)
            [acting] = algo.env_runner_group.foreach_env_runner(
                lambda runner: runner.module.get_state(), local_env_runner=shared
            )
            assert acting.keys() <= learned.keys()
            assert all(np.array_equal(learned[name], acting[name]) for name in acting)
        assert any(not np.array_equal(before[name], learned[name]) for name in before)
        learner = dict(algo.learner_group._learner.module["default_policy"].named_parameters())
        runner = algo.env_runner_group.local_env_runner
        module = runner.module if runner is not None else None
        held = module is not None and all(
            tensor is learner.get(name) for name, tensor in module.named_parameters()
        )
        assert held == shared
    finally:
        algo.stop()
