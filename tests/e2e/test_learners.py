"""Data-parallel learners: two learner actors on CPU (torch's gloo backend) train one policy."""

from __future__ import annotations

import numpy as np

from rlplat.experiment.load import load_experiment
from rlplat.prepare import prepare
from tests.helpers import TINY_PPO, replace


def module_weights(learner) -> dict[str, np.ndarray]:
    state = learner.module["default_policy"].get_state()
    return {name: np.asarray(value) for name, value in state.items()}


def learners_weights(algo) -> list[dict[str, np.ndarray]]:
    return [result.get() for result in algo.learner_group.foreach_learner(module_weights)]


def test_two_learners_hold_identical_weights_after_each_update(ray_session, write_yaml, tmp_path):
    """``resources.learners.count: 2`` splits each batch between two learner actors, whose
    gradients are averaged: after every update both hold the same weights, and the weights
    moved."""
    text = replace(
        TINY_PPO,
        "  env_runners: {count: 0}\n",
        "  env_runners: {count: 0}\n  learners: {count: 2, cpus: 0.5}\n",
    ).replace("OUTPUT", str(tmp_path / "out"))
    run = prepare(load_experiment(write_yaml(text)))
    algo = run.algo_config.build_algo()
    try:
        [initial, _] = learners_weights(algo)
        for _ in range(2):
            algo.train()
            first, second = learners_weights(algo)
            assert first.keys() == second.keys() == initial.keys()
            assert all(np.array_equal(first[name], second[name]) for name in first)
        assert any(not np.array_equal(first[name], initial[name]) for name in first)
    finally:
        algo.stop()
