"""rlplat's QMIX against EPyMARL's, side by side: env steps per second on mpe simple_spread.

    python benchmarks/epymarl.py --epymarl-src DIR [--steps 20000] [--rounds 3]

DIR is a checkout of uoe-agents/epymarl (its ``src/`` is run as it is; nothing of it is imported
into rlplat). EPyMARL runs in its own virtual environment, benchmarks/.epymarl-venv, made on first
use from the package registry: torch 2.13.0 first (the CPU wheel), then what EPyMARL's QMIX on
PettingZoo needs at run time. PettingZoo is held below 1.25 there: EPyMARL imports
``pettingzoo.mpe``, which later PettingZoo releases moved out into mpe2; and an empty stand-in
``smaclite`` module is added, which EPyMARL imports unconditionally (simple_spread never uses it).

Each round runs three processes, rotating which goes first, each for ``--steps`` env steps:

- ``epymarl``: EPyMARL's default ``qmix`` config on its gymma wrapper
  (``env_args.key=pz-mpe-simple-spread-v3``, ``time_limit=25``, CPU);
- ``rlplat``: ``rlplat train experiments/simple_spread_qmix.yaml`` with EPyMARL's agent settings
  (``EPYMARL_QMIX``: a feed-forward agent without the last action as input, standardised
  rewards), so both learn the same thing per env step;
- ``rlplat_shipped``: the shipped file as it is (pymarl's GRU agent with the last action).

All three use 32-episode batches, a 5000-episode buffer, epsilon 1 -> 0.05 over 50k steps and a
target update every 200 updates. Recorded: whole-process seconds, env steps per second over the
whole process, and rlplat's training seconds. Results go to benchmarks/results/epymarl.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from harness import REPO, invocation, results_file, run, save_results, take_turns, train

VENV = REPO / "benchmarks/.epymarl-venv"
RESULTS = results_file("epymarl.json")
# EPyMARL's qmix.yaml and default.yaml where they differ from rlplat's QMIX defaults.
EPYMARL_QMIX = [
    "training.recurrent=false",  # use_rnn: False
    "training.obs_last_action=false",  # obs_last_action: False
    "training.standardise_rewards=true",  # standardise_rewards: True
]
SIDES = ("rlplat", "epymarl", "rlplat_shipped")  # the first round's order; then rotated
EPYMARL_NEEDS = [
    "setuptools<81",  # sacred imports pkg_resources
    "numpy<2.3",
    "pyyaml",
    "sacred",
    "gymnasium",
    "pettingzoo[mpe]>=1.24,<1.25",
    "pygame",
    "scipy",
]


def epymarl_python() -> Path:
    python = VENV / "bin/python"
    if not python.exists():
        run([sys.executable, "-m", "venv", str(VENV)], check=True, capture=False)
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        run([*pip, "torch==2.13.0"], check=True, capture=False)
        run([*pip, *EPYMARL_NEEDS], check=True, capture=False)
        # EPyMARL imports smaclite (its SMAClite wrapper) unconditionally, and smaclite is not
        # on the registry; simple_spread never uses it.
        site = run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
        ).stdout.strip()
        Path(site, "smaclite.py").write_text('"""Stand-in for EPyMARL\'s import."""\n')
    return python


def run_epymarl(src: Path, steps: int, out: Path) -> dict:
    command = [
        str(epymarl_python()),
        "src/main.py",
        "--config=qmix",
        "--env-config=gymma",
        "with",
        "env_args.time_limit=25",
        "env_args.key=pz-mpe-simple-spread-v3",
        f"t_max={steps}",
        "use_cuda=False",
        f"local_results_path={out}",
    ]
    proc = run(command, cwd=src)
    if not proc.ok:
        return {"error": proc.tail(), "command_wall_s": proc.wall_s}
    return {
        "command_wall_s": proc.wall_s,
        "env_steps": steps,
        "env_steps_per_s": round(steps / proc.wall_s, 1),
    }


def run_rlplat(steps: int, out: Path, overrides: list[str]) -> dict:
    training = train(
        "experiments/simple_spread_qmix.yaml",
        f"stop.env_steps={steps}",
        "stop.time_s=null",
        *overrides,
        out=out,
        check=False,
    )
    if training.error:
        return {"error": training.error, "command_wall_s": training.wall_s}
    env_steps = int(training.results()[-1]["num_env_steps_sampled_lifetime"])
    training_s = training.driver()["timings"]["stages_s"]["training"]
    return {
        "command_wall_s": training.wall_s,
        "env_steps": env_steps,
        "env_steps_per_s": round(env_steps / training.wall_s, 1),
        "training_s": training_s,
        "training_env_steps_per_s": round(env_steps / training_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epymarl-src", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds = []
    src = args.epymarl_src.resolve()
    with tempfile.TemporaryDirectory(prefix="rlplat-epymarl-") as scratch:
        for round_ in range(args.rounds):
            out = {side: Path(scratch) / f"{side}-{round_}" for side in SIDES}
            sides = {
                "rlplat": partial(run_rlplat, args.steps, out["rlplat"], EPYMARL_QMIX),
                "epymarl": partial(run_epymarl, src, args.steps, out["epymarl"]),
                "rlplat_shipped": partial(run_rlplat, args.steps, out["rlplat_shipped"], []),
            }
            row = {"round": round_, **take_turns(round_, sides)}
            print(json.dumps(row), flush=True)
            rounds.append(row)
    save_results(
        RESULTS,
        {"command": invocation(), "date": time.strftime("%Y-%m-%d %H:%M"), "rounds": rounds},
    )


if __name__ == "__main__":
    main()
