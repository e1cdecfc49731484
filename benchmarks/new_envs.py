"""Envs from packages no test here uses, each as a new user's minimal file: the check three times,
a short training, and the greedy return beside a random policy's.

    pip install gymnasium-robotics panda-gym tetris-gymnasium gym-simplegrid
    pip install --no-deps flappy-bird-gymnasium   # it asks for pygame beside rlplat's pygame-ce
    python benchmarks/new_envs.py [--only leduc fetch_reach ...] [--skip-training]

Per env: ``rlplat train <file> --dry-run`` three times (the verdict and its first line each
time: the same every time is the point), then ``rlplat train <file>`` with the case's short
budget, then ``rlplat eval <run> -n 10 --json`` (greedy) beside the same env played by uniformly
random actions for 10 episodes seeded 0..9 (multi-agent: ``--random`` for the trained policy's
opponent side, so the number is the trained side against random play, beside random against
random). Results: benchmarks/results/new_envs.json; the Markdown table printed at the end is
docs/environments.md's. One process at a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import eval_report, load_results, machine, results_file, rlplat, save_results, train

RESULTS = results_file("new_envs.json")
EPISODES = 10


@dataclass(frozen=True)
class Case:
    """One env: its package, the minimal file's lines after ``name`` and what training adds."""

    package: str
    algorithm: str
    env: str  # the env: section, as YAML
    budget: int  # env steps of the short training
    extra: str = ""  # other sections a user would need to write (said in the table)
    random_side: list[str] = field(default_factory=list)  # multi-agent: policies played randomly

    def text(self, name: str) -> str:
        return (
            f"name: {name}\nalgorithm: {self.algorithm}\nenv: {self.env}\n"
            f"stop: {{env_steps: {self.budget}}}\n{self.extra}"
        )


HOLDEM_SIDES = (
    "multi_agent:\n  policies: {player_0: learner, player_1: opponent}\n  random: [opponent]\n"
    "checkpoint: {score: policy_return_mean/learner}\n"
)
CASES: dict[str, Case] = {
    "flappy_bird": Case(
        "flappy-bird-gymnasium",
        "PPO",
        "{id: 'flappy_bird_gymnasium:FlappyBird-v0', check: {bounds: warn}}",
        100_000,
    ),
    "fetch_reach": Case(
        "gymnasium-robotics", "SAC", "{id: 'gymnasium_robotics:FetchReach-v4'}", 5_000
    ),
    "fetch_reach_dense": Case(
        "gymnasium-robotics", "SAC", "{id: 'gymnasium_robotics:FetchReachDense-v4'}", 5_000
    ),
    "point_maze": Case(
        "gymnasium-robotics", "SAC", "{id: 'gymnasium_robotics:PointMaze_UMazeDense-v3'}", 5_000
    ),
    "panda_reach_dense": Case("panda-gym", "SAC", "{id: 'panda_gym:PandaReachDense-v3'}", 5_000),
    "leduc": Case(
        "pettingzoo[classic]",
        "PPO",
        "{pettingzoo: pettingzoo.classic.leduc_holdem_v4}",
        50_000,
        HOLDEM_SIDES,
        ["opponent"],
    ),
    "texas_holdem": Case(
        "pettingzoo[classic]",
        "PPO",
        "{pettingzoo: pettingzoo.classic.texas_holdem_v4}",
        50_000,
        HOLDEM_SIDES,
        ["opponent"],
    ),
    "panda_reach": Case("panda-gym", "SAC", "{id: 'panda_gym:PandaReach-v3'}", 5_000),
    "rock_paper_scissors": Case(
        "pettingzoo[classic]",
        "PPO",
        "{pettingzoo: pettingzoo.classic.rps_v2}",
        20_000,
        HOLDEM_SIDES,
        ["opponent"],
    ),
    "tictactoe": Case(
        "pettingzoo[classic]",
        "PPO",
        "{pettingzoo: pettingzoo.classic.tictactoe_v3}",
        50_000,
        HOLDEM_SIDES.replace("player_0: learner, player_1", "player_1: learner, player_2"),
        ["opponent"],
    ),
    "texas_holdem_no_limit": Case(
        "pettingzoo[classic]",
        "PPO",
        "{pettingzoo: pettingzoo.classic.texas_holdem_no_limit_v6}",
        50_000,
        HOLDEM_SIDES,
        ["opponent"],
    ),
    "go_9x9": Case(
        "pettingzoo[classic]",
        "PPO",
        "{pettingzoo: pettingzoo.classic.go_v5, kwargs: {board_size: 9}}",
        10_000,
        HOLDEM_SIDES.replace("player_0: learner, player_1", "black_0: learner, white_0"),
        ["opponent"],
    ),
    "chess": Case(
        "pettingzoo[classic]",
        "PPO",
        "{pettingzoo: pettingzoo.classic.chess_v6}",
        10_000,
        HOLDEM_SIDES,
        ["opponent"],
    ),
    "hanabi": Case(  # cooperative: one policy plays both seats
        "pettingzoo[classic]",
        "PPO",
        "{pettingzoo: pettingzoo.classic.hanabi_v5}",
        20_000,
        "multi_agent:\n  policies: {'player_*': learner}\n",
    ),
    "tetris": Case(
        "tetris-gymnasium",
        "PPO",
        "{id: 'tetris_gymnasium.envs:tetris_gymnasium/Tetris'}",
        50_000,
    ),
    "simplegrid": Case("gym-simplegrid", "PPO", "{id: 'gym_simplegrid:SimpleGrid-8x8-v0'}", 50_000),
}


def verdicts(path: Path) -> list[str]:
    """The check's verdict, three times: 'valid' or the refusal's first 300 characters."""
    said = []
    for _ in range(3):
        process = rlplat("train", str(path), "--dry-run", check=False)
        text = process.stdout + process.stderr
        said.append("valid" if process.ok and "is valid" in text else text.strip()[-300:])
    return said


def random_return(env_id: str, episodes: int) -> float:
    """Uniformly random actions (a single-agent Gymnasium env), episodes seeded 0.."""
    import gymnasium as gym

    from rlplat.util.imports import import_object

    module, _, name = env_id.rpartition(":")
    if module:
        import_object(f"{module}:__name__")
    env = gym.make(name if module else env_id)
    env.action_space.seed(0)
    returns = []
    for episode in range(episodes):
        env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return statistics.mean(returns)


def run_case(name: str, case: Case, scratch: Path, train_it: bool) -> dict[str, Any]:
    path = scratch / f"{name}.yaml"
    path.write_text(case.text(name))
    row: dict[str, Any] = {
        "package": case.package,
        "file": case.text(name),
        "verdicts": verdicts(path),
    }
    if not train_it or row["verdicts"][0] != "valid":
        return row
    training = train(path, out=scratch / f"out-{name}", check=False)
    row["command_wall_s"] = training.wall_s
    if training.error:
        row["error"] = training.error
        return row
    last = training.results()[-1]
    row["env_steps"] = int(last["num_env_steps_sampled_lifetime"])
    row["train_s"] = round(last["time_total_s"], 1)
    flags = [w for policy in case.random_side for w in ("--random", policy)]
    greedy = eval_report(training.run_dir, EPISODES, *flags)
    row["greedy_return"] = round(greedy["returns"]["mean"], 2)
    if case.random_side:  # the trained side against random play, beside random against random
        row["policy_returns"] = {
            p: s["mean"] for p, s in (greedy.get("policy_returns") or {}).items()
        }
        both_random = eval_report(training.run_dir, EPISODES, "--random", "learner", *flags)
        row["random_policy_returns"] = {
            p: s["mean"] for p, s in (both_random.get("policy_returns") or {}).items()
        }
    elif "pettingzoo:" in case.env:  # one policy plays every seat: beside all seats random
        everyone_random = eval_report(training.run_dir, EPISODES, "--random", "learner")
        row["random_return"] = round(everyone_random["returns"]["mean"], 2)
    else:
        env_id = case.env.split("id: '", 1)[1].split("'", 1)[0]
        row["random_return"] = round(random_return(env_id, EPISODES), 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=sorted(CASES))
    parser.add_argument("--skip-training", action="store_true", help="the three checks only")
    args = parser.parse_args()
    results = load_results(RESULTS)
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.only or CASES:
            row = run_case(name, CASES[name], Path(scratch), not args.skip_training)
            print(name, json.dumps(row), flush=True)
            latest = load_results(RESULTS)
            latest[name] = row
            latest["machine"] = machine()
            save_results(RESULTS, latest)
            results = latest
    print(table(results))


def table(results: dict[str, Any]) -> str:
    lines = [
        "| env (package) | algorithm | --dry-run x3 | trained (env steps, s) | greedy / random |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, row in results.items():
        if name == "machine":
            continue
        case = CASES[name]
        same = "same" if len(set(row["verdicts"])) == 1 else "DIFFER"
        verdict = f"{row['verdicts'][0][:80]} ({same})"
        trained = (
            f"{row['env_steps']:,}, {row['train_s']}"
            if "env_steps" in row
            else row.get("error", "-")[:80]
        )
        if "random_return" in row:
            scores = f"{row['greedy_return']} / {row['random_return']}"
        elif "policy_returns" in row:
            learner = row["policy_returns"].get("learner")
            random_learner = row["random_policy_returns"].get("learner")
            scores = (
                f"learner {learner:.2f} / {random_learner:.2f} vs random"
                if learner is not None
                else "-"
            )
        else:
            scores = "-"
        env = case.env.strip("{}").split(",")[0]
        lines.append(
            f"| `{env}` ({case.package}) | {case.algorithm} | {verdict} | {trained} | {scores} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
