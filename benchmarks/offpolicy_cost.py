"""Milliseconds per update of RLlib's DQN and SAC, by part, under different replay settings.

    python benchmarks/offpolicy_cost.py [--variants rllib transitions ...] [--iterations 8]

Builds the shipped experiment's algorithm in this process (as a trial does), warms it up past
``num_steps_sampled_before_learning_starts``, then trains a few iterations and reads RLlib's own
timers: env sampling, replay add, replay sample and learner update, per training step. One
variant at a time, so the parts are measured on an otherwise idle CPU. Results go to
benchmarks/results/offpolicy_cost.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

from harness import REPO, load_results, results_file, save_results

RESULTS = results_file("offpolicy_cost.json")
DQN = "experiments/cartpole_dqn.yaml"
SAC = "experiments/pendulum_sac.yaml"
RLLIB_BUFFER = "training.replay_buffer_config.type=EpisodeReplayBuffer"
OURS = "training.replay_buffer_config.type=TransitionEpisodeReplayBuffer"
# Before: RLlib's buffer and RLlib's sampling settings (one env, RLlib's rollout fragment).
DQN_BEFORE = [
    RLLIB_BUFFER,
    "resources.env_runners.envs=1",
    "env_runners.rollout_fragment_length=auto",
]
SAC_BEFORE = [
    RLLIB_BUFFER,
    "training.training_intensity=null",
    "env_runners.rollout_fragment_length=1",
]
VARIANTS = {
    "dqn_before": (DQN, DQN_BEFORE),
    "dqn_transitions": (DQN, [*DQN_BEFORE, OURS]),
    "dqn_shipped": (DQN, []),  # transitions, 4 envs x 4 steps per sampling call
    "sac_before": (SAC, SAC_BEFORE),
    "sac_transitions": (SAC, [*SAC_BEFORE, OURS]),
    "sac_shipped": (SAC, []),  # transitions, 4 steps per sampling call, then 4 updates
}
PARTS = {
    "env sampling": "env_runner_sampling_timer",
    "replay add": "replay_buffer_add_data_timer",
    "replay sample": "replay_buffer_sampling_timer",
    "learner update": "learner_update_timer",
}


def measure(path: str, overrides: list[str], iterations: int) -> dict:
    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare
    from rlplat.run.trainable import trainable_for

    run = prepare(load_experiment(REPO / path, overrides), step_env=False)
    config = run.algo_config
    # Built as a trial is: rlplat's trainable puts the transition sampler in place.
    algo = trainable_for(run.experiment.algorithm)(config=run.resolved())
    buffer = type(algo.local_replay_buffer).__name__
    while True:  # past the warm-up, into steady learning
        result = algo.train()
        warm = 2 * config.num_steps_sampled_before_learning_starts
        if result["num_env_steps_sampled_lifetime"] >= warm:
            break
    steps_before = result["num_env_steps_sampled_lifetime"]
    updates_before = _updates(result, config.total_train_batch_size)
    started = time.perf_counter()
    for _ in range(iterations):
        result = algo.train()
    seconds = time.perf_counter() - started
    algo.stop()
    steps = result["num_env_steps_sampled_lifetime"] - steps_before
    updates = _updates(result, config.total_train_batch_size) - updates_before
    timers = result["timers"]
    return {
        "experiment": path,
        "overrides": overrides,
        "replay_buffer": buffer,
        "env_steps": steps,
        "updates": updates,
        "ms_per_update": round(1000 * seconds / max(updates, 1), 2),
        "env_steps_per_s": round(steps / seconds, 1),
        "parts_ms": {name: round(1000 * timers.get(key, 0.0), 2) for name, key in PARTS.items()},
    }


def _updates(result: dict, batch_size: int) -> int:
    trained = (result.get("learners") or {}).get("__all_modules__", {})
    return int(trained.get("num_env_steps_trained_lifetime", 0)) // batch_size


def main() -> None:
    import ray

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--iterations", type=int, default=8)
    args = parser.parse_args()
    ray.init(include_dashboard=False, logging_level=logging.ERROR)
    saved = load_results(RESULTS)
    for name in args.variants:
        path, overrides = VARIANTS[name]
        saved[name] = measure(path, overrides, args.iterations)
        print(name, json.dumps(saved[name]), flush=True)
    save_results(RESULTS, saved)


if __name__ == "__main__":
    main()
