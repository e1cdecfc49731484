"""The training-health rules (rlplat.health) on recorded result rows: each sick run's rows set off
its diagnosis, healthy runs' rows none. The rows are real runs' result.json lines, cut to the keys
the rules read (benchmarks/results/doctor.json names the command that made each;
`python benchmarks/doctor.py --fixtures` writes them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlplat.callbacks.health import replay
from rlplat.experiment.schema import DiagnosesSpec
from rlplat.health import RULE_NAMES
from rlplat.health.rules import rules_table

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "health"


def recorded(name: str) -> tuple[list[dict], dict]:
    """A recorded trial: its result rows and its experiment (the run's params.json)."""
    folder = FIXTURES / name
    rows = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]
    return rows, json.loads((folder / "params.json").read_text())


def fired(name: str) -> dict[str, str]:
    """Each rule that fired over the recorded trial (with its algorithm's defaults), its line."""
    rows, experiment = recorded(name)
    findings = replay(rows, experiment).findings
    return {finding.rule: finding.message for finding in findings}


HEALTHY = sorted(p.name for p in FIXTURES.iterdir() if p.name.startswith("healthy_"))


@pytest.mark.parametrize("name", HEALTHY)
def test_runs_that_learned_get_no_diagnosis(name):
    assert fired(name) == {}


@pytest.mark.parametrize(
    ("name", "rule", "words"),
    [
        ("sick_ppo_lr_too_high", "kl_divergence", "lower training.lr (now 1.0)"),
        ("sick_ppo_sparse_no_entropy", "no_reward", "training.entropy_coeff (now 0.0)"),
        ("sick_ppo_sparse_no_entropy", "no_reward", "exploration: {rnd: {}}"),
        ("sick_ppo_reward_1e4", "reward_scale", "connectors: [reward_scaling]"),
        ("sick_ppo_leaky_env", "throughput_drop", "env steps per second fell"),
        ("sick_ppo_observations_1e3", "large_observations", "connectors: [mean_std_filter]"),
        ("sick_ppo_mountaincar", "truncation_dominated", "max_episode_steps"),
        ("sick_ppo_pendulum_wide", "actions_saturated", "sat at their bounds"),
        ("sick_ppo_lock_lr_high", "entropy_collapse", "without a rewarded episode"),
        ("sick_ppo_value_loss_off", "value_unexplained", "training.vf_loss_coeff (now 0.0)"),
        ("sick_dqn_no_target", "q_divergence", "training.target_network_update_freq (now 1)"),
    ],
)
def test_a_sick_run_gets_its_diagnosis_naming_the_fix(name, rule, words):
    messages = fired(name)
    assert rule in messages, messages
    assert words in messages[rule]


def diagnose(rows: list[dict], experiment: dict) -> list:
    return replay(rows, experiment).findings


def test_each_diagnosis_fires_once_and_can_be_turned_off():
    rows, experiment = recorded("sick_ppo_lr_too_high")
    findings = diagnose(rows, experiment)
    assert len({f.rule for f in findings}) == len(findings)
    silenced = {**experiment, "diagnoses": {"off": ["kl_divergence"]}}
    assert "kl_divergence" not in {f.rule for f in diagnose(rows, silenced)}


def test_a_diverging_critic_and_its_bound():
    """Q estimates past twice what the rewards seen allow (2 per step / (1 - gamma) = 20, above
    the best return of 10: a bound of 40) fire; the same estimates under it do not; a non-finite
    one fires at once."""

    def row(iteration: int, q: float) -> dict:
        return {
            "training_iteration": iteration,
            "num_env_steps_sampled_lifetime": 1000 * iteration,
            "window": {"episode_return_mean": 10.0},
            "env_runners": {
                "episode_return_max": 10.0, "episode_return_min": -5.0, "episode_len_mean": 5.0,
            },  # fmt: skip
            "learners": {"default_policy": {"qf_max": q}},
        }

    experiment = {"algorithm": "DQN", "training": {"gamma": 0.9}}
    assert diagnose([row(1, 30.0), row(2, 39.0)], experiment) == []
    [finding] = diagnose([row(1, 30.0), row(2, 85.0)], experiment)
    assert finding.rule == "q_divergence" and "reached 85 " in finding.message
    assert "since 2,000 env steps, beyond the 40 that rewards of 2 per step" in finding.message
    [finding] = diagnose([row(1, float("nan"))], experiment)
    assert "not finite" in finding.message


def _ppo_row(iteration: int, entropy: float, explained: float, returns: float) -> dict:
    return {
        "training_iteration": iteration,
        "num_env_steps_sampled_lifetime": 4000 * iteration,
        "window": {"episode_return_mean": returns},
        "env_runners": {"episode_return_max": returns, "episode_return_min": returns},
        "learners": {"shared": {"entropy": entropy, "vf_explained_var": explained}},
    }


def test_entropy_collapse_before_any_reward_and_not_after_learning():
    """Entropy from 1.57 to 0.04 (the RWARE run of docs/marl.md) with every return 0 fires,
    naming the entropy coefficient; the same fall while the return rises does not."""
    experiment = {"algorithm": "PPO", "training": {"entropy_coeff": 0.001}}
    falling = [1.57, 1.5, 1.4, 1.0, 0.6, 0.3, 0.1, 0.05, 0.04, 0.04]
    stuck = [_ppo_row(i + 1, h, 0.0, 0.0) for i, h in enumerate(falling)]
    [finding] = [f for f in diagnose(stuck, experiment) if f.rule == "entropy_collapse"]
    assert "from 1.49 to 0.063 by 36k env steps" in finding.message
    assert "without a rewarded episode" in finding.message
    assert "raise training.entropy_coeff (now 0.001)" in finding.message
    learning = [_ppo_row(i + 1, h, 0.5, 10.0 * (i + 1)) for i, h in enumerate(falling)]
    assert diagnose(learning, experiment) == []


def test_a_value_function_below_zero_fires_and_one_at_zero_does_not():
    """Explained variance steadily below 0 fires after 20 iterations; hovering at 0 +/- 0.01
    (a solved CartPole's returns, which no longer vary) does not."""
    experiment = {"algorithm": "PPO"}
    below = [_ppo_row(i + 1, 0.6, -0.4, 5.0) for i in range(25)]
    assert [f.rule for f in diagnose(below, experiment)] == ["value_unexplained"]
    hovering = [_ppo_row(i + 1, 0.6, 0.01 * (-1) ** i, 5.0) for i in range(25)]
    assert diagnose(hovering, experiment) == []


def test_the_experiment_key_names_only_known_rules():
    assert DiagnosesSpec(off=list(RULE_NAMES)).off == list(RULE_NAMES)
    with pytest.raises(ValueError, match="Did you mean 'entropy_collapse'"):
        DiagnosesSpec(off=["entropy_colapse"])


def test_the_documented_rules_table_is_the_rules():
    assert rules_table() in (ROOT / "docs" / "doctor.md").read_text()


def test_the_line_a_run_prints_names_the_rule_that_silences_it():
    """Rich took ``[rule]`` for markup and printed "(diagnoses.off:  silences it)"."""
    from rich.console import Console

    from rlplat.callbacks.health import diagnosis_line
    from rlplat.health import Finding

    console = Console(record=True, width=300)
    console.print(diagnosis_line("trial_00000", Finding("no_reward", 3, 3000, "no [reward] yet")))
    said = console.export_text()
    assert "(diagnoses.off: [no_reward] silences it)" in said
    assert "no [reward] yet" in said
