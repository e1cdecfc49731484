"""``rlplat report``: runs over seeds -> per-seed final scores, aggregates with bootstrap
intervals, probability of improvement, learning curves; written as report.json, report.md and
figures.

An *experiment* is one configuration of one run: a run of ``seeds: 3`` is one experiment with
three seeds, a search with seeds one experiment per configuration. Experiments are labelled by
their name, plus, where several share a name, the keys whose values differ between those
(``simple-spread-qmix (training.mixer=vdn)``).

A seed's final score is by default the mean return of greedy episodes of its last checkpoint,
played by ``rlplat eval``'s code (no Ray); ``score="training"`` takes the run's own last windowed
value of the metric instead.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from rlplat.callbacks.search_report import EARLY_STOP, RESULTS_CSV, configuration_key
from rlplat.checkpoints import GreedyEvaluation, best_and_last
from rlplat.errors import UserError, allowed_list, did_you_mean
from rlplat.metrics import (
    AGENT_RETURNS,
    ENV_STEPS,
    EVAL_SCORE,
    METRIC_ALIASES,
    POLICY_RETURNS,
    RETURN_MEAN,
    SUCCESS_RATE,
    TIME_TOTAL,
    WINDOW_SCORE,
    lookup,
    metric_path,
)
from rlplat.policy.evaluate import EvalOptions, EvalReport, evaluate
from rlplat.report import plots, stats
from rlplat.report.labels import short_labels
from rlplat.report.model import (
    Bootstrap,
    CurveBand,
    ExperimentStats,
    Improvement,
    Report,
    ToTarget,
    TrialScore,
)
from rlplat.report.options import ReportOptions
from rlplat.report.plots import steps_text
from rlplat.report.render import markdown, score_words
from rlplat.report.runs import (
    Trial,
    column,
    env_label,
    logged_paths,
    read_results,
    resolve_run,
    run_experiment,
    run_trials,
)
from rlplat.util.paths import publish_dir
from rlplat.util.versions import versions

X_AXES = {
    "env_steps": (ENV_STEPS, "Environment steps"),
    "time_s": (TIME_TOTAL, "Training time (s)"),
}
DISPLAY_NAMES = {"episode_return_mean": "Episode return", "episode_len_mean": "Episode length"}
EVAL_RETURN = metric_path(EVAL_SCORE)
CHECKPOINTS = ("last", "best")
SCORES = ("eval", "training")
GRID_POINTS = 100
# Keys that never tell experiments apart in a label: where and how a run was kept or searched.
UNLABELLED = ("name", "seed", "seeds", "output_dir", "tune", "watchdog_s", "video", "export")
MARL_EVAL_FILE = "marl_eval.json"
MEMBER_PATHS = (POLICY_RETURNS + "/", AGENT_RETURNS + "/")


@dataclass
class SeedResult:
    trial: Trial
    results: list[dict[str, Any]]
    final: float | None = None
    checkpoint: str | None = None
    episodes: list[float] = field(default_factory=list)  # per-episode scores of the evaluation
    stop_reason: str | None = None  # a search's trial: what ended it (results.csv)

    @property
    def stopped_early(self) -> str | None:
        """The scheduler that ended this trial before its budget (``asha``), if one did."""
        reason = self.stop_reason or ""
        return reason.removesuffix(EARLY_STOP) if reason.endswith(EARLY_STOP) else None


@dataclass
class Experiment:
    label: str
    run_dir: Path
    experiment: dict[str, Any]
    differs: dict[str, Any]
    seeds: list[SeedResult]


def check_options(options: ReportOptions) -> None:
    for name, value, allowed in (
        ("--x", options.x, list(X_AXES)),
        ("--checkpoint", options.checkpoint, list(CHECKPOINTS)),
        ("--score", options.score, list(SCORES)),
    ):
        if value not in allowed:
            raise UserError(
                f"{name} {value!r} is not one of {', '.join(allowed)}."
                + did_you_mean(value, allowed)
            )
    if options.eval_episodes < 1:
        raise UserError(f"--eval-episodes must be at least 1, got {options.eval_episodes}.")
    figure_size(options.size)
    if options.font_size <= 0:
        raise UserError(f"--font-size must be positive, got {options.font_size:g}.")
    for rename in options.label:
        label, equals, name = (part.strip() for part in rename.rpartition("="))
        if not (equals and label and name):
            raise UserError(
                f"--label {rename!r} is not LABEL=NAME: give an experiment's label (as the "
                "report shows it) and the name to show instead, e.g. --label 'cartpole-ppo=PPO'."
            )


def figure_size(size: str) -> tuple[float, float]:
    """``--size 7x4`` -> (7.0, 4.0) inches."""
    width, _, height = size.lower().partition("x")
    try:
        inches = (float(width), float(height))
    except ValueError:
        inches = (0.0, 0.0)
    if min(inches) <= 0:
        raise UserError(f"--size {size!r} is not WIDTHxHEIGHT in inches, e.g. --size 7x4.")
    return inches


def _rename(experiments: list[Experiment], renames: list[str]) -> None:
    """``--label LABEL=NAME``: show an experiment under NAME in figures and tables (split at the
    last ``=``: the labels the report makes hold settings such as ``lr=0.001``)."""
    labels = [e.label for e in experiments]
    shown = list(labels)
    for rename in renames:
        label, _, name = (part.strip() for part in rename.rpartition("="))
        if label not in labels:
            raise UserError(
                f"--label {rename!r}: no experiment is labelled {label!r}; the labels are "
                f"{allowed_list(labels)}.{did_you_mean(label, labels)}"
            )
        shown[labels.index(label)] = name
    repeated = sorted({label for label in shown if shown.count(label) > 1})
    if repeated:
        raise UserError(
            f"--label: {shown.count(repeated[0])} experiments would show as {repeated[0]!r}, so "
            "the figures and tables could not tell them apart; give each its own name."
        )
    for experiment, label in zip(experiments, shown, strict=True):
        experiment.label = label


def make_report(
    paths: list[Path], options: ReportOptions, say: Callable[[str], None] = print
) -> Report:
    """Read the runs, score every seed, compute the statistics, write the report; returns
    what report.json holds (with ``directory``, where it was written)."""
    check_options(options)
    experiments = _experiments(paths, say)
    _rename(experiments, options.label)
    metric = _metric(experiments, options.metric)
    warnings = _check_metric_and_envs(experiments, metric, say)
    if options.score == "eval":
        _check_checkpoints(experiments, metric, options)
        _score_by_evaluation(experiments, metric, options, say)
    else:
        _score_by_training(experiments, metric)
    target = _target(experiments, metric, options.target)
    report = _statistics(experiments, metric, target, options)
    report.warnings = warnings
    curves = _curves(experiments, metric_path(metric), options)
    # Greedy evaluation during training is of the whole return (team return for multi-agent).
    greedy = _curves(experiments, EVAL_RETURN, options, with_checkpoint_evaluations)
    greedy = greedy if metric == WINDOW_SCORE else None
    for index, entry in enumerate(report.experiments):
        entry.curve = _band(curves[index])
        entry.eval_curve = _band(greedy[index]) if greedy else None
    report.directory = str(_write(report, experiments, (curves, greedy), options))
    return report


def _band(curve: plots.Curve) -> CurveBand:
    return CurveBand(
        x=curve.x.tolist(),
        centre=curve.centre.tolist(),
        low=None if curve.low is None else curve.low.tolist(),
        high=None if curve.high is None else curve.high.tolist(),
    )


# -- which experiments -------------------------------------------------------------------------


def _experiments(paths: list[Path], say: Callable[[str], None]) -> list[Experiment]:
    runs: list[Path] = []
    for path in paths:
        run_dir, note = resolve_run(path)
        if note:
            say(f"Run: {note}")
        if run_dir in runs:
            raise UserError(f"{run_dir} is given twice; give each run once.")
        runs.append(run_dir)
    experiments = []
    for run_dir in runs:
        trials = run_trials(run_dir)
        if not trials:
            raise UserError(
                f"{run_dir} has no trials (no trial_*/params.json): the run stopped before Tune "
                "started one. Leave it out of the report."
            )
        stops = _stop_reasons(run_dir)
        # How the seeds were trained is the run's setting, not a trial's: a stacked run is told
        # apart from a run of the same seeds as separate trials.
        stacked = bool(run_experiment(run_dir).get("stacked"))
        groups: dict[str, list[Trial]] = {}
        for trial in trials:
            groups.setdefault(configuration_key(trial.experiment), []).append(trial)
        for group in groups.values():
            group.sort(key=lambda t: (t.seed is None, t.seed or 0))
            experiment = dict(group[0].experiment)
            if stacked:
                experiment["stacked"] = True
            seeds = [
                SeedResult(trial, read_results(trial.path), stop_reason=stops.get(trial.name))
                for trial in group
            ]
            experiments.append(Experiment("", run_dir, experiment, {}, seeds))
    if any(experiment.experiment.get("stacked") for experiment in experiments):
        for experiment in experiments:  # labelled stacked=false beside a stacked run
            experiment.experiment.setdefault("stacked", False)
    _label(experiments)
    return experiments


def _stop_reasons(run_dir: Path) -> dict[str, str]:
    """Each trial's stop reason from a search's results.csv ({} for a run without one)."""
    path = run_dir / RESULTS_CSV
    if not path.exists():
        return {}
    with path.open(newline="") as rows:
        return {row["trial"]: row["stop_reason"] for row in csv.DictReader(rows)}


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix: data}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if not prefix and key in UNLABELLED:
            continue
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _label(experiments: list[Experiment]) -> None:
    """The experiment's name, and where several share a name, the settings whose values differ
    between those, short (``name (lr=3e-4, clip=0.2)``; ``labels.short_labels``). Where every
    experiment has the same name (one search, or one experiment run again), the settings alone."""
    by_name: dict[str, list[Experiment]] = {}
    for experiment in experiments:
        by_name.setdefault(str(experiment.experiment.get("name", "?")), []).append(experiment)
    for name, group in by_name.items():
        flats = [_flatten(e.experiment) for e in group]
        keys = sorted({key for flat in flats for key in flat})
        differing = [
            key for key in keys if len({json.dumps(f.get(key), sort_keys=True) for f in flats}) > 1
        ]
        for experiment, flat in zip(group, flats, strict=True):
            experiment.differs = {key: flat.get(key) for key in differing}
        shown = short_labels([experiment.differs for experiment in group])
        for experiment, settings in zip(group, shown, strict=True):
            if not settings:
                experiment.label = name
            elif len(by_name) == 1:
                experiment.label = settings
            else:
                experiment.label = f"{name} ({settings})"
    labels = [e.label for e in experiments]
    for experiment in experiments:
        if labels.count(experiment.label) > 1:
            experiment.label += f" [{experiment.run_dir.name}]"


# -- which metric, checked ---------------------------------------------------------------------


def _metric(experiments: list[Experiment], given: str | None) -> str:
    """``--metric``, else the metric the runs rank by (they must agree, and maximise it)."""
    runs = dict.fromkeys(e.run_dir for e in experiments)  # a search's configurations share one
    tunes = {run: run_experiment(run).get("tune") or {} for run in runs}
    if given is not None:
        return given
    names = {str(run): tune.get("metric", "episode_return_mean") for run, tune in tunes.items()}
    if len(set(names.values())) > 1:
        listed = "; ".join(f"{run}: {name}" for run, name in names.items())
        raise UserError(
            f"the runs rank by different metrics ({listed}), so their scores do not compare. "
            "Choose the one to report with --metric."
        )
    minimised = [str(run) for run, tune in tunes.items() if tune.get("mode") == "min"]
    if minimised:
        raise UserError(
            f"run {minimised[0]} minimises its metric (tune.mode: min); rlplat report treats "
            "higher scores as better (IQM, optimality gap, probability of improvement). Report a "
            "metric to maximise with --metric, e.g. episode_return_mean."
        )
    return next(iter(names.values()))


def _check_metric_and_envs(
    experiments: list[Experiment], metric: str, say: Callable[[str], None]
) -> list[str]:
    path = metric_path(metric)
    for experiment in experiments:
        for seed in experiment.seeds:
            if np.isfinite(column(seed.results, path)).any():
                continue
            logged = logged_paths(seed.results)
            if not seed.results:
                raise UserError(
                    f"{seed.trial.path} has no results (result.json is empty): the trial "
                    "stopped before its first iteration. Leave its run out of the report."
                )
            if any(lookup(result, path) is not None for result in seed.results):
                raise UserError(
                    f"{seed.trial.path} logged {metric!r} but never a finite value: the trial "
                    "stopped (or failed) before its first episode ended, so this seed has no "
                    "score. Leave its run out of the report, or run that seed again."
                )
            shorts = [alias for alias, full in METRIC_ALIASES.items() if full in logged]
            members = [p.removeprefix("window/") for p in logged if p.startswith(MEMBER_PATHS)]
            readable = shorts + members
            shown = f" ({path})" if path != metric else ""
            raise UserError(
                f"metric {metric!r}{shown} was never logged by {seed.trial.path}."
                + did_you_mean(metric, readable + logged)
                + f" It logged {allowed_list(readable or logged, limit=12)}"
                + (f" and {len(logged)} result paths such as {logged[0]}." if readable else ".")
            )
    warnings = []
    envs = sorted({env_label(e.experiment) for e in experiments})
    if len(envs) > 1:
        warnings.append(
            f"the experiments ran on different environments ({', '.join(envs)}): their scores "
            "are on different scales, compare them with care."
        )
        say(f"warning: {warnings[-1]}")
    return warnings


# -- final scores ------------------------------------------------------------------------------


def _check_checkpoints(experiments: list[Experiment], metric: str, options: ReportOptions) -> None:
    path = metric_path(metric)
    if path not in (RETURN_MEAN, SUCCESS_RATE) and not path.startswith(MEMBER_PATHS):
        raise UserError(
            f"--score eval plays episodes and measures returns or successes; {metric!r} is "
            "neither (episode_return_mean, policy_return_mean/<policy>, "
            "agent_return_mean/<agent> or success_rate). Use --score training to report the "
            "run's own value of it."
        )
    missing = [
        str(seed.trial.path)
        for experiment in experiments
        for seed in experiment.seeds
        if best_and_last(seed.trial.path)[0] is None
    ]
    if missing:
        raise UserError(
            f"{len(missing)} trial(s) have no checkpoint to evaluate: {', '.join(missing[:3])}"
            + (" ..." if len(missing) > 3 else "")
            + ". Use --score training to score seeds by the run's own last metric value, or "
            "leave those runs out."
        )


def _episode_scores(report: EvalReport, path: str) -> tuple[float, list[float]]:
    """The evaluation's mean score for the metric and each episode's (team, policy or agent)."""
    if path == RETURN_MEAN:
        return report.returns.mean, [episode["return"] for episode in report.per_episode]
    if path == SUCCESS_RATE:
        if report.success_rate is None:
            raise UserError(
                f"the episodes of {report.checkpoint} say nothing of success (no is_success in "
                "their last info): success_rate is for goal envs."
            )
        said = [float(episode["success"]) for episode in report.per_episode]
        return report.success_rate, said
    group, _, member = path.removeprefix("window/").partition("/")
    table = report.policy_returns if group == "policy_return_mean" else report.agent_returns
    if member not in table:
        raise UserError(
            f"the evaluation of {report.checkpoint} has no {group} {member!r}; it has: "
            f"{', '.join(table) or 'none'}." + did_you_mean(member, list(table))
        )
    per_episode = [episode.get("agent_returns", {}).get(member) for episode in report.per_episode]
    if group == "agent_return_mean" and None not in per_episode:
        return table[member].mean, per_episode
    return table[member].mean, []


def _score_by_evaluation(
    experiments: list[Experiment], metric: str, options: ReportOptions, say: Callable
) -> None:
    path = metric_path(metric)
    last = options.checkpoint == "last"
    for experiment in experiments:
        for seed in experiment.seeds:
            report = evaluate(
                seed.trial.path,
                EvalOptions(episodes=options.eval_episodes, seed=options.eval_seed, last=last),
                say=lambda _line: None,
            )
            seed.final, seed.episodes = _episode_scores(report, path)
            seed.checkpoint = report.checkpoint
            say(
                f"  {experiment.label}, seed {seed.trial.seed}: {seed.final:.2f} over "
                f"{options.eval_episodes} greedy episodes of {Path(report.checkpoint).name}"
            )


def _score_by_training(experiments: list[Experiment], metric: str) -> None:
    path = metric_path(metric)
    for experiment in experiments:
        for seed in experiment.seeds:
            values = column(seed.results, path)
            seed.final = float(values[np.isfinite(values)][-1])


def _target(experiments: list[Experiment], metric: str, given: float | None) -> float | None:
    """The score the optimality gap and time to target measure against."""
    if given is not None or metric_path(metric) != RETURN_MEAN:
        return given
    targets = {(e.experiment.get("stop") or {}).get("episode_return_mean") for e in experiments}
    return targets.pop() if len(targets) == 1 else None


# -- statistics --------------------------------------------------------------------------------


def _first_reaching(xs: np.ndarray, ys: np.ndarray, target: float) -> float | None:
    reached = np.flatnonzero(np.isfinite(ys) & (ys >= target))
    return float(xs[reached[0]]) if reached.size else None


def _statistics(
    experiments: list[Experiment], metric: str, target: float | None, options: ReportOptions
) -> Report:
    functions = stats.aggregate_functions(target)
    seed = options.bootstrap_seed
    entries = []
    for experiment in experiments:
        scores = [s.final for s in experiment.seeds]
        trials = []
        for s in experiment.seeds:
            steps = column(s.results, ENV_STEPS)
            times = column(s.results, TIME_TOTAL)
            values = column(s.results, metric_path(metric))
            trials.append(TrialScore(
                trial=s.trial.name,
                seed=s.trial.seed,
                path=str(s.trial.path),
                final_score=s.final,
                checkpoint=s.checkpoint,
                env_steps=int(np.nanmax(steps)) if np.isfinite(steps).any() else None,
                time_s=float(np.nanmax(times)) if np.isfinite(times).any() else None,
                episode_scores=s.episodes,
                to_target=None if target is None else ToTarget(
                    env_steps=_first_reaching(steps, values, target),
                    time_s=_first_reaching(times, values, target),
                ),
            ))
        entries.append(ExperimentStats(
            label=experiment.label,
            name=experiment.experiment.get("name"),
            algorithm=experiment.experiment.get("algorithm"),
            env=env_label(experiment.experiment),
            run_dir=str(experiment.run_dir),
            differs=experiment.differs,
            seeds=[s.trial.seed for s in experiment.seeds],
            final_scores=scores,
            trials=trials,
            aggregates={
                name: stats.bootstrap_estimate(scores, function, seed)
                for name, function in functions.items()
            },
        ))
    improvement = [
        Improvement(a.label, b.label, stats.improvement(
            [s.final for s in a.seeds], [s.final for s in b.seeds], seed
        ))
        for a in experiments
        for b in experiments
        if a is not b
    ]
    evaluated = options.score == "eval"
    return Report(
        created=datetime.now().isoformat(timespec="seconds"),
        command=["rlplat", *sys.argv[1:]],
        versions=versions(),
        metric=metric,
        metric_path=metric_path(metric),
        x=options.x,
        score=options.score,
        checkpoint=options.checkpoint if evaluated else None,
        eval_episodes=options.eval_episodes if evaluated else None,
        eval_seeds=(
            [options.eval_seed, options.eval_seed + options.eval_episodes - 1]
            if evaluated
            else None
        ),
        target=target,
        bootstrap=Bootstrap(
            method=stats.METHOD,
            resamples=stats.RESAMPLES,
            confidence=stats.CONFIDENCE,
            seed=seed,
            stratified_by="experiment (each experiment's seeds resampled on their own)",
        ),
        experiments=entries,
        probability_of_improvement=improvement,
    )


def with_checkpoint_evaluations(seed: SeedResult) -> list[dict[str, Any]]:
    """A seed's results, with the greedy evaluation of each checkpoint still on disk written
    into the result of its iteration (the final checkpoint's is made as it is saved, after the
    last result)."""
    results = {r.get("training_iteration"): r for r in seed.results}
    for checkpoint in sorted(seed.trial.path.glob("checkpoint_*")):
        evaluation = GreedyEvaluation.read(checkpoint)
        row = results.get(evaluation.iteration) if evaluation else None
        if row is not None and "evaluation" not in row and evaluation.return_mean is not None:
            runners = {"episode_return_mean": evaluation.return_mean}
            results[evaluation.iteration] = {**row, "evaluation": {"env_runners": runners}}
    return list(results.values())


def _curves(
    experiments: list[Experiment],
    path: str,
    options: ReportOptions,
    results: Callable[[SeedResult], list[dict[str, Any]]] = lambda seed: seed.results,
) -> list[plots.Curve] | None:
    """Each experiment's seeds' ``path`` (in ``results(seed)``) resampled (linearly) on a common
    grid of x values from the latest first point to the earliest last point of its seeds, then
    IQM across seeds; None when a seed never logged it (runs that did not evaluate have no
    greedy curve)."""
    x_path = X_AXES[options.x][0]
    curves = []
    for experiment in experiments:
        seeds = []
        for s in experiment.seeds:
            rows = results(s)
            xs = column(rows, x_path)
            ys = column(rows, path)
            keep = np.isfinite(xs) & np.isfinite(ys)
            if not keep.any():
                return None
            xs, ys = xs[keep], ys[keep]
            # x only grows (a PBT exploit restarts a trial's clock): keep each new maximum.
            rising = np.concatenate(([True], xs[1:] > np.maximum.accumulate(xs)[:-1]))
            seeds.append((xs[rising], ys[rising]))
        start = max(xs[0] for xs, _ in seeds)
        end = min(xs[-1] for xs, _ in seeds)
        grid = np.linspace(start, end, GRID_POINTS) if end > start else np.array([start])
        values = np.stack([np.interp(grid, xs, ys) for xs, ys in seeds])
        centre, low, high = stats.curve_band(values, stats.iqm, options.bootstrap_seed)
        stopped = [s.stopped_early for s in experiment.seeds]
        curves.append(plots.Curve(experiment.label, grid, centre, low, high, seeds, stopped))
    return curves


# -- files -------------------------------------------------------------------------------------


def _write(
    report: Report,
    experiments: list[Experiment],
    curves: tuple[list[plots.Curve], list[plots.Curve] | None],
    options: ReportOptions,
) -> Path:
    """Everything into a temporary directory beside the destination, renamed into place once
    complete: a report directory is whole or absent, and an existing one is never touched."""
    out = options.out or Path("reports") / _default_name(experiments)
    out = out.expanduser().resolve()
    try:
        draft = publish_dir(out)
    except OSError as exc:
        raise UserError(f"cannot write the report under {out.parent}: {exc.strerror}.") from None
    with draft:
        _files(draft.path, report, experiments, curves, options)
        report.directory = str(draft.claim())
        (draft.path / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return draft.destination


def _default_name(experiments: list[Experiment]) -> str:
    names = list(dict.fromkeys(str(e.experiment.get("name", "report")) for e in experiments))
    return "-vs-".join(names[:3]) + "-" + datetime.now().strftime("%Y-%m-%d_%H-%M-%S")


def _files(
    directory: Path,
    report: Report,
    experiments: list[Experiment],
    curves: tuple[list[plots.Curve], list[plots.Curve] | None],
    options: ReportOptions,
) -> None:
    training, greedy = curves
    style = plots.Style(options.title, figure_size(options.size), options.font_size)
    x_label = options.x_label or X_AXES[options.x][1]
    name = display_name(report.metric)
    training_name = options.y_label or f"{name} (training)"
    plots.curves_figure(training, x_label, training_name, style, directory / "curves")
    if greedy:
        greedy_name = options.y_label or f"{name} (greedy)"
        plots.curves_figure(greedy, x_label, greedy_name, style, directory / "eval_curves")
    names = list(report.experiments[0].aggregates)
    intervals = {
        name: [
            plots.Interval(
                entry.aggregates[name].estimate, *(entry.aggregates[name].ci or (None, None))
            )
            for entry in report.experiments
        ]
        for name in names
    }
    plots.final_figure(
        [_final_label(e) for e in experiments],
        intervals,
        [e.final_scores for e in report.experiments],
        options.y_label or score_words(report),
        style,
        directory / "final",
    )
    (directory / "report.md").write_text(markdown(report))
    if options.marl_eval:
        (directory / MARL_EVAL_FILE).write_text(json.dumps(marl_eval(report, experiments)) + "\n")


def _final_label(experiment: Experiment) -> str:
    """The experiment's label, with a second line where a scheduler ended its seeds early:
    how far they got (``asha stopped it at 18k env steps``)."""
    early = [s for s in experiment.seeds if s.stopped_early]
    if not early:
        return experiment.label
    steps = max(float(column(s.results, ENV_STEPS)[-1]) for s in early)
    scheduler = early[0].stopped_early
    return f"{experiment.label}\n{scheduler} stopped it at {steps_text(steps)} env steps"


def display_name(metric: str) -> str:
    """A metric's name on a figure's axis: ``Episode return``, ``Return of policy learner``."""
    for prefix, kind in (("policy_return_mean/", "policy"), ("agent_return_mean/", "agent")):
        if metric.startswith(prefix):
            return f"Return of {kind} {metric.removeprefix(prefix)}"
    return DISPLAY_NAMES.get(metric, metric)


def marl_eval(report: Report, experiments: list[Experiment]) -> dict[str, Any]:
    """The layout of marl-eval (used by BenchMARL): env -> task -> algorithm -> seed_i ->
    step_j {step_count, return: [values]} and absolute_metrics {return: [episode returns]}.

    Each step holds the run's windowed training value of the metric at that iteration;
    absolute_metrics holds the final evaluation's episodes (or the final windowed value with
    score=training).
    """
    data: dict[str, Any] = {}
    path = report.metric_path
    for entry, experiment in zip(report.experiments, experiments, strict=True):
        env = experiment.experiment.get("env") or {}
        family = "pettingzoo" if env.get("pettingzoo") else "gymnasium"
        runs = data.setdefault(family, {}).setdefault(entry.env, {})
        algorithm = runs.setdefault(entry.label, {})
        for s in experiment.seeds:
            steps = column(s.results, ENV_STEPS)
            values = column(s.results, path)
            keep = np.flatnonzero(np.isfinite(steps) & np.isfinite(values))
            run: dict[str, Any] = {
                f"step_{j}": {"step_count": int(steps[i]), "return": [float(values[i])]}
                for j, i in enumerate(keep)
            }
            run["absolute_metrics"] = {"return": s.episodes or [s.final]}
            key = f"seed_{s.trial.seed}"
            algorithm[key if key not in algorithm else f"{key}_{s.trial.name}"] = run
    return data
