"""The report's figures with matplotlib's object API on the Agg canvas (no display, no pyplot
state): learning curves with bootstrap bands, and aggregate estimates with their intervals."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

COLOURS = [  # matplotlib's tab10, one per experiment
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
]
AGGREGATE_TITLES = {
    "iqm": "IQM",
    "median": "Median",
    "mean": "Mean",
    "optimality_gap": "Optimality gap (lower is better)",
}


@dataclass(frozen=True)
class Style:
    """What ``rlplat report``'s figure options set: a title, the curves' size, the font."""

    title: str | None = None
    size: tuple[float, float] = (7.0, 4.0)  # inches, the curve figures
    font_size: float = 10.0


def colour(index: int) -> str:
    return COLOURS[index % len(COLOURS)]


def wrapped(label: str, width: int = 42) -> str:
    """A long label (name plus differing keys) over several lines, broken after commas; its own
    line breaks kept."""
    return "\n".join(
        "\n".join(textwrap.wrap(line, width, break_on_hyphens=False)) or line
        for line in label.split("\n")
    )


def steps_text(steps: float) -> str:
    """A step count, short: ``10k``, ``20.1k``, ``1.5M``."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if steps >= scale:
            return f"{steps / scale:.3g}{suffix}"
    return f"{steps:.0f}"


@dataclass(frozen=True)
class Curve:
    """One experiment's curve: the aggregate over seeds on a grid, its band, each seed's run."""

    label: str
    x: np.ndarray
    centre: np.ndarray
    low: np.ndarray | None
    high: np.ndarray | None
    seeds: list[tuple[np.ndarray, np.ndarray]]
    stopped_early: list[str | None] | None = None  # per seed: the scheduler that ended it

def _legend_right(figure: Figure, axes) -> None:
    """The legend beside the axes, never over the data and never larger than the plot: smaller
    type, then more columns, until it fits beside it (the last try when nothing does)."""
    renderer = FigureCanvasAgg(figure).get_renderer()
    plot = axes.get_window_extent(renderer)
    for columns in (1, 2, 3):
        for size in ("small", "x-small"):
            legend = axes.legend(
                loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, fontsize=size,
                ncols=columns,
            )
            box = legend.get_window_extent(renderer)
            if box.height <= plot.height and box.width <= plot.width:
                return


def _save(figure: Figure, stem: Path, formats: tuple[str, ...]) -> list[Path]:
    paths = []
    for suffix in formats:
        path = stem.with_suffix(f".{suffix}")
        figure.savefig(path, dpi=150, bbox_inches="tight")
        paths.append(path)
    return paths


def curves_figure(
    curves: list[Curve], x_label: str, y_label: str, style: Style, stem: Path
) -> list[Path]:
    """``stem.png`` and ``stem.svg``: each experiment's aggregate curve with its 95% band and
    its seeds' own curves, thin."""
    with matplotlib.rc_context({"font.size": style.font_size}):
        return _curves_figure(curves, x_label, y_label, style, stem)


def _curves_figure(
    curves: list[Curve], x_label: str, y_label: str, style: Style, stem: Path
) -> list[Path]:
    figure = Figure(figsize=style.size)
    axes = figure.add_subplot()
    schedulers: set[str] = set()
    for index, curve in enumerate(curves):
        c = colour(index)
        stopped = curve.stopped_early or [None] * len(curve.seeds)
        for (seed_x, seed_y), scheduler in zip(curve.seeds, stopped, strict=True):
            axes.plot(seed_x, seed_y, color=c, alpha=0.25, linewidth=0.7)
            if scheduler:
                schedulers.add(scheduler)
                axes.plot(seed_x[-1:], seed_y[-1:], "x", color=c, ms=6, mew=1.5)
        if curve.low is not None and curve.high is not None:
            axes.fill_between(curve.x, curve.low, curve.high, color=c, alpha=0.2, linewidth=0)
        axes.plot(curve.x, curve.centre, color=c, linewidth=2.0, label=wrapped(curve.label))
    axes.xaxis.set_major_formatter(EngFormatter(sep=""))
    axes.set_xlabel(x_label)
    axes.set_ylabel(y_label)
    if style.title:
        axes.set_title(style.title)
    axes.grid(alpha=0.3)
    axes.set_xlim(left=0)
    if schedulers:  # a legend entry for the crosses at the ends of early-stopped trials
        by = ", ".join(sorted(schedulers))
        axes.plot([], [], "x", color="black", label=f"stopped early by {by}")
    _legend_right(figure, axes)
    return _save(figure, stem, ("png", "svg"))


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float | None
    high: float | None


def _padded(intervals: list[Interval], scores: list[list[float]]) -> tuple[float, float]:
    """x limits around every estimate, interval end and seed score, with room at both ends
    (bars' sticky edges would otherwise pin the axis to them)."""
    values = [v for i in intervals for v in (i.estimate, i.low, i.high) if v is not None]
    values += [v for seed_scores in scores for v in seed_scores]
    low, high = min(values), max(values)
    pad = 0.08 * (high - low) or 0.05 * abs(high) or 1.0
    return low - pad, high + pad


def statistics_shown(
    names: list[str], seed_counts: list[int], metric: str
) -> tuple[list[str], str]:
    """The aggregates (of ``names``) and the caption the experiments' seed counts support:
    with one seed each, one panel of scores and no interval claimed (every aggregate of one
    score is that score); otherwise every aggregate, with 95% intervals where 2 or more seeds."""
    if max(seed_counts) < 2:
        return names[:1], f"{metric}; one seed each, no interval"
    where = " where 2 or more seeds" if min(seed_counts) < 2 else ""
    return names, f"{metric}; 95% bootstrap CIs{where}, dots: seeds"


def final_figure(
    labels: list[str],
    aggregates: dict[str, list[Interval]],
    scores: list[list[float]],
    metric: str,
    style: Style,
    stem: Path,
) -> list[Path]:
    """``stem.png``: one panel per aggregate, each experiment's point estimate with its 95%
    interval as a bar, and the seeds' own scores as dots."""
    with matplotlib.rc_context({"font.size": style.font_size}):
        return _final_figure(labels, aggregates, scores, metric, style, stem)


def _final_figure(
    labels: list[str],
    aggregates: dict[str, list[Interval]],
    scores: list[list[float]],
    metric: str,
    style: Style,
    stem: Path,
) -> list[Path]:
    names, caption = statistics_shown(list(aggregates), [len(s) for s in scores], metric)
    labels = [wrapped(label) for label in labels]
    lines = max(label.count("\n") + 1 for label in labels)
    height = 1.2 + (0.3 + 0.17 * lines) * len(labels)
    figure = Figure(figsize=(3.0 * len(names) + 0.07 * min(42, max(map(len, labels))), height))
    rows = np.arange(len(labels))[::-1]
    for panel, name in enumerate(names):
        axes = figure.add_subplot(1, len(names), panel + 1)
        for index, (row, interval) in enumerate(zip(rows, aggregates[name], strict=True)):
            c = colour(index)
            if interval.low is not None and interval.high is not None:
                axes.barh(
                    row,
                    interval.high - interval.low,
                    left=interval.low,
                    height=0.6,
                    color=c,
                    alpha=0.35,
                )
            if interval.low is not None:  # the estimate's tick inside its interval
                axes.plot([interval.estimate], [row], marker="|", markersize=18, color=c, mew=2.5)
            elif name == "optimality_gap":  # one seed: its gap alone, as a point
                axes.plot([interval.estimate], [row], "o", color=c, ms=5)
            if name != "optimality_gap":
                axes.plot(scores[index], [row] * len(scores[index]), "o", color=c, ms=3.5)
        axes.set_yticks(rows, labels if panel == 0 else [""] * len(labels), fontsize="small")
        axes.set_title("Score" if len(names) == 1 else AGGREGATE_TITLES.get(name, name))
        axes.grid(axis="x", alpha=0.3)
        axes.set_ylim(-0.6, len(labels) - 0.4)
        axes.set_xlim(*_padded(aggregates[name], scores if name != "optimality_gap" else []))
        axes.tick_params(axis="x", labelsize="small")
    figure.supxlabel(caption)
    if style.title:
        figure.suptitle(style.title)
    figure.tight_layout()
    return _save(figure, stem, ("png",))
