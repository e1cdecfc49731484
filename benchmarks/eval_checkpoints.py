"""``rlplat eval`` on a trained checkpoint of each shipped experiment, side by side in one run.

    python benchmarks/eval_checkpoints.py [--only cartpole_ppo ...] [--episodes 100]

For each experiment: train it once (``rlplat train``, seed 0), then on its best checkpoint
1. time from launching ``rlplat eval <ckpt> -n 1`` to its first episode line (median of 3), and,
   for comparison, the same for a plain-RLlib restore (``Algorithm.from_checkpoint``, which starts
   Ray and rebuilds env runners and learners) followed by one greedy episode;
2. the mean return over ``--episodes`` episodes with sampled actions (as training acts) and greedy,
   next to plain RLlib's own greedy ``Algorithm.evaluate()`` of the same checkpoint over as many
   episodes, and the (windowed and last-iteration) mean return the run reported.
Writes benchmarks/results/eval_checkpoints.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import (
    REPO,
    RLPLAT,
    eval_report,
    load_results,
    read_json,
    results_file,
    run,
    save_results,
    shown,
    train,
)

RESULTS = results_file("eval_checkpoints.json")
EXPERIMENTS = ("cartpole_ppo", "cartpole_dqn", "pendulum_sac")
FIRST_EPISODE = "  episode   1 "

# Plain RLlib: restore the whole Algorithm, then play one greedy episode with its module.
ALGORITHM_RESTORE = """
import sys, time
import numpy as np, torch
from ray import tune
from ray.rllib.algorithms.algorithm import Algorithm
from ray.rllib.core.columns import Columns
from rlplat.experiment.load import load_experiment
from rlplat.rllib.env_creator import env_creator_for, rllib_env_name

checkpoint = sys.argv[1]
experiment = load_experiment(checkpoint + "/experiment.yaml").experiment
tune.register_env(rllib_env_name(experiment), env_creator_for(experiment))
algo = Algorithm.from_checkpoint(checkpoint)
module = algo.get_module()
env = env_creator_for(experiment)()
obs, _ = env.reset(seed=0)
done, total, length = False, 0.0, 0
while not done:
    with torch.no_grad():
        out = module.forward_inference({Columns.OBS: torch.as_tensor(obs[None])})
    logits = out[Columns.ACTION_DIST_INPUTS][0]
    obs, reward, terminated, truncated, _ = env.step(int(torch.argmax(logits)))
    total, length, done = total + reward, length + 1, terminated or truncated
print(f"{FIRST_EPISODE}return {total:.2f}, length {length}", flush=True)
algo.stop()
""".replace("{FIRST_EPISODE}", FIRST_EPISODE)


# Plain RLlib's own greedy evaluation of the same checkpoint: build the algorithm with an
# evaluation setting of N episodes on the local env runner, restore the checkpoint, evaluate().
ALGORITHM_EVALUATE = """
import json, sys
from ray import tune
from ray.rllib.algorithms.algorithm import Algorithm
from rlplat.experiment.load import load_experiment
from rlplat.rllib.env_creator import env_creator_for, rllib_env_name

checkpoint, episodes = sys.argv[1], int(sys.argv[2])
experiment = load_experiment(checkpoint + "/experiment.yaml").experiment
tune.register_env(rllib_env_name(experiment), env_creator_for(experiment))
restored = Algorithm.from_checkpoint(checkpoint)
config = restored.config.copy(copy_frozen=False)
restored.stop()
config.evaluation(
    evaluation_duration=episodes,
    evaluation_duration_unit="episodes",
    evaluation_num_env_runners=0,
    evaluation_config={"explore": False},
)
algo = config.build_algo()
algo.restore_from_path(checkpoint)
runners = algo.evaluate()["env_runners"]
mean, count = float(runners["episode_return_mean"]), int(runners["num_episodes"])
print(json.dumps({"mean": mean, "episodes": count}))
algo.stop()
"""


def rllib_evaluate(checkpoint: str, episodes: int) -> dict:
    done = run([sys.executable, "-c", ALGORITHM_EVALUATE, checkpoint, str(episodes)], check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def seconds_to_first_episode(command: list[str]) -> float:
    """Wall time from launching ``command`` until it prints its first episode's result."""
    started = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    elapsed = None
    for line in proc.stdout:
        if line.startswith(FIRST_EPISODE) and elapsed is None:
            elapsed = time.monotonic() - started
    proc.wait()
    if elapsed is None or proc.returncode != 0:
        raise RuntimeError(f"{shown(command)} failed (exit {proc.returncode})")
    return elapsed


def evaluate(checkpoint: str, episodes: int, explore: bool) -> dict:
    returns = eval_report(checkpoint, episodes, *(["--explore"] if explore else []))["returns"]
    returns["sem"] = returns["std"] / episodes**0.5
    return returns


def measure(name: str, episodes: int, out: Path) -> dict:
    training = train(REPO / "experiments" / f"{name}.yaml", "seed=0", out=out)
    checkpoint = training.summary()["trials"][0]["best_checkpoint"]
    info = read_json(Path(checkpoint, "rlplat_checkpoint.json"))
    eval_command = [*RLPLAT, "eval", checkpoint, "-n", "1"]
    row = {
        "experiment": name,
        "checkpoint_iteration": info["iteration"],
        "checkpoint_env_steps": info["env_steps"],
        "reported_return_mean": info["episode_return_mean"],
        "reported_iteration_return_mean": info["iteration_episode_return_mean"],
        "episodes": episodes,
        "eval_sampled": evaluate(checkpoint, episodes, explore=True),
        "eval_greedy": evaluate(checkpoint, episodes, explore=False),
        "rllib_evaluate_greedy": rllib_evaluate(checkpoint, episodes),
        "rlplat_eval_first_episode_s": statistics.median(
            seconds_to_first_episode(eval_command) for _ in range(3)
        ),
    }
    if name == "cartpole_ppo":
        restore = [sys.executable, "-c", ALGORITHM_RESTORE, checkpoint]
        row["algorithm_restore_first_episode_s"] = statistics.median(
            seconds_to_first_episode(restore) for _ in range(3)
        )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS))
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args()
    results = load_results(RESULTS)
    for name in args.only:
        with tempfile.TemporaryDirectory() as tmp:
            results[name] = measure(name, args.episodes, Path(tmp))
        print(json.dumps(results[name]), flush=True)
    save_results(RESULTS, results)
    print(
        "| experiment | checkpoint (iteration, env steps) | reported return (window; last "
        "iteration) | rlplat eval, sampled | rlplat eval, greedy | RLlib evaluate(), greedy "
        "| first episode: rlplat eval | first episode: Algorithm restore |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in results.values():
        sampled, greedy = row["eval_sampled"], row["eval_greedy"]
        restore = row.get("algorithm_restore_first_episode_s")
        print(
            f"| {row['experiment']} | {row['checkpoint_iteration']}, "
            f"{row['checkpoint_env_steps']:,} | {row['reported_return_mean']:.1f}; "
            f"{row['reported_iteration_return_mean']:.1f} "
            f"| {sampled['mean']:.1f} ± {sampled['sem']:.1f} "
            f"| {greedy['mean']:.1f} ± {greedy['sem']:.1f} "
            f"| {row['rllib_evaluate_greedy']['mean']:.1f} "
            f"| {row['rlplat_eval_first_episode_s']:.2f} s "
            f"| {f'{restore:.2f} s' if restore else '-'} |"
        )


if __name__ == "__main__":
    main()
