"""Atari: rlplat's experiments/atari PPO files against Stable-Baselines3 with RL Zoo's Atari PPO
settings, at the same env-step budget, on the same env; and the env backends' speeds.

    pip install -e ".[atari,bench]" && pip install --no-deps rl-zoo3==2.9.2
    python benchmarks/atari.py --runs breakout --seeds 1 --sb3-seeds 0 [--budget 1000000]
                               [--out DIR]
    python benchmarks/atari.py --backends [--game breakout]
    python benchmarks/atari.py --env-share [--game breakout] [--out DIR]
    python benchmarks/atari.py --backend-training [--game breakout] [--out DIR]
    python benchmarks/atari.py --modules

For each game, one training at a time (never two on the CPU at once): a Stable-Baselines3 process
per SB3 seed, built as RL Zoo builds it from its ``atari:`` entry in ``rl_zoo3/hyperparams/
ppo.yml`` (``AtariWrapper``, 8 envs, 4 stacked frames, ``lin_`` schedules decayed over the
budget), then ``rlplat train experiments/atari/<game>_ppo.yaml --seeds N`` with its learning rate
decayed over the same budget. Both play ``ALE/<Game>-v5`` with frame skip 1 under the wrapper and
sticky actions off, as the shipped file sets (RL Zoo's own table is on v4 NoFrameskip: the same).

Scores are game scores (unclipped, a whole game across its lives) of the final policy over 10
games, greedy and sampled: rlplat's through ``rlplat report`` (greedy; IQM over seeds) and
``rlplat eval --last --explore``, SB3's with ``evaluate_policy`` (whose Monitor counts whole
games). What finished under ``--out`` is reused, so a long run goes on in a later session.

``--backends``: env steps per second of the preset's env with random actions, in Gymnasium's
synchronous vector env (what an RLlib env runner steps) and in EnvPool, at 1, 8 and 16 envs.
``--env-share``: the share of a PPO training iteration spent stepping the env, from RLlib's own
timers in a short ``rlplat train experiments/atari/<game>_ppo.yaml`` (50 iterations, into
``--out`` and reused from there), and what the backends' speeds (``--backends``, 8 envs) say a
faster env would save of it.
``--backend-training``: the same short training with ``env.backend: gymnasium`` and then
``envpool``: the median iteration's time and env steps per second of each.
``--modules``: milliseconds of PPO's module on stacked 84x84 frames, acting on 8 and learning
from 256 (forward and backward, one torch thread), with RLlib's default CNN for 84x84 and with
rlplat's default, the Nature CNN.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import (
    REPO,
    invocation,
    load_results,
    machine,
    peer_row,
    report_row,
    results_file,
    rlplat,
    same_budget,
    save_results,
    train,
    train_seeds,
)

RESULTS = results_file("atari.json")
GAMES = {"breakout": "Breakout", "pong": "Pong"}
EPISODES = 10  # games scoring each final policy
ENV_KWARGS = {"frameskip": 1, "repeat_action_probability": 0.0}  # as experiments/atari sets
# Published game scores at 10M env steps (v4 NoFrameskip, no sticky actions): RL Zoo's
# benchmark.md (one run, sampled actions).
PUBLISHED = {"breakout": "398", "pong": "20.99"}


def experiment_file(game: str) -> str:
    return f"experiments/atari/{game}_ppo.yaml"


# --- Stable-Baselines3 (its own process: ``atari.py --sb3 ...``) ---------------------------------


def zoo_atari_settings() -> dict[str, Any]:
    """RL Zoo's ``atari:`` PPO entry of the installed rl_zoo3 (read as data)."""
    import yaml

    spec = importlib.util.find_spec("rl_zoo3")
    if spec is None or spec.origin is None:
        raise SystemExit("RL Zoo's settings: pip install --no-deps rl-zoo3==2.9.2")
    path = Path(spec.origin).parent / "hyperparams" / "ppo.yml"
    return dict(yaml.load(path.read_text(), Loader=yaml.UnsafeLoader)["atari"])


def _schedule(value: float | str) -> Any:
    """RL Zoo's ``lin_<value>``: decayed linearly to 0 over training."""
    if isinstance(value, str) and value.startswith("lin_"):
        initial = float(value.removeprefix("lin_"))
        return lambda remaining: remaining * initial
    return value


def sb3_envs(game: str, n_envs: int, seed: int) -> Any:
    import ale_py  # registers the ALE/ ids
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    del ale_py
    env = make_atari_env(f"ALE/{GAMES[game]}-v5", n_envs=n_envs, seed=seed, env_kwargs=ENV_KWARGS)
    return VecFrameStack(env, n_stack=4)


def sb3_train(game: str, seed: int, budget: int) -> dict[str, Any]:
    import numpy as np
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy

    settings = zoo_atari_settings()
    for unused in ("env_wrapper", "frame_stack", "policy", "n_timesteps"):
        settings.pop(unused, None)
    env = sb3_envs(game, settings.pop("n_envs"), seed)
    for key in ("learning_rate", "clip_range"):
        settings[key] = _schedule(settings[key])
    model = PPO("CnnPolicy", env, seed=seed, device="cpu", **settings)
    started = time.monotonic()
    model.learn(total_timesteps=budget)
    train_s = time.monotonic() - started
    scores = {}
    for name, deterministic in (("greedy", True), ("sampled", False)):
        games, _ = evaluate_policy(
            model, sb3_envs(game, 1, 10_000 + seed), n_eval_episodes=EPISODES,
            deterministic=deterministic, return_episode_rewards=True,
        )
        scores[name] = [float(score) for score in games]
    return {
        "seed": seed,
        "settings": "rl_zoo3 2.9.2 hyperparams/ppo.yml atari",
        "budget": budget,
        "env_steps": model.num_timesteps,
        "train_s": round(train_s, 1),
        "env_steps_per_s": round(model.num_timesteps / train_s, 1),
        **{f"{name}_game_score_mean": round(float(np.mean(s)), 2) for name, s in scores.items()},
        **{f"{name}_game_scores": s for name, s in scores.items()},
    }


# --- rlplat -------------------------------------------------------------------------------------


def sampled_scores(run_dir: Path) -> list[dict[str, Any]]:
    """Each trial's last checkpoint, sampled actions: ``rlplat eval <trial> --last --explore``."""
    rows = []
    for trial in sorted(run_dir.glob("trial_*/")):
        done = rlplat("eval", str(trial), "--last", "--explore", "-n", str(EPISODES), "--json")
        report = json.loads(done.stdout)
        rows.append({"trial": trial.name, "game_scores": report["returns"]})
    return rows


def run_game(game: str, seeds: int, sb3_seeds: list[int], budget: int, out: Path) -> dict:
    base = out / f"{game}_ppo"
    sb3_rows = []
    for seed in sb3_seeds:
        saved = base / "sb3" / f"seed{seed}.json"
        row = peer_row(saved, [sys.executable, __file__, "--sb3", game, str(seed), str(budget)])
        same_budget(row["budget"], budget, saved)
        sb3_rows.append(row)
    learning_rate = f"training.lr=[[0, 0.00025], [{budget}, 0.0]]"  # RL Zoo's lin_2.5e-4
    run_dir, seed_rows = train_seeds(
        experiment_file(game), seeds, budget, base / "rlplat", learning_rate
    )
    return {
        "game": game,
        "env": f"ALE/{GAMES[game]}-v5 {ENV_KWARGS}",
        "budget": budget,
        "rlplat": {
            "command": f"rlplat train {experiment_file(game)} --seeds {seeds} "
            f"tune.max_concurrent=1 stop.env_steps={budget} '{learning_rate}'",
            "run_dir": str(run_dir),
            "seeds": seed_rows,
            "greedy": report_row([str(run_dir)], base / "report", EPISODES),
            "sampled": sampled_scores(run_dir),
        },
        "sb3": sb3_rows,
        "published_rl_zoo_10M": PUBLISHED[game],
    }


# --- env backends --------------------------------------------------------------------------------


def preset_env(game: str, backend: str = "gymnasium") -> Any:
    """The env spec of the preset's chain on ``game``, as experiments/atari writes it."""
    from rlplat.experiment.presets import expand_preset
    from rlplat.experiment.schema import Experiment

    experiment = Experiment.model_validate({
        "name": "backend", "algorithm": "PPO", "stop": {"env_steps": 1},
        "env": {"id": f"ALE/{GAMES[game]}-v5", "preset": "atari", "kwargs": ENV_KWARGS,
                "backend": backend},
    })
    return expand_preset(experiment).env


def gymnasium_envs(game: str, count: int) -> Any:
    """The preset's env (training chain) in Gymnasium's synchronous vector env."""
    import gymnasium as gym

    from rlplat.environments.make import EnvCreator

    creator = EnvCreator(preset_env(game))
    return gym.vector.SyncVectorEnv([creator for _ in range(count)])


def envpool_envs(game: str, count: int, threads: int = 0) -> Any:
    """The same chain in EnvPool, as an env runner steps it with env.backend: envpool;
    ``threads``: its worker threads (0: one per core)."""
    import os

    from rlplat.environments.make import EnvCreator

    creator = EnvCreator(preset_env(game, "envpool"), threads=threads or os.cpu_count() or 1)
    return creator({"num_envs": count})


BACKENDS = {
    "gymnasium": gymnasium_envs,
    "envpool": envpool_envs,
    # what an env runner's one core would give it: torch acts and learns on the other
    "envpool_1_thread": lambda game, count: envpool_envs(game, count, threads=1),
}


def steps_per_second(envs: Any, count: int, actions: int, seconds: float = 10.0) -> float:
    """Env steps per second of ``count`` envs stepped together with random actions."""
    import numpy as np

    envs.reset()
    rng = np.random.default_rng(0)
    steps, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        envs.step(rng.integers(actions, size=count))
        steps += count
    return steps / (time.monotonic() - started)


def backends(game: str) -> list[dict[str, Any]]:
    rows = []
    for count in (1, 8, 16):
        row: dict[str, Any] = {"envs": count}
        for name, make in BACKENDS.items():
            try:
                envs = make(game, count)
            except ImportError as exc:
                row[name] = f"not installed ({exc})"
                continue
            actions = int(envs.single_action_space.n)
            row[name] = round(steps_per_second(envs, count, actions), 1)
            envs.close()
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


SHORT_ITERATIONS = 50  # a short training's iterations; the first WARM_UP are left out
WARM_UP = 10


def short_training(game: str, out: Path, *extra: str) -> tuple[list[dict[str, Any]], str]:
    """``SHORT_ITERATIONS`` iterations of experiments/atari/<game>_ppo.yaml (no checkpoint, no
    evaluation) into ``out``, reused from there: the results after the warm-up, and the
    command."""
    from rlplat.experiment.load import load_experiment

    experiment = load_experiment(REPO / experiment_file(game)).experiment
    batch = experiment.training["train_batch_size_per_learner"]
    overrides = (f"stop.env_steps={SHORT_ITERATIONS * batch}", "checkpoint.every=0",
                 "checkpoint.at_end=false", "evaluation.evaluation_interval=null", *extra)
    training = train(experiment_file(game), *overrides, out=out, reuse=True)
    return training.results()[WARM_UP:], " ".join(["rlplat train", experiment_file(game),
                                                   *overrides])


def env_share(game: str, backend_rows: list[dict[str, Any]], out: Path) -> dict[str, Any]:
    """The env's share of a training iteration, from RLlib's timers: the env runner's
    ``env_step_timer`` (one step of its vector env, averaged over the iteration's steps) times
    the vector steps per iteration, over ``time_this_iter_s``: the median of the iterations
    after the warm-up. RLlib's sampling and update timers are not used: they average over the
    whole run, not one iteration."""
    import statistics

    results, command = short_training(game, out)
    envs = preset_envs_per_runner(game)
    batch = results[0]["env_runners"]["num_env_steps_sampled"]
    env = statistics.median(
        r["env_runners"]["env_step_timer"] * batch / envs / r["time_this_iter_s"] for r in results
    )
    [at_8] = [row for row in backend_rows if row["envs"] == envs]
    saved = {name: round(env * (1 - at_8["gymnasium"] / at_8[name]), 4)
             for name in ("envpool", "envpool_1_thread")}
    return {
        "command": command,
        "iterations": len(results),
        "median_iteration_s": round(statistics.median(r["time_this_iter_s"] for r in results), 3),
        "env_step_share": round(env, 4),
        "share_saved_by": saved,
    }


def preset_envs_per_runner(game: str) -> int:
    from rlplat.experiment.load import load_experiment

    return load_experiment(REPO / experiment_file(game)).experiment.resources.env_runners.envs


def backend_training(game: str, out: Path) -> dict[str, Any]:
    """The same short training with each env backend, one after the other: the median
    iteration's time after the warm-up, and env steps per second."""
    import statistics

    rows = {}
    for backend in ("gymnasium", "envpool"):
        results, command = short_training(game, out / backend, f"env.backend={backend}")
        median = statistics.median(r["time_this_iter_s"] for r in results)
        batch = results[0]["env_runners"]["num_env_steps_sampled"]
        rows[backend] = {
            "command": command,
            "iterations": len(results),
            "median_iteration_s": round(median, 3),
            "env_steps_per_s": round(batch / median, 1),
        }
        print(backend, json.dumps(rows[backend]), flush=True)
    rows["envpool_speedup"] = round(
        rows["gymnasium"]["median_iteration_s"] / rows["envpool"]["median_iteration_s"], 3
    )
    return rows


def modules() -> dict[str, Any]:
    import gymnasium as gym
    import numpy as np
    import torch
    from ray.rllib.core.columns import Columns

    from rlplat.prepare.observations import NATURE_CNN
    from rlplat.rllib.modules import ScaledFramesPPOModule

    torch.set_num_threads(1)
    frames = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    rows = {}
    for name, model_config in (("rllib_default", {}), ("nature_cnn", dict(NATURE_CNN))):
        module = ScaledFramesPPOModule(
            observation_space=frames, action_space=gym.spaces.Discrete(4),
            model_config=model_config, inference_only=False,
        )
        acting = {Columns.OBS: torch.randint(0, 255, (8, 84, 84, 4), dtype=torch.uint8)}
        learning = {Columns.OBS: torch.randint(0, 255, (256, 84, 84, 4), dtype=torch.uint8)}
        with torch.no_grad():
            module.forward_exploration(acting)
            started = time.perf_counter()
            for _ in range(20):
                module.forward_exploration(acting)
            act_ms = (time.perf_counter() - started) / 20 * 1000
        started = time.perf_counter()
        for _ in range(3):
            output = module.forward_train(learning)
            loss = output[Columns.ACTION_DIST_INPUTS].sum() + module.compute_values(learning).sum()
            loss.backward()
        learn_ms = (time.perf_counter() - started) / 3 * 1000
        rows[name] = {
            "parameters": sum(p.numel() for p in module.parameters()),
            "act_ms_batch_8": round(act_ms, 1),
            "learn_ms_batch_256": round(learn_ms, 1),
        }
        print(name, rows[name], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", default=["breakout"], choices=sorted(GAMES))
    parser.add_argument("--seeds", type=int, default=1, help="rlplat's seeds: 0..N-1")
    parser.add_argument("--sb3-seeds", nargs="*", type=int, default=[0])
    parser.add_argument("--budget", type=int, default=1_000_000, help="env steps per run")
    parser.add_argument("--out", type=Path, help="runs go here (default: a temp folder)")
    parser.add_argument("--backends", action="store_true", help="measure the env backends")
    parser.add_argument("--game", default="breakout", choices=sorted(GAMES))
    parser.add_argument("--env-share", action="store_true",
                        help="the env's share of a training iteration")
    parser.add_argument("--backend-training", action="store_true",
                        help="time a short training with each env backend")
    parser.add_argument("--modules", action="store_true", help="time the default CNNs")
    parser.add_argument("--sb3", nargs=3, metavar=("GAME", "SEED", "BUDGET"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sb3:
        game, seed, budget = args.sb3
        print(json.dumps(sb3_train(game, int(seed), int(budget))))
        return
    results = load_results(RESULTS)
    stamp = {"command": invocation(), "machine": machine(), "date": time.strftime("%Y-%m-%d")}
    if args.backends or args.modules or args.env_share or args.backend_training:
        if args.backends:
            results["backends"] = {**stamp, "game": args.game, "rows": backends(args.game)}
        if args.env_share:
            out = args.out or Path(tempfile.mkdtemp(prefix="atari_share_"))
            share = env_share(args.game, results["backends"]["rows"], out)
            results["env_share"] = {**stamp, "game": args.game, **share}
            print(json.dumps(share, indent=1), flush=True)
        if args.backend_training:
            out = args.out or Path(tempfile.mkdtemp(prefix="atari_backends_"))
            rows = backend_training(args.game, out)
            results["backend_training"] = {**stamp, "game": args.game, **rows}
        if args.modules:
            results["modules"] = {**stamp, "rows": modules()}
        save_results(RESULTS, results)
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="atari_"))
    rows = results.setdefault("rows", {})
    for game in args.runs:
        rows[f"ppo:{game}:{args.budget}"] = {
            **stamp, **run_game(game, args.seeds, args.sb3_seeds, args.budget, out)
        }
        save_results(RESULTS, results)
        print(json.dumps(rows[f"ppo:{game}:{args.budget}"], indent=2), flush=True)


if __name__ == "__main__":
    main()
