"""One PPO learner update of experiments/mujoco/halfcheetah_ppo.yaml (512 env steps, 20 epochs of
64: 160 minibatches) against Stable-Baselines3's ``train()`` with the same settings.

    pip install -e ".[mujoco,bench]"
    python benchmarks/ppo_update.py [--pairs 2] [--updates 3]

Each side runs in its own process, one at a time, alternating which goes first; torch on one
thread. rlplat: the learner group a trial builds (``config.build_learner_group``), updated
``--updates`` times on one batch its env runner sampled (after one untimed update). SB3: ``PPO``
with RL Zoo's HalfCheetah settings as the shipped file writes them, ``learn()`` for 2,048 env
steps, then ``train()`` timed ``--updates`` times on its last rollout. Prints milliseconds per
update and per minibatch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXPERIMENT = REPO / "experiments/mujoco/halfcheetah_ppo.yaml"
MINIBATCHES = 20 * (512 // 64)


def rlplat_update_ms(updates: int) -> float:
    import torch

    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare

    torch.set_num_threads(1)
    config = prepare(load_experiment(EXPERIMENT, []), step_env=False).algo_config
    runner = config.env_runner_cls(config=config, worker_index=0)
    group = config.build_learner_group(env=runner.env, spaces=runner.get_spaces())
    size = config.train_batch_size_per_learner
    episodes = runner.sample(num_timesteps=size)
    arguments = dict(
        timesteps={"num_env_steps_sampled_lifetime": size},
        num_epochs=config.num_epochs,
        minibatch_size=config.minibatch_size,
        shuffle_batch_per_epoch=True,
    )
    group.update(episodes=episodes, **arguments)
    started = time.perf_counter()
    for _ in range(updates):
        group.update(episodes=episodes, **arguments)
    return 1000 * (time.perf_counter() - started) / updates


def sb3_update_ms(updates: int) -> float:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    env = VecNormalize(make_vec_env("HalfCheetah-v5", n_envs=1, seed=0), gamma=0.98)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=512,
        batch_size=64,
        n_epochs=20,
        gamma=0.98,
        gae_lambda=0.92,
        learning_rate=2.0633e-05,
        clip_range=0.1,
        ent_coef=0.000401762,
        vf_coef=0.58096,
        max_grad_norm=0.8,
        policy_kwargs={
            "log_std_init": -2,
            "ortho_init": False,
            "activation_fn": torch.nn.ReLU,
            "net_arch": {"pi": [256, 256], "vf": [256, 256]},
        },
        seed=0,
        device="cpu",
    )
    model.learn(2048)
    started = time.perf_counter()
    for _ in range(updates):
        model.train()
    return 1000 * (time.perf_counter() - started) / updates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--side", choices=["rlplat", "sb3"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        measure = rlplat_update_ms if args.side == "rlplat" else sb3_update_ms
        print(json.dumps({"ms": measure(args.updates)}))
        return
    times: dict[str, list[float]] = {"rlplat": [], "sb3": []}
    for pair in range(args.pairs):
        for side in ("rlplat", "sb3") if pair % 2 == 0 else ("sb3", "rlplat"):
            command = [sys.executable, __file__, "--side", side, "--updates", str(args.updates)]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            ms = json.loads(out.strip().splitlines()[-1])["ms"]
            times[side].append(ms)
            print(f"pair {pair + 1} {side}: {ms:.0f} ms per update", flush=True)
    rlplat, sb3 = statistics.median(times["rlplat"]), statistics.median(times["sb3"])
    print(
        f"medians: rlplat {rlplat:.0f} ms ({rlplat / MINIBATCHES:.2f} per minibatch), "
        f"SB3 {sb3:.0f} ms ({sb3 / MINIBATCHES:.2f}): {rlplat / sb3:.2f}x"
    )


if __name__ == "__main__":
    main()
