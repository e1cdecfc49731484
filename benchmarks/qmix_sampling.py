"""QMIX's env runner alone: env steps per second of ``sample()`` on LBF, no learner, no Ray.

    python benchmarks/qmix_sampling.py [--repo DIR] [--episodes 20] [--rounds 5] [overrides ...]

Builds the env runner of ``experiments/marl/lbf_qmix.yaml`` (with the dotted overrides) in this
process and times whole-episode ``sample()`` calls at epsilon's floor (its env-step count set past
the annealing, as for most of a run) and at epsilon 1 (the start). Prints the best round of each:
the sampling half of a training's cost, apart from the learner's updates. ``--repo`` measures
another checkout's rlplat (a ``git worktree`` of an older commit, say) with the same script.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def best_rate(runner, episodes: int, rounds: int) -> float:
    """The fastest of ``rounds`` calls sampling ``episodes`` whole episodes, in env steps/s."""
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        steps = sum(len(episode) for episode in runner.sample(num_episodes=episodes))
        best = max(best, steps / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=HERE, help="the checkout to measure")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("overrides", nargs="*", help="dotted overrides of lbf_qmix.yaml")
    args = parser.parse_args()
    repo = args.repo.resolve()
    sys.path.insert(0, str(repo))  # that checkout's rlplat, before the installed one
    import rlplat  # noqa: PLC0415
    from rlplat.experiment.load import load_experiment  # noqa: PLC0415
    from rlplat.prepare import prepare  # noqa: PLC0415

    print(f"rlplat from {Path(rlplat.__file__).parent}")
    experiment = load_experiment(repo / "experiments/marl/lbf_qmix.yaml", args.overrides)
    config = prepare(experiment, step_env=False).algo_config
    runner = config.env_runner_cls(config=config)
    runner.sample(num_episodes=2)  # warm-up: the first call builds and resets
    past_annealing = 10 * config.epsilon_anneal_steps
    for label, env_steps in (("epsilon 1 (start)", 0), ("epsilon floor", past_annealing)):
        runner.num_env_steps_sampled_lifetime = env_steps
        print(f"{label}: {best_rate(runner, args.episodes, args.rounds):,.0f} env steps/s")
    runner.stop()


if __name__ == "__main__":
    main()
