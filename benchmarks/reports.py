"""docs/benchmarks.md's tables over seeds, made with rlplat's own commands: each shipped experiment
trained with ``rlplat train <file> --seeds 3``, then compared with ``rlplat report``.

    python benchmarks/reports.py [--only qmix cartpole pendulum spread connect_four mappo_spread
                                        mappo_spread_ids mappo_lbf mappo_lbf_updates lstm_novel
                                        memory_novel]
                                 [--runs DIR]

One training command at a time. The CartPole and Pendulum runs, whose training seconds to the
target are reported, run one seed at a time (``tune.max_concurrent=1``): their seconds are those
of a training alone on the machine. A finished run of the same command already under ``--runs``
(its run.json records the command) is reused instead of trained again. Each group's report goes
to benchmarks/results/reports/<group>/ (report.json, report.md, the figures), and its
curves.png and final.png are copied to docs/img/<group>-curves.png and docs/img/<group>-final.png.
The ``mappo_*`` groups train MAPPO beside shared PPO with the same settings, to the same env steps;
``lstm_novel`` the LSTM of ``cartpole_novel_lstm.yaml`` beside the same file without it,
``memory_novel`` the same file with the GRU and the attention memory instead.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from harness import REPO, read_json, results_file, rlplat

RESULTS = results_file("reports")
IMAGES = REPO / "docs/img"
SEEDS = "3"
ALONE = "tune.max_concurrent=1"
QMIX_BUDGET = ("stop.env_steps=100000", "stop.time_s=null")
EQUAL_STEPS = ("stop.time_s=null",)  # every seed to the file's env steps, however long it takes

# group -> (experiment files with their overrides, rlplat report options)
GROUPS: dict[str, tuple[list[tuple[str, tuple[str, ...]]], list[str]]] = {
    "qmix": (
        [
            ("experiments/simple_spread_qmix.yaml", (f"training.mixer={mixer}", *QMIX_BUDGET))
            for mixer in ("qmix", "vdn", "none")
        ],
        ["--eval-episodes", "100"],
    ),
    "cartpole": (
        [
            ("experiments/cartpole_ppo.yaml", (ALONE,)),
            ("experiments/cartpole_dqn.yaml", (ALONE,)),
            ("benchmarks/plain_ppo_cartpole.yaml", (ALONE,)),
        ],
        ["--eval-episodes", "100"],
    ),
    "pendulum": ([("experiments/pendulum_sac.yaml", (ALONE,))], ["--eval-episodes", "100"]),
    "spread": ([("experiments/simple_spread_ppo.yaml", ())], ["--eval-episodes", "100"]),
    "mappo_spread": (
        [(f"experiments/simple_spread_{name}.yaml", EQUAL_STEPS) for name in ("ppo", "mappo")],
        ["--eval-episodes", "100"],
    ),
    # simple_spread_mappo.yaml with the agents' one-hot ids (from 2026-12-04), beside EPyMARL's
    # MAPPO (benchmarks/epymarl.py --mappo spread).
    "mappo_spread_ids": (
        [("experiments/simple_spread_mappo.yaml", EQUAL_STEPS)],
        ["--eval-episodes", "100"],
    ),
    "mappo_lbf": (
        [
            (f"experiments/marl/lbf_{name}.yaml", ("stop.env_steps=300000", *EQUAL_STEPS))
            for name in ("ppo", "mappo")
        ],
        ["--eval-episodes", "100"],
    ),
    "lstm_novel": (
        [
            ("experiments/cartpole_novel_lstm.yaml", (f"rl_module.model_config.use_lstm={lstm}",))
            for lstm in ("true", "false")
        ],
        ["--eval-episodes", "100"],
    ),
    # The same file with rlplat's GRU and attention memories in place of the LSTM (64 wide), and
    # with its LSTM, trained again beside them.
    "memory_novel": (
        [
            (
                "experiments/cartpole_novel_lstm.yaml",
                (
                    "rl_module.model_config.use_lstm=false",
                    f"rl_module.model_config.memory={memory}",
                ),
            )
            for memory in ("{type: gru, size: 64}", "{type: attention, size: 64, steps: 16}")
        ]
        + [("experiments/cartpole_novel_lstm.yaml", ("rl_module.model_config.use_lstm=true",))],
        ["--eval-episodes", "100"],
    ),
    # lbf_mappo.yaml updated on 500 env steps (10 envs x one 50-step episode) instead of 4,000:
    # EPyMARL's MAPPO updates on 10 episodes (docs/marl.md); greedy evaluation as often.
    "mappo_lbf_updates": (
        [
            (
                "experiments/marl/lbf_mappo.yaml",
                (
                    "stop.env_steps=300000",
                    *EQUAL_STEPS,
                    "training.train_batch_size_per_learner=500",
                    "training.minibatch_size=500",
                    "resources.env_runners.envs=10",
                    "checkpoint.every=80",
                ),
            )
        ],
        ["--eval-episodes", "100"],
    ),
    "connect_four": (
        [("experiments/connect_four_ppo.yaml", ())],
        ["--eval-episodes", "100", "--metric", "policy_return_mean/learner"],
    ),
}


def finished_run(runs: Path, experiment: str, overrides: tuple[str, ...]) -> Path | None:
    """The newest finished run under ``runs`` whose command was this training's."""
    listed = json.loads(rlplat("runs", str(runs), "--json").stdout) if runs.is_dir() else []
    for record in listed:
        command = read_json(Path(record["path"]) / "run.json")["command"]
        wanted = [Path(experiment).name, "--seeds", SEEDS, *overrides]
        if record["status"] == "finished" and all(
            any(part == arg or arg.endswith("/" + part) for arg in command) for part in wanted
        ):
            return Path(record["path"])
    return None


def seeded_run(runs: Path, experiment: str, overrides: tuple[str, ...]) -> Path:
    found = finished_run(runs, experiment, overrides)
    if found is not None:
        print(f"reusing {found}", flush=True)
        return found
    print(f"rlplat train {experiment} --seeds {SEEDS} {' '.join(overrides)}", flush=True)
    rlplat("train", experiment, "--seeds", SEEDS, *overrides, f"output_dir={runs}")
    found = finished_run(runs, experiment, overrides)
    if found is None:
        raise SystemExit(f"no finished run of {experiment} under {runs}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", choices=list(GROUPS), default=list(GROUPS))
    parser.add_argument("--runs", type=Path, default=REPO / "checkpoints/benchmarks")
    args = parser.parse_args()
    IMAGES.mkdir(parents=True, exist_ok=True)
    for group in args.only:
        experiments, options = GROUPS[group]
        runs = [str(seeded_run(args.runs.resolve(), e, o)) for e, o in experiments]
        out = RESULTS / group
        if out.exists():
            shutil.rmtree(out)  # the previous report of this group, replaced
        report = json.loads(rlplat("report", *runs, *options, "--out", str(out), "--json").stdout)
        for figure in ("curves", "final"):
            shutil.copy(out / f"{figure}.png", IMAGES / f"{group}-{figure}.png")
        print((out / "report.md").read_text(), flush=True)
        for entry in report["experiments"]:
            iqm = entry["aggregates"]["iqm"]
            print(f"{group}: {entry['label']}: IQM {iqm['estimate']:.2f} {iqm['ci']}", flush=True)


if __name__ == "__main__":
    main()
