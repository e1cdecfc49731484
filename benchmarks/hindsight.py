"""Issue 103's hindsight tables, 3 seeds a side at equal env steps: DQN on bit flipping
(envs/bit_flip.py, the HER paper's task) with and without hindsight relabelling, beside
Stable-Baselines3's DQN with its ``HerReplayBuffer``; and Gymnasium-Robotics' FetchReach.

    pip install -e ".[bench,robotics]"
    python benchmarks/hindsight.py [--bits 15] [--sides her plain sb3_her] [--out DIR]
    python benchmarks/hindsight.py --task fetch_reach [--sides crossq_her sac_her sb3_sac_her]

rlplat: ``rlplat train experiments/bit_flip_her.yaml --seeds 3 tune.max_concurrent=1
stop.env_steps=100000 stop.success_rate=null env.kwargs.bits=<n>`` (``replay={}`` for the
side without relabelling), then ``rlplat report <run> --metric success_rate --eval-episodes
50``: each seed's greedy success rate over 50 episodes (seeds 0-49) of its last checkpoint.
SB3 (one process per seed, ``--sb3 BITS SEED``): DQN with the file's settings where SB3 has them
(4 envs, [256, 256], lr 1e-3, gamma 0.98, batch 128 every 16 env steps, a target update every
500 env steps, epsilon from 1 to 0.05 over 20k env steps, learning from 1,000, ``future`` goals,
4 per transition; SB3's DQN is not double-Q), then 50 greedy episodes on the same seeds. The
env is rlplat's ``BitFlip`` on both sides.

FetchReach-v4 at 20k env steps: rlplat's CrossQ and SAC with ``replay.her`` on RL Zoo's SAC
settings for FetchReach (benchmarks/fetch_reach_{crossq,sac}_her.yaml), scored as above; SB3's
SAC + ``HerReplayBuffer`` with RL Zoo's settings and its ``VecNormalize`` (``--sb3-fetch 1 STEPS
SEED``; ``--sb3-fetch 0 ...`` without it). Results go to benchmarks/results/hindsight.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import (
    REPO,
    load_results,
    peer_row,
    provenance,
    results_file,
    save_results,
    scored_seeds,
)

RESULTS = results_file("hindsight.json")
EXPERIMENT = "experiments/bit_flip_her.yaml"
BUDGET = 100_000
SEEDS = 3
EPISODES = 50
SIDES = {"her": (), "plain": ("replay={}",)}
FETCH_BUDGET = 20_000
FETCH_SIDES = {
    "crossq_her": "benchmarks/fetch_reach_crossq_her.yaml",
    "sac_her": "benchmarks/fetch_reach_sac_her.yaml",
}


def sb3_bit_flip(bits: int, seed: int) -> dict[str, Any]:
    """SB3's DQN + HER on rlplat's BitFlip; its greedy success over ``EPISODES`` episodes."""
    sys.path.insert(0, str(REPO))
    from stable_baselines3 import DQN, HerReplayBuffer
    from stable_baselines3.common.env_util import make_vec_env

    from envs.bit_flip import BitFlip

    env = make_vec_env(lambda: BitFlip(bits), n_envs=4, seed=seed)
    model = DQN(
        "MultiInputPolicy",
        env,
        learning_rate=1e-3,
        gamma=0.98,
        batch_size=128,
        buffer_size=1_000_000,
        learning_starts=1000,
        train_freq=4,  # per env: 16 env steps with 4 envs
        gradient_steps=1,
        target_update_interval=500,
        exploration_initial_eps=1.0,
        exploration_final_eps=0.05,
        exploration_fraction=20_000 / BUDGET,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs={"goal_selection_strategy": "future", "n_sampled_goal": 4},
        policy_kwargs={"net_arch": [256, 256]},
        seed=seed,
        device="cpu",
    )
    started = time.monotonic()
    model.learn(BUDGET)
    train_s = time.monotonic() - started
    play = BitFlip(bits)
    successes = []
    for episode in range(EPISODES):
        obs, _ = play.reset(seed=episode)
        done = False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, _, terminated, truncated, info = play.step(int(action))
            done = terminated or truncated
        successes.append(bool(info["is_success"]))
    return {"seed": seed, "success_rate": sum(successes) / EPISODES, "train_s": round(train_s, 1)}


def sb3_fetch_reach(normalize: int, seed: int, steps: int) -> dict[str, Any]:
    """SB3's SAC + HER on FetchReach-v4 with RL Zoo's settings (hyperparams/sac.yml,
    FetchReach-v1), with (1) or without (0) its ``VecNormalize``; greedy success over
    ``EPISODES`` episodes: ``python benchmarks/hindsight.py --sb3-fetch 1 8000 0`` (normalised,
    8,000 env steps, seed 0; needs gymnasium-robotics)."""
    import gymnasium as gym
    import gymnasium_robotics
    from stable_baselines3 import SAC, HerReplayBuffer
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    gym.register_envs(gymnasium_robotics)
    env = make_vec_env("FetchReach-v4", n_envs=1, seed=seed)
    if normalize:
        env = VecNormalize(env, norm_reward=False)
    model = SAC(
        "MultiInputPolicy",
        env,
        buffer_size=1_000_000,
        ent_coef="auto",
        batch_size=256,
        gamma=0.95,
        learning_rate=1e-3,
        learning_starts=1000,
        replay_buffer_class=HerReplayBuffer,
        replay_buffer_kwargs={"goal_selection_strategy": "future", "n_sampled_goal": 4},
        policy_kwargs={"net_arch": [64, 64]},
        seed=seed,
        device="cpu",
    )
    started = time.monotonic()
    model.learn(steps)
    train_s = time.monotonic() - started
    if normalize:
        env.training = False  # greedy episodes read the statistics, no longer update them
    successes = []
    obs = env.reset()
    while len(successes) < EPISODES:
        action, _ = model.predict(obs, deterministic=True)
        obs, _, dones, infos = env.step(action)
        if dones[0]:
            successes.append(bool(infos[0]["is_success"]))
    return {"success_rate": sum(successes) / EPISODES, "train_s": round(train_s, 1)}


def rlplat_side(
    experiment: str, budget: int, out: Path, overrides: tuple[str, ...]
) -> dict[str, Any]:
    """3 seeds of ``experiment`` one at a time, each scored by its greedy success rate."""
    _, cell = scored_seeds(
        experiment,
        SEEDS,
        budget,
        out,
        EPISODES,
        *overrides,
        report_options=("--metric", "success_rate"),
    )
    return cell


def sb3_side(out: Path, flags: list[str], command: str) -> dict[str, Any]:
    """3 seeds of an SB3 process (``--sb3`` or ``--sb3-fetch``), one at a time."""
    seeds = [
        peer_row(out / f"seed_{seed}.json", [sys.executable, __file__, *flags, str(seed)])
        for seed in range(SEEDS)
    ]
    return {
        "final_scores": [row["success_rate"] for row in seeds],
        "seeds": seeds,
        "command": command,
    }


def bit_flip_sides(bits: int, out: Path) -> dict[str, Callable[[], dict[str, Any]]]:
    """The bit flipping cell: rlplat's DQN with and without relabelling, SB3's DQN + HER."""
    sides: dict[str, Callable[[], dict[str, Any]]] = {
        side: functools.partial(
            rlplat_side,
            EXPERIMENT,
            BUDGET,
            out / side,
            (f"env.kwargs.bits={bits}", "stop.success_rate=null", *extra),
        )
        for side, extra in SIDES.items()
    }
    sides["sb3_her"] = functools.partial(
        sb3_side,
        out / "sb3_her",
        ["--sb3", str(bits)],
        f"python benchmarks/hindsight.py --sb3 {bits} <seed>",
    )
    return sides


def fetch_reach_sides(out: Path) -> dict[str, Callable[[], dict[str, Any]]]:
    """The FetchReach cell at ``FETCH_BUDGET`` env steps: rlplat's CrossQ and SAC with
    relabelling (RL Zoo's SAC settings on both), SB3's SAC + HER with RL Zoo's settings and
    ``VecNormalize``."""
    sides: dict[str, Callable[[], dict[str, Any]]] = {
        side: functools.partial(rlplat_side, experiment, FETCH_BUDGET, out / side, ())
        for side, experiment in FETCH_SIDES.items()
    }
    sides["sb3_sac_her"] = functools.partial(
        sb3_side,
        out / "sb3_sac_her",
        ["--sb3-fetch", "1", str(FETCH_BUDGET)],
        f"python benchmarks/hindsight.py --sb3-fetch 1 {FETCH_BUDGET} <seed>",
    )
    return sides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bits", nargs="+", type=int, default=[15])
    parser.add_argument(
        "--sides",
        nargs="+",
        choices=[*SIDES, "sb3_her", *FETCH_SIDES, "sb3_sac_her"],
        help="which sides of each cell to run (default: all of the cell's)",
    )
    parser.add_argument("--task", choices=["bit_flip", "fetch_reach"], default="bit_flip")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "rlplat-her")
    parser.add_argument(
        "--sb3", nargs=2, type=int, metavar=("BITS", "SEED"), help=argparse.SUPPRESS
    )
    parser.add_argument("--sb3-fetch", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sb3_fetch:
        normalize, steps, seed = args.sb3_fetch
        print(json.dumps(sb3_fetch_reach(normalize, seed, steps)))
        return
    if args.sb3:
        print(json.dumps(sb3_bit_flip(*args.sb3)))
        return
    if args.task == "fetch_reach":
        cells = {"fetch_reach": fetch_reach_sides(args.out / "fetch_reach")}
    else:
        cells = {
            f"bits_{bits}": bit_flip_sides(bits, args.out / f"bits_{bits}") for bits in args.bits
        }
    results = load_results(RESULTS)
    for name, sides in cells.items():
        cell = results.setdefault(name, {})
        for side, measure in sides.items():
            if args.sides and side not in args.sides:
                continue
            cell[side] = {**measure(), **provenance()}
            save_results(RESULTS, results)
            print(f"{name} {side}: {cell[side]['final_scores']}", flush=True)


if __name__ == "__main__":
    main()
