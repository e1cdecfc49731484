"""rlplat's transition-level replay sampler in a real DQN trial."""

from __future__ import annotations

from rlplat.algorithms.replay import TransitionEpisodeReplayBuffer
from tests.helpers import EXPERIMENTS


def test_a_trial_that_asks_for_the_transition_sampler_replays_with_it(ray_session):
    """RLlib validates its own buffer name; the trial builds rlplat's sampler in its place and
    learns with it."""
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
        assert type(algo.local_replay_buffer) is TransitionEpisodeReplayBuffer
        result = algo.train()
        trained = result["learners"]["__all_modules__"]["num_env_steps_trained_lifetime"]
        assert trained > 0, "updates ran on batches the transition sampler drew"
        # The learner's per-sample TD errors (for prioritized replay) stay out of the result.
        assert "td_error" not in result["learners"]["default_policy"]
    finally:
        algo.stop()
