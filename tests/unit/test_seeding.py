"""Seeds are independent: no two seeds, runners or envs of a run replay the same env stream."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rlplat.environments.seeding import runner_seeds
from rlplat.experiment.load import load_experiment
from rlplat.prepare import prepare
from tests.helpers import SPREAD, TINY_PPO, replace


def with_envs(text: str, envs: int) -> str:
    return replace(text, "  env_runners: {count: 0}", f"  env_runners: {{count: 0, envs: {envs}}}")


def first_observations(path: Path, seed: int, *, runner: int = 0) -> np.ndarray:
    """The first observation of every env of an env runner of ``path`` run with ``seed``, built
    as rlplat builds the run's own runners."""
    config = prepare(load_experiment(path, [f"seed={seed}"]), step_env=False).algo_config
    env_runner = config.env_runner_cls(config=config, worker_index=runner)
    try:
        steps = config.num_envs_per_env_runner
        episodes = env_runner.sample(num_timesteps=steps, random_actions=True)
        firsts = {}
        for episode in episodes:  # chunks of one env share its episode id; keep the first
            firsts.setdefault(episode.id_, episode.get_observations(0))
        return np.array([_flat(obs) for obs in firsts.values()])
    finally:
        env_runner.stop()


def _flat(observation: object) -> np.ndarray:
    if isinstance(observation, dict):  # multi-agent: every agent's observation
        return np.concatenate([np.ravel(observation[a]) for a in sorted(observation)])
    return np.ravel(observation)


def shared_rows(a: np.ndarray, b: np.ndarray) -> int:
    return sum(any(np.array_equal(row, other) for other in b) for row in a)


def test_consecutive_seeds_of_an_8_env_run_start_every_env_differently(tmp_path):
    path = tmp_path / "ppo.yaml"
    path.write_text(with_envs(TINY_PPO, 8))
    seed0, seed1 = first_observations(path, 0), first_observations(path, 1)
    assert seed0.shape[0] == 8
    # RLlib's own seeding (env i: seed + i) made 7 of these 8 rows equal.
    assert shared_rows(seed0, seed1) == 0
    assert len({row.tobytes() for row in seed0}) == 8, "two envs of one runner start alike"
    np.testing.assert_array_equal(first_observations(path, 0), seed0)
    # Runner 1 of seed 0 shares nothing with runner 0 (RLlib: its env 0 was runner 0's env 1).
    assert shared_rows(first_observations(path, 0, runner=1), seed0) == 0


def test_multi_agent_runs_seed_their_envs_independently_too(tmp_path):
    path = tmp_path / "spread.yaml"
    path.write_text(with_envs(SPREAD, 2))
    seed0, seed1 = first_observations(path, 0), first_observations(path, 1)
    assert shared_rows(seed0, seed1) == 0
    np.testing.assert_array_equal(first_observations(path, 0), seed0)


def test_training_and_evaluation_runners_draw_from_different_streams():
    training_seed, training_envs = runner_seeds(7, runner=0, evaluation=False, num_envs=4)
    evaluation_seed, evaluation_envs = runner_seeds(7, runner=0, evaluation=True, num_envs=4)
    assert not {training_seed, *training_envs} & {evaluation_seed, *evaluation_envs}
    assert runner_seeds(-1, 0, False, 1) == runner_seeds(2**64 - 1, 0, False, 1)


def test_seeds_outside_what_every_runner_can_take_are_refused_before_anything_runs(tmp_path):
    """Negative seeds, and seeds whose runner offsets would pass Gymnasium's 2**32 - 1."""
    import pytest

    from rlplat.errors import UserError

    path = tmp_path / "exp.yaml"
    path.write_text(TINY_PPO.replace("OUTPUT", str(tmp_path / "out")))
    for override in ("seed=-1", f"seed={2**32}", "seeds=[0, -3]"):
        with pytest.raises(UserError, match="whole number"):
            load_experiment(path, [override])
    assert load_experiment(path, [f"seed={2**31 - 1}"]).experiment.seed == 2**31 - 1


def test_every_env_seed_fits_a_signed_32_bit_int():
    """PettingZoo's Hanabi (C++) raises on a seed of 2**31 or more: with full 32-bit seeds half of
    its env runners failed at their first reset while the check before Ray passed."""
    from rlplat.environments.seeding import runner_seeds

    seeds = [
        each
        for seed in range(64)
        for runner in range(3)
        for evaluation in (False, True)
        for each in (lambda own, envs: [own, *envs])(*runner_seeds(seed, runner, evaluation, 4))
    ]
    assert all(0 <= each < 2**31 for each in seeds)
    assert max(seeds) > 2**30, "still spread over the range"
