"""report.json's content as text: report.md, and the summary ``rlplat report`` prints."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlplat.report.model import Estimate, Report
from rlplat.report.plots import AGGREGATE_TITLES


def print_report(report: Report, console: Any) -> None:
    """Each experiment's IQM with its interval, and where report.md is."""
    for entry in report.experiments:
        iqm = entry.aggregates["iqm"]
        interval = f" [{iqm.ci[0]:.2f}, {iqm.ci[1]:.2f}]" if iqm.ci else ""
        console.print(
            f"{entry.label}: IQM {iqm.estimate:.2f}{interval} over {len(entry.seeds)} seed(s)",
            highlight=False,
        )
    console.print(f"Report: {report.directory}/report.md", highlight=False)


def score_words(report: Report) -> str:
    """How a seed was scored, in words (report.md and the final-scores figure)."""
    if report.score == "training":
        return f"final {report.metric} (training window)"
    return f"greedy return of the {report.checkpoint} checkpoint ({report.eval_episodes} episodes)"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def _estimate(entry: Estimate) -> str:
    ci = entry.ci
    interval = f" [{_number(ci[0])}, {_number(ci[1])}]" if ci else ""
    return f"{_number(entry.estimate)}{interval}"


def markdown(report: Report) -> str:
    """report.md: how the scores were made, the aggregates, improvement, time to target, and
    the figures with captions saying what each curve is."""
    entries = report.experiments
    names = list(entries[0].aggregates)
    lines = [
        "# rlplat report",
        "",
        f"Command: `{' '.join(report.command)}`",
        "",
        f"Score of a seed: {score_words(report)}"
        + (
            f", episode seeds {report.eval_seeds[0]}..{report.eval_seeds[1]}"
            if report.eval_seeds
            else ""
        )
        + f". Aggregates over seeds with 95% percentile bootstrap intervals "
        f"({report.bootstrap.resamples:,} resamples, seed {report.bootstrap.seed})"
        + (f"; optimality gap to {report.target:g}" if report.target is not None else "")
        + ".",
        "",
    ]
    lines += [f"> warning: {warning}" for warning in report.warnings]
    header = ["experiment", "seeds", "scores per seed"] + [
        AGGREGATE_TITLES[name].split(" (")[0] for name in names
    ]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for entry in entries:
        scores = ", ".join(_number(score) for score in entry.final_scores)
        cells = [entry.label, str(len(entry.seeds)), scores]
        cells += [_estimate(entry.aggregates[name]) for name in names]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "![final scores](final.png)",
        "",
        f"*Final scores (final.png): {score_words(report)} per seed (dots), and each "
        "aggregate's estimate with its 95% bootstrap interval (bar).*",
        "",
    ]
    if len(entries) > 1:
        labels = [entry.label for entry in entries]
        lines += [
            "Probability of improvement, P(row > column): the chance that a seed of the row "
            "scores higher than a seed of the column (ties count one half), 95% interval.",
            "",
            "| | " + " | ".join(labels) + " |",
            "|---|" + "---|" * len(labels),
        ]
        pairs = {(p.x, p.y): p.probability for p in report.probability_of_improvement}
        for row in labels:
            cells = [_estimate(pairs[row, col]) if row != col else "" for col in labels]
            lines.append(f"| {row} | " + " | ".join(cells) + " |")
        lines.append("")
    if report.target is not None:
        lines += _target_table(report)
    lines += _figure_captions(report)
    return "\n".join(lines)


def _figure_captions(report: Report) -> list[str]:
    x = "environment steps" if report.x == "env_steps" else "training time"
    band = (
        "Thick line: IQM over seeds, up to the shortest seed; band: its 95% bootstrap "
        "interval; thin lines: each seed."
    )
    what = f"{report.metric} against {x}, as training logged it"
    if report.metric_path.startswith("window/"):
        what += (
            ": at each iteration the mean over the training window (the last "
            "reporting.metrics_num_episodes_for_smoothing episodes, 100 by default), played "
            "with exploration"
        )
        if report.score == "eval":
            what += ", by the exploring policy, not the greedy one scored above"
    lines = [
        "![learning curves](curves.png)",
        "",
        f"*Learning curves (curves.png, curves.svg): {what}. {band}*",
        "",
    ]
    if any(entry.eval_curve for entry in report.experiments):
        lines += [
            "![greedy evaluation during training](eval_curves.png)",
            "",
            "*Greedy evaluation during training (eval_curves.png, eval_curves.svg): the mean "
            f"return of greedy episodes (explore off) against {x}, played at each checkpoint's "
            "iteration with the weights of that checkpoint (evaluation.evaluation_duration "
            "episodes, 5 by default). " + band + "*",
            "",
        ]
    return lines


def _target_table(report: Report) -> list[str]:
    lines = [
        f"Time to target ({report.metric} >= {report.target:g} during training):",
        "",
        "| experiment | seeds reaching it | env steps (median) | training s (median) "
        "| env steps per seed |",
        "|---|---|---|---|---|",
    ]
    for entry in report.experiments:
        reached = [t.to_target for t in entry.trials if t.to_target.env_steps]
        steps = [r.env_steps for r in reached]
        times = [r.time_s for r in reached]
        per_seed = ", ".join(
            _number(t.to_target.env_steps).removesuffix(".00") for t in entry.trials
        )
        lines.append(
            f"| {entry.label} | {len(reached)}/{len(entry.trials)} | "
            f"{_number(float(np.median(steps)) if steps else None).removesuffix('.00')} | "
            f"{_number(float(np.median(times)) if times else None)} | {per_seed} |"
        )
    return [*lines, ""]
