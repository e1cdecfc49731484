"""Issue 103's hindsight table: DQN on bit flipping (envs/bit_flip.py, the HER paper's task)
with and without hindsight relabelling, beside Stable-Baselines3's DQN with its
``HerReplayBuffer``, 3 seeds each at equal env steps.

    pip install -e ".[bench]"
    python benchmarks/hindsight.py [--bits 15] [--sides her plain sb3_her] [--out DIR]

rlplat: ``rlplat train experiments/bit_flip_her.yaml --seeds 3 tune.max_concurrent=1
stop.env_steps=100000 stop.success_rate=null env.kwargs.bits=<n>`` (``replay={}`` for the
side without relabelling), then ``rlplat report <run> --metric success_rate --eval-episodes
50``: each seed's greedy success rate over 50 episodes (seeds 0-49) of its last checkpoint.
SB3 (one process per seed, ``--sb3 BITS SEED``): DQN with the file's settings where SB3 has them
(4 envs, [256, 256], lr 1e-3, gamma 0.98, batch 128 every 16 env steps, a target update every
500 env steps, epsilon from 1 to 0.05 over 20k env steps, learning from 1,000, ``future`` goals,
4 per transition; SB3's DQN is not double-Q), then 50 greedy episodes on the same seeds. The
env is rlplat's ``BitFlip`` on both sides. Results go to benchmarks/results/hindsight.json.
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
    REPO,
    load_results,
    peer_row,
    provenance,
    report_row,
    results_file,
    save_results,
    train_command,
    train_seeds,
)

RESULTS = results_file("hindsight.json")
EXPERIMENT = "experiments/bit_flip_her.yaml"
BUDGET = 100_000
SEEDS = 3
EPISODES = 50
SIDES = {"her": (), "plain": ("replay={}",)}


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
    ``EPISODES`` episodes. The evidence for docs/hindsight.md's FetchReach paragraph:
    ``python benchmarks/hindsight.py --sb3-fetch 1 0 8000`` (needs gymnasium-robotics)."""
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bits", nargs="+", type=int, default=[15])
    parser.add_argument(
        "--sides", nargs="+", choices=[*SIDES, "sb3_her"], default=[*SIDES, "sb3_her"]
    )
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "rlplat-her")
    parser.add_argument(
        "--sb3", nargs=2, type=int, metavar=("BITS", "SEED"), help=argparse.SUPPRESS
    )
    parser.add_argument("--sb3-fetch", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sb3_fetch:
        print(json.dumps(sb3_fetch_reach(*args.sb3_fetch)))
        return
    if args.sb3:
        print(json.dumps(sb3_bit_flip(*args.sb3)))
        return
    results = load_results(RESULTS)
    for bits in args.bits:
        cell = results.setdefault(f"bits_{bits}", {})
        for side in args.sides:
            out = args.out / f"bits_{bits}" / side
            if side == "sb3_her":
                seeds = [
                    peer_row(
                        out / f"seed_{seed}.json",
                        [sys.executable, __file__, "--sb3", str(bits), str(seed)],
                    )
                    for seed in range(SEEDS)
                ]
                cell[side] = {
                    "final_scores": [row["success_rate"] for row in seeds],
                    "seeds": seeds,
                    "command": f"python benchmarks/hindsight.py --sb3 {bits} <seed>",
                }
            else:
                overrides = (f"env.kwargs.bits={bits}", "stop.success_rate=null", *SIDES[side])
                run_dir, seeds = train_seeds(EXPERIMENT, SEEDS, BUDGET, out / "train", *overrides)
                row = report_row(
                    [str(run_dir)], out / "report", EPISODES, "--metric", "success_rate"
                )
                cell[side] = {
                    **row,
                    "train_command": train_command(EXPERIMENT, SEEDS, BUDGET, *overrides),
                    "seeds": seeds,
                }
            cell[side].update(provenance())
            save_results(RESULTS, results)
            print(f"bits {bits} {side}: {cell[side]['final_scores']}", flush=True)


if __name__ == "__main__":
    main()
