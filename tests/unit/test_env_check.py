"""The env check before Ray, part by part (env.check: contract, bounds, determinism): what it
refuses, what it accepts with a note, the same answer every time, and reasons never empty."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlplat.environments.contract import ContractBroken, check_contract
from rlplat.errors import ConfigError
from rlplat.experiment.load import load_experiment
from rlplat.experiment.sb3_names import SB3_NAMES, TAKEN_BY_SOME_ALGORITHM
from rlplat.experiment.schema import EnvCheck
from rlplat.util.raised import describe_raised
from tests.helpers import TINY_PPO, replace


class UnitBox(gym.Env):
    """Observations in [0, 1]; ``past`` is added to the last entry after the first reset
    (1.0 + 2.2e-16 is a clip computed in floating point; 0.5 is a real breach); ``noisy_reset``
    ignores the reset seed (Gymnasium's determinism check fails); ``assert_at`` fails a bare
    assert on that step."""

    observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, past: float = 0.0, noisy_reset: bool = False, assert_at: int = 0):
        self.past, self.noisy_reset, self.assert_at = past, noisy_reset, assert_at
        self.steps = 0
        self.unseeded = np.random.default_rng()

    def _observation(self) -> np.ndarray:
        value = self.unseeded.random() if self.noisy_reset else 0.5
        return np.array([0.0, value, 1.0 + self.past])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._observation(), {}

    def step(self, action):
        self.steps += 1
        if self.steps == self.assert_at:
            raise AssertionError
        return self._observation(), 1.0, self.steps >= 10, False, {}


def test_a_bound_broken_by_float_rounding_is_accepted_with_a_note_naming_the_real_value():
    report = check_contract(UnitBox(past=2.220446049250313e-16))
    [note] = report.notes
    assert "1.0000000000000002" in note and "float rounding" in note and "accepted" in note


def test_a_real_breach_is_refused_with_the_exact_value_and_bound_then_relaxed_part_by_part():
    with pytest.raises(ContractBroken) as refused:
        check_contract(UnitBox(past=0.5))
    assert refused.value.part == "bounds"
    assert "[2] = 1.5 past its high bound 1.0" in str(refused.value)
    warned = check_contract(UnitBox(past=0.5), levels=EnvCheck(bounds="warn"))
    [note] = warned.notes
    assert "= 1.5" in note and "env.check.bounds: warn" in note
    assert check_contract(UnitBox(past=0.5), levels=EnvCheck(bounds="off")).notes == []


def test_gymnasium_determinism_check_warns_by_default_and_refuses_when_asked():
    [note] = check_contract(UnitBox(noisy_reset=True)).notes
    assert "Gymnasium's env checker failed" in note and "env.check.determinism: warn" in note
    with pytest.raises(ContractBroken) as refused:
        check_contract(UnitBox(noisy_reset=True), levels=EnvCheck(determinism="refuse"))
    assert refused.value.part == "determinism"


def test_a_bare_assert_names_its_type_the_line_that_raised_and_the_packages_versions():
    with pytest.raises(ContractBroken) as raised:
        check_contract(UnitBox(assert_at=3))
    message = str(raised.value)
    assert "step() raised AssertionError at tests/unit/test_env_check.py:" in message
    assert "(`raise AssertionError`)" in message and "step 3 after reset" in message


def test_what_a_package_raises_names_its_file_and_the_versions_involved():
    with pytest.raises(AssertionError) as raised:
        gym.spaces.Discrete(0)
    described = describe_raised(raised.value)
    assert (
        described.startswith("AssertionError: ")
        and "(at gymnasium/spaces/discrete.py:" in described
    )
    assert f"[gymnasium {gym.__version__}, numpy {np.__version__}" in described


def test_the_check_steps_across_episode_ends_and_says_the_same_every_time():
    first = check_contract(gym.make("CartPole-v1"))
    again = check_contract(gym.make("CartPole-v1"))
    assert first.episodes_ended >= 2 and first.steps >= 32
    assert (first.steps, first.episodes_ended, first.notes) == (
        again.steps,
        again.episodes_ended,
        again.notes,
    )


@pytest.mark.parametrize(
    ("written", "levels"),
    [
        ("true", EnvCheck()),
        ("false", EnvCheck(contract="off", bounds="off", determinism="off")),
        ("{bounds: warn}", EnvCheck(bounds="warn")),
    ],
)
def test_env_check_takes_true_false_or_its_parts(tmp_path, written, levels):
    path = tmp_path / "exp.yaml"
    path.write_text(replace(TINY_PPO, "id: CartPole-v1", f"id: CartPole-v1\n  check: {written}"))
    assert load_experiment(path).experiment.env.check == levels


def test_a_stable_baselines3_name_is_refused_as_the_file_loads_with_rlplats_key(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(TINY_PPO)
    with pytest.raises(ConfigError) as refused:
        load_experiment(path, ["training.learning_rate=0.001"])
    message = str(refused.value)
    assert "'learning_rate' is Stable-Baselines3's name" in message and "training.lr" in message
    assert "training.learning_rate=0.001" in message  # where it was written


def test_the_stable_baselines3_names_refused_on_load_are_no_algorithms_setting():
    from rlplat.algorithms.registry import algorithm_names, get_algorithm_class
    from rlplat.rllib.build import builder_parameters

    taken = set()
    for name in algorithm_names():
        config_class = type(get_algorithm_class(name).get_default_config())
        taken |= set(SB3_NAMES) & set(builder_parameters(config_class, "training"))
    assert taken == TAKEN_BY_SOME_ALGORITHM


def test_packages_that_overwrite_each_others_files_are_named_with_the_fix(monkeypatch):
    from rlplat.environments import packages

    installed = {"pygame": "2.6.1", "pygame-ce": "2.5.8", "mujoco": "3.13.0",
                 "gymnasium-robotics": "1.4.2"}  # fmt: skip
    monkeypatch.setattr(packages, "_version", installed.get)
    packages.package_problems.cache_clear()
    try:
        pygame, robotics = packages.package_problems()
    finally:
        packages.package_problems.cache_clear()
    assert "pygame 2.6.1 and pygame-ce 2.5.8" in pygame and "pip install pygame-ce" in pygame
    assert "mujoco 3.13.0" in robotics and "'mujoco<3.12'" in robotics


class HalfOpen(gym.Env):
    """Observations in [0, inf): the first entry is ``values[step]`` (a list, as some envs return
    observations); rewards are NaN with ``nan_reward``."""

    observation_space = gym.spaces.Box(0.0, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, values: list[float], nan_reward: bool = False):
        self.values, self.nan_reward, self.steps = values, nan_reward, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return [self.values[0], 1.0], {}

    def step(self, action):
        self.steps += 1
        value = self.values[min(self.steps, len(self.values) - 1)]
        reward = float("nan") if self.nan_reward else 1.0
        return [value, 1.0], reward, self.steps >= 10, False, {}


def test_a_bound_is_judged_against_the_bound_crossed_even_where_the_other_is_infinite():
    with pytest.raises(ContractBroken) as refused:
        check_contract(HalfOpen([0.5, -3.0]))
    assert refused.value.part == "bounds" and "= -3.0 past its low bound 0.0" in str(refused.value)
    rounding = check_contract(HalfOpen([0.5, -1e-9]), levels=EnvCheck(determinism="off"))
    assert [n for n in rounding.notes if "float rounding" in n], rounding.notes


def test_a_rounding_note_does_not_hide_a_later_real_breach_under_bounds_warn():
    report = check_contract(
        HalfOpen([0.5, -1e-9, 0.5, -3.0]), levels=EnvCheck(bounds="warn", determinism="off")
    )
    assert any("float rounding" in n for n in report.notes)
    assert any("-3.0" in n and "env.check.bounds: warn" in n for n in report.notes)


def test_contract_warn_lets_a_nan_reward_through_with_a_note_and_refuses_by_default():
    with pytest.raises(ContractBroken) as refused:
        check_contract(HalfOpen([0.5], nan_reward=True))
    assert refused.value.part == "contract"
    relaxed = check_contract(
        HalfOpen([0.5], nan_reward=True), levels=EnvCheck(contract="warn", determinism="off")
    )
    assert any("rewards must be finite" in n for n in relaxed.notes)
