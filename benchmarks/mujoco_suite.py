"""MuJoCo: rlplat's experiments/mujoco files against Stable-Baselines3 with RL Zoo's settings, at
the same env-step budget, beside the published numbers.

    pip install -e ".[mujoco,bench]" && pip install --no-deps rl-zoo3==2.9.2
    python benchmarks/mujoco_suite.py --runs ppo:halfcheetah ppo:hopper --seeds 3 --sb3-seeds 0
                                [--budget 1000000] [--out DIR]

For each ``algo:env``, one training at a time (never two on the CPU at once): ``rlplat train
experiments/mujoco/<env>_<algo>.yaml --seeds N tune.max_concurrent=1 stop.env_steps=B`` into
``<out>/<env>_<algo>/rlplat``, after a Stable-Baselines3 process for each SB3 seed, built
from RL Zoo's own hyperparameter file (``rl_zoo3/hyperparams/<algo>.yml``, entry ``<Env>-v4``; run
on the same ``-v5`` env as rlplat): VecNormalize when RL Zoo normalises, its policy_kwargs, its
action noise. Where rlplat's file takes CleanRL's defaults instead (``SB3_SETTINGS``), SB3 gets
the same settings written in RL Zoo's format. What finished under ``out`` is reused and an
unfinished rlplat run is continued with ``rlplat train --resume``, so a long benchmark goes on in
a later session with the same ``--out``.

Scores are the final policy's greedy return over 10 episodes: rlplat's seeds through
``rlplat report`` (each seed's last checkpoint; IQM and 95% bootstrap CI over seeds), SB3's with
``evaluate_policy(deterministic=True)`` on a fresh env with the training VecNormalize statistics
frozen. Speeds are env steps per second of training (rlplat: the trial's ``time_total_s``; SB3:
``learn()``). Results go to benchmarks/results/mujoco.json; the table printed at the end has
docs/mujoco.md's numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import (
    invocation,
    load_results,
    machine,
    peer_row,
    read_yaml,
    report_row,
    results_file,
    same_budget,
    save_results,
    train,
    train_seeds,
)

# This file's folder holds harness.py, and this file's name would hide the mujoco package from
# the SB3 process: MuJoCo is imported from site-packages, not from here.
HERE = Path(__file__).resolve().parent
sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != HERE]

RESULTS = results_file("mujoco.json")
EPISODES = 10  # greedy episodes scoring each final policy
ENVS = {
    "halfcheetah": "HalfCheetah",
    "hopper": "Hopper",
    "walker2d": "Walker2d",
    "ant": "Ant",
    "humanoid": "Humanoid",
}
# Published returns at 1M env steps (Humanoid SAC/TD3 on RL Zoo: 2M): RL Zoo's benchmark.md
# (-v3 envs, one run, deterministic evaluation) / CleanRL's docs/benchmark (-v4, 3 seeds, its
# own default settings), as issue 40 quotes them.
PUBLISHED = {
    ("ppo", "halfcheetah"): ("5819", "1443 ± 46"),
    ("ppo", "hopper"): ("2410", "2383 ± 272"),
    ("ppo", "walker2d"): ("3479", "2288 ± 572"),
    ("ppo", "ant"): ("1327", "-"),
    ("ppo", "humanoid"): ("-", "716 ± 49"),
    ("sac", "halfcheetah"): ("9535", "9635 ± 1424"),
    ("sac", "hopper"): ("2326", "2310 ± 343"),
    ("sac", "walker2d"): ("3863", "3591 ± 911"),
    ("sac", "ant"): ("4616", "-"),
    ("sac", "humanoid"): ("6232 (2M)", "4996 ± 686"),
    ("td3", "halfcheetah"): ("9656", "9583 ± 126"),
    ("td3", "hopper"): ("3606", "3135 ± 360"),
    ("td3", "walker2d"): ("4718", "4058 ± 659"),
    ("td3", "ant"): ("5813", "-"),
    ("td3", "humanoid"): ("5567 (2M)", "5035 ± 22"),
}


# CleanRL's ppo_continuous_action.py defaults in RL Zoo's format, for the files that take them
# (RL Zoo's tuned Hopper settings stand still at ~1,000 on -v5). SB3's PPO defaults already are
# CleanRL's network (64x64 tanh, orthogonal weights, log std 0) and Adam eps 1e-5.
CLEANRL_PPO = {
    "normalize": True, "n_envs": 1, "n_steps": 2048, "batch_size": 64, "n_epochs": 10,
    "learning_rate": "lin_3e-4", "gamma": 0.99, "gae_lambda": 0.95, "clip_range": 0.2,
    "ent_coef": 0.0, "vf_coef": 0.5, "max_grad_norm": 0.5,
}
SB3_SETTINGS = {("ppo", "hopper"): ("CleanRL ppo_continuous_action.py defaults", CLEANRL_PPO)}


# --- Stable-Baselines3 (its own process: ``mujoco_suite.py --sb3 ...``) ---------------------------


def zoo_source(algo: str, env: str) -> str:
    return f"rl_zoo3 2.9.2 hyperparams/{algo}.yml {ENVS[env]}-v4"


def sb3_settings(algo: str, env: str) -> tuple[str, dict[str, Any]]:
    """Where SB3's settings come from, and the settings: ``SB3_SETTINGS``, else RL Zoo's entry
    for ``<Env>-v4`` in the installed rl_zoo3's hyperparams/<algo>.yml (read as data; rl_zoo3's
    modules and their dependencies are not needed)."""
    import importlib.util

    import yaml

    if (algo, env) in SB3_SETTINGS:
        source, settings = SB3_SETTINGS[(algo, env)]
        return source, dict(settings)
    spec = importlib.util.find_spec("rl_zoo3")
    if spec is None or spec.origin is None:
        raise SystemExit("RL Zoo's settings: pip install --no-deps rl-zoo3==2.9.2")
    path = Path(spec.origin).parent / "hyperparams" / f"{algo}.yml"
    settings = yaml.load(path.read_text(), Loader=yaml.UnsafeLoader)[f"{ENVS[env]}-v4"]
    return zoo_source(algo, env), dict(settings)


def _learning_rate(value: float | str) -> Any:
    """RL Zoo's ``lin_<rate>``: decayed linearly to 0 over training (SB3 passes the remaining
    fraction of training)."""
    if isinstance(value, str) and value.startswith("lin_"):
        initial = float(value.removeprefix("lin_"))
        return lambda remaining: remaining * initial
    return value


def sb3_model(
    algo: str, env: str, seed: int, n_envs: int | None = None, **extra: Any
) -> tuple[Any, Any]:
    """The SB3 model RL Zoo would build from ``sb3_settings`` (on -v5), and its training env.
    ``n_envs``: that many envs in subprocesses instead of RL Zoo's count; ``extra``: more keyword
    arguments of the model."""
    import numpy as np
    from stable_baselines3 import PPO, SAC, TD3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.noise import NormalActionNoise
    from stable_baselines3.common.vec_env import VecNormalize
    from torch import nn

    _, settings = sb3_settings(algo, env)
    if "learning_rate" in settings:
        settings["learning_rate"] = _learning_rate(settings["learning_rate"])
    for unused in ("n_timesteps", "policy"):
        settings.pop(unused, None)
    normalize = settings.pop("normalize", False)
    from stable_baselines3.common.vec_env import SubprocVecEnv

    zoo_envs = settings.pop("n_envs", 1)
    vec_env = make_vec_env(
        f"{ENVS[env]}-v5", n_envs=n_envs or zoo_envs, seed=seed,
        vec_env_cls=SubprocVecEnv if n_envs else None,
        # forked, not spawned: a spawned worker would import this file without harness beside it
        vec_env_kwargs={"start_method": "fork"} if n_envs else None,
    )
    if normalize:  # RL Zoo: true, or VecNormalize's keyword arguments
        options = normalize if isinstance(normalize, dict) else {}
        vec_env = VecNormalize(vec_env, gamma=settings.get("gamma", 0.99), **options)
    if "policy_kwargs" in settings:
        settings["policy_kwargs"] = eval(settings["policy_kwargs"], {"dict": dict, "nn": nn})
    if settings.pop("noise_type", None) == "normal":
        n = vec_env.action_space.shape[-1]
        std = settings.pop("noise_std")
        settings["action_noise"] = NormalActionNoise(np.zeros(n), std * np.ones(n))
    if algo == "crossq":
        from sb3_contrib import CrossQ  # pip install sb3-contrib==2.9.2

        model_class: Any = CrossQ
    else:
        model_class = {"ppo": PPO, "sac": SAC, "td3": TD3}[algo]
    model = model_class("MlpPolicy", vec_env, seed=seed, device="cpu", **settings, **extra)
    return model, vec_env


def sb3_train(algo: str, env: str, seed: int, budget: int) -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    model, vec_env = sb3_model(algo, env, seed)
    started = time.monotonic()
    model.learn(total_timesteps=budget)
    train_s = time.monotonic() - started
    eval_env: Any = DummyVecEnv([lambda: gym.make(f"{ENVS[env]}-v5")])
    eval_env.seed(10_000 + seed)
    if isinstance(vec_env, VecNormalize):
        frozen = VecNormalize(eval_env, training=False, norm_reward=False)
        frozen.obs_rms = vec_env.obs_rms
        eval_env = frozen
    returns, _ = evaluate_policy(
        model, eval_env, n_eval_episodes=EPISODES, deterministic=True, return_episode_rewards=True
    )
    return {
        "seed": seed,
        "settings": sb3_settings(algo, env)[0],
        "budget": budget,
        "env_steps": model.num_timesteps,
        "train_s": round(train_s, 1),
        "env_steps_per_s": round(model.num_timesteps / train_s, 1),
        "greedy_return_mean": round(float(np.mean(returns)), 1),
        "greedy_returns": [round(float(r), 1) for r in returns],
    }


# --- rlplat -------------------------------------------------------------------------------------


def experiment_file(algo: str, env: str) -> str:
    return f"experiments/mujoco/{env}_{algo}.yaml"


def run_pair(
    algo: str, env: str, seeds: int, sb3_seeds: list[int], budget: int, out: Path
) -> dict[str, Any]:
    base = out / f"{env}_{algo}"
    settings = sb3_settings(algo, env)[0]
    sb3_rows = []
    for seed in sb3_seeds:
        saved = base / "sb3" / f"seed{seed}.json"
        command = [sys.executable, __file__, "--sb3", algo, env, str(seed), str(budget)]
        row = peer_row(saved, command)
        trained_with = row.get("settings", zoo_source(algo, env))  # rows before the field: RL Zoo's
        if trained_with != settings:
            raise SystemExit(f"{saved} was trained with {trained_with}, not {settings}: use "
                             "another --out.")
        same_budget(row["budget"], budget, saved)
        sb3_rows.append(row)
    run_dir, seed_rows = train_seeds(experiment_file(algo, env), seeds, budget, base / "rlplat")
    report = report_row([str(run_dir)], base / "report", EPISODES)
    return {
        "algo": algo,
        "env": f"{ENVS[env]}-v5",
        "budget": budget,
        "rlplat": {
            "command": f"rlplat train {experiment_file(algo, env)} --seeds {seeds} "
            f"tune.max_concurrent=1 stop.env_steps={budget}",
            "run_dir": str(run_dir),
            "seeds": seed_rows,
            "report": report,
        },
        "sb3": {"settings": settings, "seeds": sb3_rows},
        "published": dict(
            zip(("rl_zoo", "cleanrl"), PUBLISHED.get((algo, env), ("-", "-")), strict=True)
        ),
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| algorithm | env | env steps | rlplat IQM [95% CI] (seeds) | SB3 (seeds) "
        "| env steps/s rlplat / SB3 | training min rlplat / SB3 | RL Zoo / CleanRL |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        iqm = row["rlplat"]["report"]["iqm"]
        ci = iqm["ci"]
        ours = f"{iqm['estimate']:.0f}" + (f" [{ci[0]:.0f}, {ci[1]:.0f}]" if ci else "")
        seeds, sb3 = row["rlplat"]["seeds"], row["sb3"]["seeds"]
        theirs = (
            f"{sum(s['greedy_return_mean'] for s in sb3) / len(sb3):.0f} ({len(sb3)})"
            if sb3 else "-"
        )

        speed = [median(seeds, "env_steps_per_s"), median(sb3, "env_steps_per_s")]
        minutes = [median(seeds, "train_s"), median(sb3, "train_s")]
        published = row["published"]
        lines.append(
            f"| {row['algo'].upper()} | {row['env']} | {row['budget']:,} | {ours} ({len(seeds)}) "
            f"| {theirs} | {speed[0] or '-'} / {speed[1] or '-'} "
            f"| {_minutes(minutes[0])} / {_minutes(minutes[1])} "
            f"| {published['rl_zoo']} / {published['cleanrl']} |"
        )
    return "\n".join(lines)


def median(items: list[dict[str, Any]], key: str) -> float | None:
    values = sorted(item[key] for item in items)
    return values[len(values) // 2] if values else None


def _minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.1f}"


# --- time to a return on one node (issue 40's GPU check) ----------------------------------------

NODE_FILE = "experiments/mujoco/halfcheetah_ppo_node.yaml"
WINDOW = 10  # finished training episodes averaged, both sides, when checking the threshold


def sb3_time_to(threshold: float, limit_s: float, n_envs: int, seed: int) -> dict[str, Any]:
    """SB3's PPO with RL Zoo's HalfCheetah settings on ``n_envs`` subprocess envs until the mean
    return of its last ``WINDOW`` training episodes reaches ``threshold`` (checked after each
    rollout) or ``limit_s`` seconds of ``learn()`` pass."""
    from stable_baselines3.common.callbacks import BaseCallback

    class Clock(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.curve: list[tuple[float, int, float]] = []
            self.done = False

        def _on_training_start(self) -> None:
            self.started = time.monotonic()

        def _on_rollout_end(self) -> None:
            episodes = self.model.ep_info_buffer
            if len(episodes) == WINDOW:
                mean = sum(e["r"] for e in episodes) / WINDOW
                seconds = time.monotonic() - self.started
                self.curve.append((round(seconds, 1), self.num_timesteps, round(mean, 1)))
                self.done = mean >= threshold or seconds >= limit_s

        def _on_step(self) -> bool:
            return not self.done

    model, _ = sb3_model("ppo", "halfcheetah", seed, n_envs=n_envs, stats_window_size=WINDOW)
    clock = Clock()
    model.learn(total_timesteps=10**8, callback=clock)
    return _crossing("sb3", clock.curve, threshold) | {
        "settings": f"{zoo_source('ppo', 'halfcheetah')}, {n_envs} SubprocVecEnv envs",
        "machine": machine(),
        "limit_s": limit_s,
    }


def _crossing(side: str, curve: list[tuple[float, int, float]], threshold: float) -> dict[str, Any]:
    """Where ``curve`` (seconds, env steps, windowed return) first reaches ``threshold``."""
    reached = next((point for point in curve if point[2] >= threshold), None)
    return {
        "side": side,
        "seconds_to": reached[0] if reached else None,
        "env_steps_to": reached[1] if reached else None,
        "last": curve[-1] if curve else None,
        "curve": curve,
    }


def rlplat_time_to(
    threshold: float, limit_s: float, out: Path, node: list[str]
) -> dict[str, Any]:
    """``rlplat train NODE_FILE`` until its windowed training return reaches ``threshold``;
    ``node``: overrides that size it to another node, e.g. resources.env_runners.count=30."""
    overrides = (f"stop.episode_return_mean={threshold}", f"stop.time_s={limit_s}",
                 f"reporting.metrics_num_episodes_for_smoothing={WINDOW}", *node)
    training = train(NODE_FILE, *overrides, out=out)
    curve = [
        (round(r["time_total_s"], 1), int(r["num_env_steps_sampled_lifetime"]),
         round(r["window"]["episode_return_mean"], 1))
        for r in training.results()
        if (r.get("window") or {}).get("num_episodes", 0) >= WINDOW  # full windows, as SB3's
    ]
    resolved = read_yaml(training.run_dir / "experiment.yaml")
    return _crossing("rlplat", curve, threshold) | {
        "command": f"rlplat train {NODE_FILE} {' '.join(overrides)}",
        "command_wall_s": training.wall_s,
        "run_dir": str(training.run_dir),
        "resources": resolved["resources"],
    }


def time_to(
    threshold: float, limits: dict[str, float], sb3_envs: int, out: Path, node: list[str],
    sides: list[str],
) -> dict[str, Any] | None:
    """SB3, then rlplat (one at a time), each until ``threshold`` or its limit in ``limits``.
    Each side's row is saved under ``out`` and reused, so the two sides can run in separate
    calls (``sides``); the race's row, once both are there."""
    rows: dict[str, dict[str, Any]] = {}
    if "sb3" in sides or (out / "sb3.json").exists():
        command = [sys.executable, __file__, "--sb3-time-to", str(threshold),
                   str(limits["sb3"]), str(sb3_envs)]
        rows["sb3"] = peer_row(out / "sb3.json", command)
    saved = out / "rlplat.json"
    if "rlplat" in sides and not saved.exists():
        row = rlplat_time_to(threshold, limits["rlplat"], out / "rlplat", node)
        save_results(saved, row | {"limit_s": limits["rlplat"], "machine": machine()})
    if saved.exists():
        rows["rlplat"] = load_results(saved)
    if len(rows) < 2:
        return None
    race = {"threshold": threshold, "window": WINDOW, "machine": rows["rlplat"]["machine"], **rows}
    if rows["sb3"]["seconds_to"] and rows["rlplat"]["seconds_to"]:
        race["speedup"] = round(rows["sb3"]["seconds_to"] / rows["rlplat"]["seconds_to"], 2)
    elif rows["rlplat"]["seconds_to"]:
        race["speedup_at_least"] = round(rows["sb3"]["last"][0] / rows["rlplat"]["seconds_to"], 2)
    return race


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", default=["ppo:halfcheetah", "ppo:hopper"],
                        help="algo:env pairs, e.g. ppo:halfcheetah sac:hopper")
    parser.add_argument("--seeds", type=int, default=3, help="rlplat's seeds: 0..N-1")
    parser.add_argument("--sb3-seeds", nargs="*", type=int, default=[0])
    parser.add_argument("--budget", type=int, default=1_000_000, help="env steps per run")
    parser.add_argument("--out", type=Path, help="runs go here (default: a temp folder)")
    parser.add_argument("--time-to", type=float, metavar="RETURN",
                        help=f"race {NODE_FILE} against SB3 to this training return")
    parser.add_argument("--limit-s", type=float, default=240, help="--time-to: seconds per side")
    parser.add_argument("--sb3-limit-s", type=float, help="--time-to: SB3's (default --limit-s)")
    parser.add_argument("--sides", nargs="+", choices=["sb3", "rlplat"], default=["sb3", "rlplat"],
                        help="--time-to: the sides to run now (a saved side is reused)")
    parser.add_argument("--sb3-envs", type=int, default=16, help="--time-to: SB3's envs")
    parser.add_argument("--node", nargs="*", default=[], metavar="KEY=VALUE",
                        help="--time-to: overrides of the rlplat file for another node size")
    parser.add_argument("--sb3-time-to", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--sb3", nargs=4, metavar=("ALGO", "ENV", "SEED", "BUDGET"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sb3:
        algo, env, seed, budget = args.sb3
        print(json.dumps(sb3_train(algo, env, int(seed), int(budget))))
        return
    if args.sb3_time_to:
        threshold, limit_s, n_envs = args.sb3_time_to
        print(json.dumps(sb3_time_to(float(threshold), float(limit_s), int(n_envs), seed=0)))
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="mujoco_"))
    if args.time_to:
        limits = {"rlplat": args.limit_s, "sb3": args.sb3_limit_s or args.limit_s}
        race = time_to(args.time_to, limits, args.sb3_envs, out, args.node, args.sides)
        if race is None:
            print(f"saved under {out}; run the other side with the same --out")
            return
        save_results(out / "time_to.json", race)
        print(json.dumps({k: v for k, v in race.items() if k not in ("sb3", "rlplat")}))
        for side in ("sb3", "rlplat"):
            print(side, {k: v for k, v in race[side].items() if k != "curve"})
        return
    results = load_results(RESULTS)
    rows = results.get("rows", {})
    for pair in args.runs:
        algo, env = pair.split(":")
        row = run_pair(algo, env, args.seeds, args.sb3_seeds, args.budget, out)
        rows[f"{algo}:{env}:{args.budget}"] = row
        save_results(RESULTS, {"command": invocation(), "machine": machine(),
                               "date": time.strftime("%Y-%m-%d"), "rows": rows})
        print(table([row]), flush=True)
    print(table(list(rows.values())))


if __name__ == "__main__":
    main()
