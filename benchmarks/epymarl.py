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

    python benchmarks/epymarl.py --epymarl-src DIR --learn lbf|rware [--budget-s 1500] [--seeds 1]

What each side learns in the same time on EPyMARL's tasks (Level-Based Foraging
``Foraging-8x8-2p-2f-coop-v3``, Multi-Robot Warehouse ``rware-tiny-2ag-v2``): rlplat's shipped
``experiments/marl/<task>_qmix.yaml`` for ``--budget-s`` seconds of training (``stop.time_s``),
scored by 100 greedy episodes of its last checkpoint (``rlplat eval --last``), against EPyMARL's
default ``qmix`` config on its gymma wrapper (the same task and time limit), stopped after
``--budget-s`` seconds of its whole process, scored by its own last greedy test (100 episodes, as
rlplat's). One seed after another, each side alone on the machine. Both learning curves are
kept. Results go to benchmarks/results/epymarl_<task>.json.

    python benchmarks/epymarl.py --epymarl-src DIR --mappo lbf|spread --steps 300000 [--seeds 1]

EPyMARL's own ``mappo`` config for ``--steps`` env steps on the task (tested over 100 episodes
every tenth of them; its test episodes sample actions, as its soft_policies selector ignores test
mode), the peer of rlplat's MAPPO in ``benchmarks/reports.py --only mappo_lbf``
(``mappo_spread_ids``) at the same env steps. Results go to
benchmarks/results/epymarl_mappo_<task>.json.

    python benchmarks/epymarl.py --epymarl-src DIR --qmix lbf --steps 2000000 [--sides SIDE]
                                 [--seed S]

QMIX at equal env steps, one seed (``--seed``, 0 by default): rlplat's shipped
``experiments/marl/<task>_qmix.yaml`` and EPyMARL's default ``qmix`` config, each for ``--steps``
env steps, each greedy-tested over 100 episodes every twentieth of them (rlplat: its evaluation at
every checkpoint; EPyMARL: its ``test_interval``). Recorded: both test curves, whole-process
seconds and env steps per second. Two processes may each take one side (``--sides``), pinned to a
core each; the results file is read late and merged. ``--rlplat-overrides`` changes rlplat's file
for a side of its own (named by them, e.g. ``rlplat resources.env_runners.envs=8``); a seed other
than 0 is added to each side's name (``epymarl seed 1``). The shipped LBF file has TD(lambda)
targets (``td_lambda: 0.6``); ``--rlplat-overrides training.td_lambda=0`` gives EPyMARL's one-step
targets, so that every setting is the same on both sides. Results go to
benchmarks/results/epymarl_qmix_<task>.json. rlplat keeps every checkpoint
(``checkpoint.keep=null``) and EPyMARL saves its agent and mixer at each test (it saves no
model at ``--steps`` itself, so its last is near 95% of them, as its last test is), for:

    python benchmarks/epymarl.py --epymarl-src DIR --qmix lbf --steps 2000000 --retest SIDE...
                                 [--retest-episodes 1000]

Each named side (``rlplat``, ``epymarl seed 1``, ...) tested again at a quarter, half, three
quarters and all of ``--steps`` over more greedy episodes than during training (a 100-episode
test of a return near 0.1 has a standard error near 0.03), added to its row as ``retest``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from functools import partial
from pathlib import Path

from harness import (
    REPO,
    eval_report,
    invocation,
    load_results,
    machine,
    results_file,
    run,
    save_results,
    take_turns,
    train,
)

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
    "lbforaging",
    "rware",
]
# EPyMARL's tasks for --learn: its gymma key and time limit (its papers' settings), rlplat's file.
TASKS = {
    "lbf": ("lbforaging:Foraging-8x8-2p-2f-coop-v3", 50, "experiments/marl/lbf_qmix.yaml"),
    "rware": ("rware:rware-tiny-2ag-v2", 500, "experiments/marl/rware_qmix.yaml"),
    # PettingZoo's simple_spread_v3 defaults: 3 agents, local_ratio 0.5, 25 steps, discrete.
    "spread": ("pz-mpe-simple-spread-v3", 25, "experiments/simple_spread_qmix.yaml"),
}
TEST_EPISODES = 100  # EPyMARL's gymma.yaml test_nepisode


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


def learn_rlplat(task: str, seed: int, budget_s: int, out: Path) -> dict:
    """rlplat's shipped QMIX file for ``budget_s`` seconds of training; its last checkpoint's
    greedy return over TEST_EPISODES episodes."""
    experiment = TASKS[task][2]
    overrides = (f"seed={seed}", f"stop.time_s={budget_s}", "stop.env_steps=null")
    training = train(experiment, *overrides, out=out, reuse=True)
    results = training.results()
    greedy = eval_report(training.run_dir, TEST_EPISODES, "--last")
    return {
        "command": f"rlplat train {experiment} {' '.join(overrides)}",
        "run_dir": str(training.run_dir),
        "env_steps": int(results[-1]["num_env_steps_sampled_lifetime"]),
        "training_s": round(results[-1]["time_total_s"], 1),
        "greedy_return": greedy["returns"]["mean"],
        "checkpoint": greedy["checkpoint"],
        "curve": [
            [int(r["num_env_steps_sampled_lifetime"]), r["window"]["episode_return_mean"]]
            for r in results
            if (r.get("window") or {}).get("episode_return_mean") is not None
        ],
    }


def epymarl_command(task: str, seed: int, config: str, *settings: str) -> list[str]:
    """EPyMARL's ``config`` on its gymma wrapper for ``task`` (its key and time limit), on the
    CPU, with further sacred ``settings``."""
    key, time_limit, _ = TASKS[task]
    return [
        str(epymarl_python()), "src/main.py", f"--config={config}", "--env-config=gymma", "with",
        f"env_args.key={key}", f"env_args.time_limit={time_limit}", f"seed={seed}",
        "use_cuda=False", *settings,
    ]


def learn_epymarl(
    src: Path,
    task: str,
    seed: int,
    *,
    config: str = "qmix",
    budget_s: int | None = None,
    t_max: int | None = None,
    test_interval: int | None = None,
    save_every: int | None = None,
) -> dict:
    """EPyMARL's ``config`` on its gymma wrapper, its process ended after ``budget_s`` seconds
    or at ``t_max`` env steps; its greedy test returns as its sacred run recorded them (every
    ``test_interval`` env steps: EPyMARL's default is 2,000). With ``save_every``, its agent and
    mixer are saved every that many env steps, for ``retest``."""
    key = TASKS[task][0]
    command = epymarl_command(
        task, seed, config, f"t_max={t_max or 1_000_000_000}", f"test_nepisode={TEST_EPISODES}"
    )
    if test_interval:
        command += [f"test_interval={test_interval}", f"log_interval={test_interval}"]
    if save_every:
        command += ["save_model=True", f"save_model_interval={save_every}"]
    runs = src / "results/sacred" / config / key
    before = set(runs.glob("*")) if runs.exists() else set()
    models_before = set((src / "results/models").glob("*"))
    started = time.monotonic()
    finished = True
    try:
        subprocess.run(command, cwd=src, capture_output=True, timeout=budget_s)
    except subprocess.TimeoutExpired:
        finished = False  # the budget is spent: what it logged so far is its result
    wall_s = round(time.monotonic() - started, 1)
    [run_dir] = set(runs.glob("*")) - before - {runs / "_sources"}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    tests = metrics.get("test_return_mean", {"steps": [], "values": []})
    # Its metrics are logged every log_interval env steps; a run that reached t_max ran them all.
    logged = metrics.get("episode", {}).get("steps") or [0]
    env_steps = t_max if finished and t_max else int(logged[-1])
    models = set((src / "results/models").glob("*")) - models_before
    return {
        "command": " ".join(command[1:]),
        "sacred_run": str(run_dir),
        **({"models": str(models.pop())} if save_every else {}),
        "wall_s": wall_s,
        "env_steps": env_steps,
        "env_steps_per_s": round(env_steps / wall_s, 1),
        "greedy_return": tests["values"][-1] if tests["values"] else None,
        "best_greedy_return": max(tests["values"], default=None),
        "curve": [[int(s), v] for s, v in zip(tests["steps"], tests["values"], strict=True)],
    }


def peer_mappo(src: Path, task: str, seeds: int, steps: int) -> None:
    """EPyMARL's own mappo config for ``steps`` env steps per seed, tested every tenth of them,
    beside rlplat's MAPPO from ``benchmarks/reports.py --only mappo_<task>``."""
    rows = [
        {"seed": seed, "epymarl": learn_epymarl(
            src, task, seed, config="mappo", t_max=steps, test_interval=steps // 10
        )}
        for seed in range(seeds)
    ]
    save_results(results_file(f"epymarl_mappo_{task}.json"), {
        "command": invocation(), "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"),
        "task": TASKS[task][0], "env_steps": steps, "seeds": rows,
    })
    print(json.dumps(rows), flush=True)


def rlplat_at_steps(task: str, steps: int, tests: int, out: Path, extra: list[str]) -> dict:
    """rlplat's shipped file (with the ``extra`` overrides) for ``steps`` env steps, its greedy
    evaluation (TEST_EPISODES episodes) every ``steps // tests`` env steps; its test curve."""
    experiment = TASKS[task][2]
    # A QMIX iteration is the first whole episode past 1000 env steps
    # (min_sample_timesteps_per_iteration), so every test_iterations iterations is about
    # steps // tests env steps.
    test_iterations = max(1, steps // tests // 1000)
    overrides = (
        f"stop.env_steps={steps}", "stop.time_s=null", f"checkpoint.every={test_iterations}",
        "checkpoint.keep=null", f"evaluation.evaluation_duration={TEST_EPISODES}", *extra,
    )
    training = train(experiment, *overrides, out=out, reuse=True)
    results = training.results()
    env_steps = int(results[-1]["num_env_steps_sampled_lifetime"])
    return {
        "command": f"rlplat train {experiment} {' '.join(overrides)}",
        "run_dir": str(training.run_dir),
        "wall_s": training.wall_s,
        "training_s": round(results[-1]["time_total_s"], 1),
        "env_steps": env_steps,
        "env_steps_per_s": round(env_steps / training.wall_s, 1) if training.wall_s else None,
        "curve": [
            [int(r["num_env_steps_sampled_lifetime"]), r["evaluation"]["env_runners"][
                "episode_return_mean"]]
            for r in results
            if (r.get("evaluation") or {}).get("env_runners", {}).get("num_episodes")
        ],
    }


def qmix_at_steps(
    src: Path, task: str, steps: int, sides: list[str], out: Path, extra: list[str], seed: int
) -> None:
    """Both sides' QMIX for ``steps`` env steps with ``seed``, each tested 20 times; rlplat's
    side is named by its ``extra`` overrides when it has any, and each by a seed other than 0."""
    tests = 20
    suffix = f" seed {seed}" if seed else ""
    rows = {}
    if "rlplat" in sides:
        name = " ".join(["rlplat", *extra]) + suffix
        rows[name] = rlplat_at_steps(
            task, steps, tests, out / name.replace(" ", "_"), [*extra, f"seed={seed}"]
        ) | {"seed": seed}
    if "epymarl" in sides:
        rows["epymarl" + suffix] = learn_epymarl(
            src, task, seed, t_max=steps, test_interval=steps // tests, save_every=steps // tests
        ) | {"seed": seed}
    path = results_file(f"epymarl_qmix_{task}.json")
    results = load_results(path)  # read late: the other side's process may have saved
    results.update({
        "task": TASKS[task][0], "env_steps": steps, "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    })
    results.pop("seed", None)  # each side records its own
    results.setdefault("sides", {}).update(
        {side: {**row, "benchmark": invocation()} for side, row in rows.items()}
    )
    save_results(path, results)
    print(json.dumps({side: row["curve"] for side, row in rows.items()}), flush=True)


def retest_rlplat(run_dir: str, points: list[int], episodes: int) -> dict[str, float]:
    """The checkpoint nearest each of ``points`` env steps, greedy over ``episodes`` episodes
    (``rlplat eval``, no Ray)."""
    saved = {
        json.loads((checkpoint / "rlplat_checkpoint.json").read_text())["env_steps"]: checkpoint
        for checkpoint in Path(run_dir).glob("trial_*/checkpoint_*")
    }
    returns = {}
    for steps in nearest(saved, points):
        returns[str(steps)] = eval_report(saved[steps], episodes)["returns"]["mean"]
    return returns


def nearest(saved: Iterable[int], points: list[int]) -> list[int]:
    """The saved env-step counts nearest each of ``points``, each once, in order."""
    return sorted({min(saved, key=lambda s: abs(s - point)) for point in points})


def retest_epymarl(
    src: Path, task: str, seed: int, models: str, points: list[int], episodes: int
) -> dict[str, float]:
    """EPyMARL's saved agent and mixer nearest each of ``points`` env steps, greedy over
    ``episodes`` episodes (its ``evaluate`` mode, which loads the save closest to ``load_step``).
    Not while an EPyMARL training runs: each side finds its sacred run as the one new there."""
    key = TASKS[task][0]
    saved = sorted(int(path.name) for path in Path(models).iterdir())
    runs = src / "results/sacred/qmix" / key  # EPyMARL's sacred folder is fixed
    returns = {}
    for steps in nearest(saved, points):
        before = set(runs.glob("*"))
        command = epymarl_command(
            task, seed, "qmix", f"checkpoint_path={models}", f"load_step={steps}",
            "evaluate=True", f"test_nepisode={episodes}",
        )
        subprocess.run(command, cwd=src, capture_output=True, check=True)
        [run_dir] = set(runs.glob("*")) - before
        metrics = json.loads((run_dir / "metrics.json").read_text())
        returns[str(steps)] = metrics["test_return_mean"]["values"][-1]
        shutil.rmtree(run_dir)  # a test, not a training: later runs find theirs as the new one
    return returns


def retest(src: Path, task: str, steps: int, episodes: int, names: list[str]) -> None:
    """Each named side of ``--qmix``'s results tested again at a quarter, half, three quarters
    and all of ``steps``, over ``episodes`` greedy episodes: a closer estimate of each point than
    the 100-episode tests during training. The returns are added to the side's row."""
    path = results_file(f"epymarl_qmix_{task}.json")
    results = load_results(path)
    sides = results.get("sides", {})
    for name in names:
        if name not in sides:
            refuse(f"--retest: {path} has no side {name!r}; it has: {', '.join(sides)}")
        if not sides[name].get("models" if name.startswith("epymarl") else "run_dir"):
            refuse(f"--retest: side {name!r} in {path} kept nothing to test again (it ran "
                   "before --qmix saved EPyMARL's models)")
    points = [steps * k // 4 for k in range(1, 5)]
    retests = {}
    for name in names:
        row = sides[name]
        if name.startswith("epymarl"):
            returns = retest_epymarl(src, task, row["seed"], row["models"], points, episodes)
        else:
            returns = retest_rlplat(row["run_dir"], points, episodes)
        retests[name] = {"episodes": episodes, "returns": returns, "benchmark": invocation()}
        print(json.dumps({name: retests[name]}), flush=True)
    results = load_results(path)  # read again: a training's process may have saved meanwhile
    for name, retested in retests.items():
        results["sides"][name]["retest"] = retested
    save_results(path, results)


def refuse(message: str) -> None:
    """Bad input: the message on stderr, exit code 2 (as argparse's own errors)."""
    print(message, file=sys.stderr)
    sys.exit(2)


def learning(src: Path, task: str, seeds: int, budget_s: int, out: Path) -> None:
    rows = []
    for seed in range(seeds):
        row = {
            "seed": seed,
            "rlplat": learn_rlplat(task, seed, budget_s, out / f"rlplat-{seed}"),
            "epymarl": learn_epymarl(src, task, seed, budget_s=budget_s),
        }
        print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
        rows.append(row)
    save_results(results_file(f"epymarl_{task}.json"), {
        "command": invocation(), "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"),
        "task": TASKS[task][0], "budget_s": budget_s, "seeds": rows,
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epymarl-src", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--learn", choices=sorted(TASKS), help="what each side learns in a time")
    parser.add_argument("--budget-s", type=int, default=1500, help="--learn: seconds per side")
    parser.add_argument("--seeds", type=int, default=1, help="--learn: seeds 0..N-1")
    parser.add_argument("--out", type=Path, help="--learn: rlplat's runs (default: a temp folder)")
    parser.add_argument("--mappo", choices=sorted(TASKS), help="EPyMARL's mappo for --steps")
    parser.add_argument("--qmix", choices=sorted(TASKS), help="both sides' QMIX for --steps")
    parser.add_argument("--sides", nargs="+", choices=("rlplat", "epymarl"),
                        default=["rlplat", "epymarl"], help="--qmix: run only these sides")
    parser.add_argument("--rlplat-overrides", nargs="*", default=[],
                        help="--qmix: overrides of rlplat's shipped file, e.g. "
                        "resources.env_runners.envs=8")
    parser.add_argument("--seed", type=int, default=0,
                        help="--qmix: both sides' seed (one EPyMARL side at a time: its run is "
                        "found as the one new sacred run)")
    parser.add_argument("--retest", nargs="+", metavar="SIDE",
                        help="--qmix: test these saved sides again (see --retest-episodes)")
    parser.add_argument("--retest-episodes", type=int, default=1000)
    args = parser.parse_args()
    if args.qmix and args.retest:
        retest(
            args.epymarl_src.resolve(), args.qmix, args.steps, args.retest_episodes, args.retest
        )
        return
    if args.qmix:
        out = args.out or Path(tempfile.mkdtemp(prefix="rlplat-epymarl-"))
        qmix_at_steps(
            args.epymarl_src.resolve(), args.qmix, args.steps, args.sides, out,
            args.rlplat_overrides, args.seed,
        )
        return
    if args.mappo:
        peer_mappo(args.epymarl_src.resolve(), args.mappo, args.seeds, args.steps)
        return
    if args.learn:
        out = args.out or Path(tempfile.mkdtemp(prefix="rlplat-epymarl-"))
        learning(args.epymarl_src.resolve(), args.learn, args.seeds, args.budget_s, out)
        return
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
