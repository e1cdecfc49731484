"""``rlplat report``'s options (light: read when the CLI starts, without scipy or matplotlib)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlplat.util.options import option


@dataclass
class ReportOptions:
    """What a report compares and how it scores seeds; each field is an option of
    ``rlplat report``."""

    out: Path | None = option(
        None, help="Output directory (default reports/<names>-<time>; never overwritten)."
    )
    metric: str | None = option(  # default: the runs' own tune.metric (episode_return_mean)
        None,
        help="What to report: episode_return_mean (team return), policy_return_mean/<p>, "
        "agent_return_mean/<a>, or any logged result (default: the runs' tune.metric).",
    )
    x: str = option("env_steps", help="Curves against env_steps or time_s.")
    eval_episodes: int = option(20, help="Greedy episodes that score each seed's checkpoint.")
    eval_seed: int = option(0, help="Seed of the first scoring episode.")
    checkpoint: str = option("last", help="last, or best (by the run's own checkpoint.score).")
    score: str = option(
        "eval", help="eval (greedy episodes) or training (the run's last windowed value)."
    )
    target: float | None = option(  # default: stop.episode_return_mean, when the runs share it
        None, help="Score for the optimality gap and time to target (default: stop's)."
    )
    bootstrap_seed: int = option(0, help="Seed of the bootstrap resampling.")
    title: str | None = option(None, help="Title above each figure (default: none).")
    x_label: str | None = option(
        None, help="The curves' x axis label (default: Environment steps or Training time (s))."
    )
    y_label: str | None = option(
        None, help="The metric's name in figures (default: e.g. Episode return)."
    )
    label: list[str] = option(
        help="Rename an experiment in figures and tables: 'LABEL=NAME' (repeatable).",
        factory=list,
    )
    size: str = option("7x4", help="Size of the curve figures in inches: WIDTHxHEIGHT.")
    font_size: float = option(10.0, help="Font size of the figures in points.")
    marl_eval: bool = option(False, help="Also write marl_eval.json (marl-eval's layout).")
