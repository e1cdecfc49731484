"""The progress line's ETA names the budget that ends the run first, and a target that may end it
sooner."""

from __future__ import annotations

from rlplat.callbacks.progress import eta_text
from rlplat.experiment.schema import StopSpec


def test_the_eta_names_the_nearest_budget_and_the_return_target():
    result = {"time_total_s": 10.0, "training_iteration": 5, "num_env_steps_sampled_lifetime": 5000}
    stop = StopSpec(env_steps=300_000, iterations=20, episode_return_mean=475)
    assert eta_text(result, stop) == "ETA 30s at iteration 20, sooner at return 475"
    assert eta_text(result, StopSpec(env_steps=10_000)) == "ETA 10s at 10,000 env steps"
    assert eta_text(result, StopSpec(episode_return_mean=475)) is None
