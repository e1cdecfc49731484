"""rlplat's transition replay in a real DQN trial."""

from __future__ import annotations

from rlplat.algorithms.transition_memory import TransitionMemory
from tests.helpers import EXPERIMENTS


def test_a_trial_that_asks_for_the_transition_sampler_replays_with_it(ray_session):
    """RLlib validates its own buffer name; the trial replays from rlplat's array memory in its
    place and learns with it."""
    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare
    from rlplat.run.trials import trainable_for

    loaded = load_experiment(
        EXPERIMENTS / "cartpole_dqn.yaml",
        [
            "training.num_steps_sampled_before_learning_starts=100",
            "reporting.min_sample_timesteps_per_iteration=200",
        ],
    )
    run = prepare(loaded, step_env=False)
    assert run.algo_config.replay_buffer_config["type"] == "EpisodeReplayBuffer"
    algo = trainable_for("DQN")(config=run.resolved())
    try:
        assert type(algo.local_replay_buffer) is TransitionMemory
        result = algo.train()
        trained = result["learners"]["__all_modules__"]["num_env_steps_trained_lifetime"]
        assert trained > 0, "updates ran on batches the memory drew"
        stored = result["replay_buffer"]["num_env_steps_stored"]
        assert stored == result["num_env_steps_sampled_lifetime"]
        # The learner's per-sample TD errors (for prioritized replay) stay out of the result.
        assert "td_error" not in result["learners"]["default_policy"]
    finally:
        algo.stop()
