"""The training-health diagnoses (docs/doctor.md) over real runs: shipped experiments that learn
at their documented budgets (no diagnosis may fire on them) and the broken ones of
experiments/diagnoses/ (each must get its own), one training at a time.

    python benchmarks/doctor.py                 # every run below -> results/doctor.json
    python benchmarks/doctor.py --only sick     # the broken ones
    python benchmarks/doctor.py --fixtures      # also: the rows tests/unit/test_health.py reads

Runs are kept under /tmp/rlplat-doctor/<name> and reused when there. ``--fixtures`` writes each
run's first trial's result rows, cut to the keys the rules read, with its params.json, to
tests/fixtures/health/<healthy|sick>_<name>/.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import (  # noqa: E402
    invocation,
    machine,
    results_file,
    rlplat,
    save_results,
    train,
    trial_results,
)

OUT = Path("/tmp/rlplat-doctor")
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "health"

# name -> (experiment, overrides, the rule it must get: None for a run that learns)
RUNS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "cartpole_ppo": ("experiments/cartpole_ppo.yaml", (), None),
    "cartpole_dqn": ("experiments/cartpole_dqn.yaml", (), None),
    "pendulum_sac": ("experiments/pendulum_sac.yaml", (), None),
    "pendulum_td3": ("experiments/pendulum_td3.yaml", (), None),
    "pendulum_crossq": ("experiments/pendulum_crossq.yaml", (), None),
    "cartpole_pqn": ("experiments/cartpole_pqn.yaml", (), None),
    "cartpole_appo": ("experiments/cartpole_appo.yaml", (), None),
    "two_step_qmix": ("experiments/two_step_qmix.yaml", (), None),
    "ppo_lr_too_high": ("experiments/diagnoses/ppo_lr_too_high.yaml", (), "kl_divergence"),
    "ppo_sparse_no_entropy": ("experiments/diagnoses/ppo_sparse_no_entropy.yaml", (), "no_reward"),
    "ppo_reward_1e4": ("experiments/diagnoses/ppo_reward_1e4.yaml", (), "reward_scale"),
    "ppo_leaky_env": ("experiments/diagnoses/ppo_leaky_env.yaml", (), "throughput_drop"),
    # More broken runs, as overrides of shipped files, for the rules the four above leave out.
    "ppo_observations_1e3": (
        "experiments/cartpole_ppo.yaml",
        ("env.wrappers=[{envs.sick:scale_observation: {scale: 1000}}]", "stop.env_steps=10000"),
        "large_observations",
    ),
    "ppo_mountaincar": (
        "experiments/cartpole_ppo.yaml",
        ("env.id=MountainCar-v0", "stop.env_steps=40000", "stop.episode_return_mean=null"),
        "truncation_dominated",
    ),
    "ppo_pendulum_wide": (
        "experiments/cartpole_ppo.yaml",
        (
            "env.id=Pendulum-v1",
            "rl_module.model_config.log_std_init=2.0",
            "rl_module.model_config.free_log_std=true",
            "stop.env_steps=60000",
            "stop.episode_return_mean=null",
        ),
        "actions_saturated",
    ),
    # A learning rate that drives the lock's policy deterministic before it is ever rewarded
    # (the RWARE run of docs/marl.md in miniature).
    "ppo_lock_lr_high": (
        "experiments/diagnoses/ppo_sparse_no_entropy.yaml",
        (
            "training.lr=0.02",
            "training.num_epochs=30",
            "training.minibatch_size=64",
            "stop.env_steps=20000",
        ),
        "entropy_collapse",
    ),
    # No value loss: the value head keeps its initial outputs, far larger than rewards x 0.01.
    "ppo_value_loss_off": (
        "experiments/cartpole_ppo.yaml",
        (
            "training.vf_loss_coeff=0.0",
            "env.wrappers=[{envs.sick:scale_reward: {scale: 0.01}}]",
            "stop.env_steps=25000",
            "stop.episode_return_mean=null",
        ),
        "value_unexplained",
    ),
    # Q-learning bootstrapping from itself (no target network, no double Q) at a high rate.
    "dqn_no_target": (
        "experiments/cartpole_dqn.yaml",
        (
            "training.target_network_update_freq=1",
            "training.double_q=false",
            "training.dueling=false",
            "training.lr=0.01",
            "training.training_intensity=64",
            "training.n_step=1",
            "training.gamma=0.995",
            "rl_module.model_config.fcnet_activation=relu",
            "stop.env_steps=8000",
            "stop.episode_return_mean=null",
        ),
        "q_divergence",
    ),
}

KEPT = ("training_iteration", "num_env_steps_sampled_lifetime", "time_total_s")
KEPT_RUNNERS = (
    "num_episodes_lifetime", "episode_return_max", "episode_return_min", "episode_len_mean",
    "health",
)  # fmt: skip
KEPT_LEARNER = (
    "entropy", "approx_kl", "clip_fraction", "vf_explained_var",
    "qf_max", "qf_min", "qf_mean", "q_mean", "q_taken_mean", "num_env_steps_trained_lifetime",
)  # fmt: skip


def cut(row: dict[str, Any]) -> dict[str, Any]:
    """A result row with only what the diagnoses read."""
    kept: dict[str, Any] = {key: row[key] for key in KEPT if key in row}
    runners = row.get("env_runners") or {}
    kept["env_runners"] = {key: runners[key] for key in KEPT_RUNNERS if key in runners}
    kept["learners"] = {
        module: {key: stats[key] for key in KEPT_LEARNER if key in stats}
        for module, stats in (row.get("learners") or {}).items()
        if isinstance(stats, dict)
    }
    window = row.get("window") or {}
    if "episode_return_mean" in window:
        kept["window"] = {"episode_return_mean": window["episode_return_mean"]}
    return kept


def doctor(run_dir: Path) -> dict[str, Any]:
    return json.loads(rlplat("doctor", str(run_dir), "--json").stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["healthy", "sick"], default=None)
    parser.add_argument("--fixtures", action="store_true")
    args = parser.parse_args()
    path = results_file("doctor.json")
    results = json.loads(path.read_text()) if path.exists() else {}
    results.update(command=invocation(), machine=machine())
    rows = results.setdefault("runs", {})
    for gone in set(rows) - set(RUNS):
        del rows[gone]
    for name, (experiment, overrides, expected) in RUNS.items():
        kind = "sick" if expected else "healthy"
        if args.only and args.only != kind:
            continue
        training = train(experiment, *overrides, out=OUT / name, reuse=True, check=False)
        report = doctor(training.run_dir)
        [trial] = report["trials"][:1]
        summary = json.loads((training.run_dir / "summary.json").read_text())
        seconds = {
            row["training_iteration"]: row["time_total_s"]
            for row in trial_results(training.run_dir / trial["trial"])
        }
        first = summary["trials"][0]
        rows[name] = {
            "command": f"rlplat train {experiment} {' '.join(overrides)}".strip(),
            "expected": expected,
            "fired": [finding["rule"] for finding in trial["findings"]],
            "lines": [finding["message"] for finding in trial["findings"]],
            # when each fired: iteration, env steps and seconds of training
            "fired_at": [
                {
                    "rule": finding["rule"],
                    "iteration": finding["iteration"],
                    "env_steps": finding["env_steps"],
                    "training_s": round(seconds[finding["iteration"]], 1),
                }
                for finding in trial["findings"]
            ],
            "env_steps": trial["env_steps"],
            "final_return": first.get("final_return"),
            "best_return": first.get("best_return"),
        }
        print(name, rows[name]["fired"], flush=True)
        if args.fixtures:
            trial_dir = training.run_dir / trial["trial"]
            folder = FIXTURES / f"{kind}_{name}"
            folder.mkdir(parents=True, exist_ok=True)
            lines = (trial_dir / "result.json").read_text().splitlines()
            cut_rows = [json.dumps(cut(json.loads(line))) for line in lines if line.strip()]
            (folder / "result.json").write_text("\n".join(cut_rows) + "\n")
            params = json.loads((trial_dir / "params.json").read_text())
            (folder / "params.json").write_text(json.dumps(params, indent=1) + "\n")
    save_results(path, results)


if __name__ == "__main__":
    main()
