"""rlplat's QMIX against EPyMARL's, side by side: env steps per second on mpe simple_spread.

    python benchmarks/epymarl.py --epymarl-src DIR [--steps 20000] [--pairs 2]

DIR is a checkout of uoe-agents/epymarl (its ``src/`` is run as it is; nothing of it is imported
into rlplat). EPyMARL runs in its own virtual environment, benchmarks/.epymarl-venv, made on first
use from the package registry: torch 2.13.0 first (the CPU wheel), then what EPyMARL's QMIX on
PettingZoo needs at run time. PettingZoo is held below 1.25 there: EPyMARL imports
``pettingzoo.mpe``, which later PettingZoo releases moved out into mpe2; and an empty stand-in
``smaclite`` module is added, which EPyMARL imports unconditionally (simple_spread never uses it).

Each pair runs, alternating which goes first: EPyMARL's default ``qmix`` config on its gymma
wrapper (``env_args.key=pz-mpe-simple-spread-v3``, ``time_limit=25``, CPU) for ``--steps`` env
steps, and ``rlplat train experiments/simple_spread_qmix.yaml stop.env_steps=<steps>`` (QMIX with
pymarl's settings: 32-episode batches, a 5000-episode buffer, epsilon 1 -> 0.05 over 50k steps).
Recorded: whole-process seconds, env steps per second over the whole process, and rlplat's
training seconds. Results go to benchmarks/results/epymarl.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from peers import RLPLAT, timed  # benchmarks/peers.py, beside this script

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / "benchmarks/.epymarl-venv"
RESULTS = REPO / "benchmarks/results/epymarl.json"
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
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        pip = [str(python), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "torch==2.13.0"], check=True)
        subprocess.run([*pip, *EPYMARL_NEEDS], check=True)
        # EPyMARL imports smaclite (its SMAClite wrapper) unconditionally, and smaclite is not
        # on the registry; simple_spread never uses it.
        site = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
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
    proc, wall = timed(command, cwd=src)
    if proc.returncode != 0:
        return {"error": (proc.stdout + proc.stderr)[-2000:], "command_wall_s": wall}
    return {
        "command_wall_s": wall,
        "env_steps": steps,
        "env_steps_per_s": round(steps / wall, 1),
    }


def run_rlplat(steps: int, out: Path) -> dict:
    command = [
        str(RLPLAT),
        "train",
        "experiments/simple_spread_qmix.yaml",
        f"stop.env_steps={steps}",
        "stop.time_s=null",
        f"output_dir={out}",
    ]
    proc, wall = timed(command)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:], "command_wall_s": wall}
    [run_dir] = out.glob("*/*/")
    timings = json.loads((run_dir / "run.json").read_text())["drivers"][-1]["timings"]
    rows = [json.loads(line) for line in next(run_dir.glob("trial_*/result.json")).open()]
    env_steps = int(rows[-1]["num_env_steps_sampled_lifetime"])
    training = timings["stages_s"]["training"]
    return {
        "command_wall_s": wall,
        "env_steps": env_steps,
        "env_steps_per_s": round(env_steps / wall, 1),
        "training_s": training,
        "training_env_steps_per_s": round(env_steps / training, 1),
    }


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epymarl-src", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--pairs", type=int, default=2)
    args = parser.parse_args()
    pairs = []
    with tempfile.TemporaryDirectory(prefix="rlplat-epymarl-") as scratch:
        for pair in range(args.pairs):
            order = ["rlplat", "epymarl"] if pair % 2 == 0 else ["epymarl", "rlplat"]
            row: dict = {"pair": pair, "first": order[0]}
            for side in order:
                out = Path(scratch) / f"{side}-{pair}"
                if side == "rlplat":
                    row[side] = run_rlplat(args.steps, out)
                else:
                    row[side] = run_epymarl(args.epymarl_src.resolve(), args.steps, out)
            print(json.dumps(row), flush=True)
            pairs.append(row)
    RESULTS.write_text(
        json.dumps(
            {
                "command": " ".join(["python", "benchmarks/epymarl.py", *sys.argv[1:]]),
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "pairs": pairs,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
