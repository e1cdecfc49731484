"""rlplat's array sampling loop samples what RLlib's loop samples, for the same seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

from rlplat.environments.array_runner import ARRAY_LOOP, array_plan
from rlplat.environments.seeding import ArrayEnvRunner, SeededSingleAgentEnvRunner
from rlplat.experiment.load import load_experiment
from rlplat.prepare import prepare
from tests.helpers import CORRIDOR_LSTM, TINY_PPO, replace

# CartPole with 3 envs (episodes end at different steps of a call) and a running filter; a
# continuous SAC whose 200-step episodes end inside a sampling call and exactly at its end.
CARTPOLE_FILTERED = replace(
    TINY_PPO, "  env_runners: {count: 0}", "  env_runners: {count: 0, envs: 3}"
) + "connectors: [mean_std_filter]\n"
PENDULUM_SAC = """\
name: tiny-sac
algorithm: SAC
seed: 5
env: {id: Pendulum-v1}
resources: {env_runners: {count: 0}}
stop: {iterations: 1}
"""


def sampled(runner_class: type, path: Path, calls: list[dict]) -> list[list]:
    """The episode chunks of one sampling call per ``calls`` item (``sample``'s arguments)."""
    config = prepare(load_experiment(path, []), step_env=False).algo_config
    runner = runner_class(config=config, worker_index=0)
    try:
        if runner_class is ArrayEnvRunner:
            assert array_plan(runner) is not None, "the array loop would not sample this run"
        return [runner.sample(**arguments) for arguments in calls]
    finally:
        runner.stop()


def steps(*counts: int) -> list[dict]:
    return [{"num_timesteps": count} for count in counts]


# Evaluation samples whole episodes (greedy here), between training's calls of env steps.
EPISODES = [
    {"num_timesteps": 40},
    {"num_episodes": 4, "explore": False},
    {"num_timesteps": 60},
    {"num_episodes": 2},
]


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        (CARTPOLE_FILTERED, steps(150, 90, 200)),
        (PENDULUM_SAC, steps(150, 250, 100, 30)),
        (CARTPOLE_FILTERED, EPISODES),
    ],
    ids=["cartpole-3-envs-filtered", "pendulum-sac", "cartpole-whole-episodes"],
)
def test_the_array_loop_samples_what_rllibs_loop_samples(tmp_path, text, calls):
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    rllib = sampled(SeededSingleAgentEnvRunner, path, calls)
    ours = sampled(ArrayEnvRunner, path, calls)
    finished = 0
    for theirs, mine in zip(rllib, ours, strict=True):
        assert len(theirs) == len(mine)
        for a, b in zip(theirs, mine, strict=True):
            assert (len(a), a.t_started, a.is_terminated, a.is_truncated) == (
                len(b),
                b.t_started,
                b.is_terminated,
                b.is_truncated,
            )
            finished += a.is_done
            every = slice(None)
            np.testing.assert_array_equal(a.get_observations(every), b.get_observations(every))
            np.testing.assert_array_equal(a.get_actions(), b.get_actions())
            np.testing.assert_array_equal(a.get_rewards(), b.get_rewards())
            assert a.get_infos() == b.get_infos()
            assert set(a.extra_model_outputs) == set(b.extra_model_outputs)
            for key in a.extra_model_outputs:
                np.testing.assert_array_equal(
                    a.get_extra_model_outputs(key), b.get_extra_model_outputs(key)
                )
            assert a.observation_space == b.observation_space
    assert finished >= 2  # episodes ended inside the calls, not only at their cuts


def test_runs_rllibs_loop_for_a_recurrent_module(tmp_path):
    path = tmp_path / "lstm.yaml"
    path.write_text(CORRIDOR_LSTM.replace("OUTPUT", str(tmp_path)))
    config = prepare(load_experiment(path, []), step_env=False).algo_config
    runner = ArrayEnvRunner(config=config, worker_index=0)
    try:
        assert array_plan(runner) is None
        assert runner.sample(num_timesteps=30)  # RLlib's loop, with the LSTM's state
    finally:
        runner.stop()


def test_the_seam_rllib_names_the_loop_relies_on_are_there():
    """The array loop subclasses RLlib's runner and uses these of its members (Ray 2.60)."""
    for name in (
        "_sample",
        "_reset_envs_and_episodes",
        "_try_env_step",
        "_new_episode",
        "_make_on_episode_callback",
        "_increase_sampled_metrics",
        "_log_env_steps",
    ):
        assert callable(getattr(SingleAgentEnvRunner, name)), name


@pytest.mark.parametrize(
    ("text", "loop"),
    [
        (CARTPOLE_FILTERED, ARRAY_LOOP),
        (CORRIDOR_LSTM, "RLlib's loop: the module is recurrent"),
    ],
    ids=["filtered", "recurrent"],
)
def test_the_check_names_the_sampling_loop_and_run_json_keeps_it(text, loop, tmp_path):
    """The check before Ray builds the trial's env runner and says which loop samples (and
    why, where it is RLlib's): printed at the start, kept in run.json."""
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    run = prepare(load_experiment(path, []))
    assert run.sampling_line() == f"Sampling: {loop}"
    assert run.record()["sampling_loop"] == loop
    # and the learner it trains with, a class in a file
    assert run.learner_line() == "Learning: rlplat.algorithms.rllib_learners:PPOLearner"
    assert run.record()["learner_class"] == "rlplat.algorithms.rllib_learners:PPOLearner"
