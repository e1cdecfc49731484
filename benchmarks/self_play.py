"""Self-play: a league's learner against random moves and against a policy trained only against
random moves, head to head, and its Elo rating over training.

    pip install -e ".[multiagent]"
    python benchmarks/self_play.py [--from-scratch] [--random-share P] [--keep-first true|false]
                                   [--even-share U] [--env-steps N] [--seed S] [--matches 200]
                                   [--out DIR]

For each game (connect four): ``rlplat train experiments/<game>_selfplay.yaml`` with the options'
overrides, into ``<out>/<name>`` and reused when there. As shipped the file trains its first
stage, ``experiments/<game>_ppo.yaml`` (the baseline: a policy trained against uniformly random
legal moves only), and starts self-play from it; ``--from-scratch`` drops that stage and trains
the baseline as a run of its own. Then the self-play run's last checkpoint plays ``rlplat eval
<run> --last --against OPPONENT -n MATCHES --explore --json`` against ``random`` and against the
baseline: seats swapped every other game, moves sampled on both sides (greedy play would replay
one game per seat), won/drawn/lost with a 95 % Wilson interval on the share won; against
``random`` also with the learner's greedy moves (without ``--explore``), where the random player
varies the games. The Elo of the learner and of each snapshot against env steps, from the
trial's result.json, goes to ``docs/img/<name>_elo.png``. Results go to
benchmarks/results/self_play.json (rows before 2026-11-28 came from the one-stage file and its
``--from-baseline`` option).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import (
    REPO,
    eval_report,
    invocation,
    load_results,
    machine,
    results_file,
    save_results,
    train,
    trial_results,
)

RESULTS = results_file("self_play.json")
GAMES = ("connect_four",)  # the games with a baseline file

def elo_figure(results: list[dict[str, Any]], title: str, path: Path) -> None:
    """The learner's Elo and every snapshot's (from its freezing on) against env steps."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    steps = [int(r["num_env_steps_sampled_lifetime"]) for r in results]
    figure, axes = plt.subplots(figsize=(8, 4.5), layout="constrained")
    snapshots: dict[str, tuple[list[int], list[float]]] = {}
    for step, result in zip(steps, results, strict=True):
        for name, rating in result["self_play"]["snapshot_elo"].items():
            xs, ys = snapshots.setdefault(name, ([], []))
            xs.append(step)
            ys.append(rating)
    for xs, ys in snapshots.values():
        axes.plot(xs, ys, color="0.75", linewidth=0.8)
    axes.plot([], [], color="0.75", linewidth=0.8, label="snapshots in the pool")
    learner = [r["self_play"]["learner_elo"] for r in results]
    axes.plot(steps, learner, color="tab:blue", linewidth=2, label="learner")
    axes.set(xlabel="env steps", ylabel="Elo (1000 at the start)", title=title)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def head_to_head(
    run_dir: Path, opponent: str, matches: int, explore: bool = True
) -> dict[str, Any]:
    """``rlplat eval <run> --last --against <opponent> -n <matches> [--explore] --json``."""
    sampled = ("--explore",) if explore else ()
    report = eval_report(run_dir, matches, "--last", "--against", opponent, *sampled)
    return report["head_to_head"]


@dataclass(frozen=True)
class Variant:
    """How a self-play run differs from the shipped file, as benchmark options."""

    from_scratch: bool = False
    random_share: float | None = None
    keep_first: bool | None = None
    even_share: float | None = None
    env_steps: int | None = None
    seed: int = 0

    def overrides(self) -> tuple[str, ...]:
        pool = "multi_agent.self_play.pool"
        start: tuple[str, ...] = ("init.experiment=null",) if self.from_scratch else ()
        if self.random_share is not None:
            start = (*start, f"{pool}.random={self.random_share}")
        if self.keep_first is not None:
            start = (*start, f"{pool}.keep_first={str(self.keep_first).lower()}")
        if self.even_share is not None:
            start = (*start, f"{pool}.even={self.even_share}")
        if self.env_steps:
            start = (*start, f"stop.env_steps={self.env_steps}")
        if self.seed:
            start = (*start, "--seed", str(self.seed))
        return start

    @property
    def suffix(self) -> str:
        """Names a run's folder, figure and results row."""
        return (
            ("_from_scratch" if self.from_scratch else "_two_stage")
            + (f"_random{self.random_share:g}" if self.random_share is not None else "")
            + (f"_keep_first_{str(self.keep_first).lower()}" if self.keep_first is not None else "")
            + (f"_even{self.even_share:g}" if self.even_share is not None else "")
            + (f"_{self.env_steps // 1000}k" if self.env_steps else "")
            + (f"_seed{self.seed}" if self.seed else "")
        )

    def title(self, game: str) -> str:
        parts = ["from scratch" if self.from_scratch else "as shipped: after its first stage"]
        if self.random_share is not None:
            parts.append(f"{self.random_share:.0%} of iterations against random moves")
        if self.keep_first is not None:
            parts.append(f"keep_first {str(self.keep_first).lower()}")
        if self.even_share is not None:
            parts.append(f"{self.even_share:.0%} of snapshot draws even")
        if self.env_steps:
            parts.append(f"{self.env_steps:,} env steps")
        if self.seed:
            parts.append(f"seed {self.seed}")
        how = textwrap.fill(f"({', '.join(parts)})", 80)
        return f"{game}_selfplay.yaml: Elo over training\n{how}"


def game_row(game: str, matches: int, out: Path, variant: Variant) -> dict[str, Any]:
    selfplay_file = f"experiments/{game}_selfplay.yaml"
    start = variant.overrides()
    name = f"{game}_selfplay" + variant.suffix
    selfplay = train(selfplay_file, *start, out=out / name, reuse=True)
    # the policy trained against random moves: the file's first stage, else a run of its own
    baseline_dir = selfplay.first_stage or train(
        REPO / f"experiments/{game}_ppo.yaml", out=out / f"{game}_ppo", reuse=True
    ).run_dir
    results = trial_results(min(selfplay.run_dir.glob("trial_*/result.json")).parent)
    last = results[-1]
    row: dict[str, Any] = {
        "command": " ".join(["rlplat train", selfplay_file, *start]),
        "run_dir": str(selfplay.run_dir),
        "env_steps": int(last["num_env_steps_sampled_lifetime"]),
        "training_s": round(last["time_total_s"], 1),
        "learner_elo": round(last["self_play"]["learner_elo"], 1),
        "pool": last["self_play"]["snapshot_elo"],
        "against": {
            "random": head_to_head(selfplay.run_dir, "random", matches),
            # the learner's greedy moves: the random player alone varies the games
            "random_greedy": head_to_head(selfplay.run_dir, "random", matches, explore=False),
        },
    }
    row["baseline"] = {"command": f"rlplat train experiments/{game}_ppo.yaml",
                       "run_dir": str(baseline_dir)}
    row["against"][f"{game}_ppo"] = head_to_head(selfplay.run_dir, str(baseline_dir), matches)
    figure = REPO / f"docs/img/{name}_elo.png"
    elo_figure(results, variant.title(game), figure)
    row["figure"] = str(figure.relative_to(REPO))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", choices=GAMES, default=["connect_four"])
    parser.add_argument("--from-scratch", action="store_true",
                        help="no first stage: init.experiment=null")
    parser.add_argument("--random-share", type=float,
                        help="multi_agent.self_play.pool.random (default: the file's)")
    parser.add_argument("--env-steps", type=int,
                        help="the self-play run's stop.env_steps (default: the file's)")
    parser.add_argument("--keep-first", choices=("true", "false"),
                        help="multi_agent.self_play.pool.keep_first (default: the file's)")
    parser.add_argument("--even-share", type=float,
                        help="multi_agent.self_play.pool.even (default: the file's)")
    parser.add_argument("--seed", type=int, default=0, help="the self-play run's seed")
    parser.add_argument("--matches", type=int, default=200, help="games per head-to-head")
    parser.add_argument("--out", type=Path, help="runs go here (default: a temp folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="self_play_"))
    keep_first = None if args.keep_first is None else args.keep_first == "true"
    variant = Variant(args.from_scratch, args.random_share, keep_first, args.even_share,
                      args.env_steps, args.seed)
    for game in args.games:
        key = game + variant.suffix
        row = game_row(game, args.matches, out, variant)
        rows = load_results(RESULTS).get("rows", {})  # read late: other runs may have saved
        rows[key] = row
        save_results(RESULTS, {"command": invocation(), "machine": machine(),
                               "date": time.strftime("%Y-%m-%d %H:%M"), "rows": rows})
        summary = {name: h.get("summary") for name, h in rows[key]["against"].items()}
        print(key, json.dumps(summary, indent=1), flush=True)


if __name__ == "__main__":
    main()
