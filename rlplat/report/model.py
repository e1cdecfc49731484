"""What ``rlplat report`` writes to report.json, as dataclasses (no scipy, no matplotlib).

``Report.to_json`` writes the keys in the order report.json has always had them, so a report
read with ``Report.from_json`` and written again is the same file; report.md, the printed summary
and marl-eval's layout read these fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its 95% interval (None when there are fewer than two seeds)."""

    estimate: float
    ci: tuple[float, float] | None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ci"] = list(self.ci) if self.ci is not None else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Estimate:
        ci = data["ci"]
        return cls(data["estimate"], None if ci is None else (ci[0], ci[1]))


@dataclass
class ToTarget:
    """When a seed's training first reached the target score (None: never)."""

    env_steps: float | None
    time_s: float | None


_TRIAL_KEYS = ("trial", "seed", "path", "final_score", "checkpoint", "env_steps", "time_s")


@dataclass
class TrialScore:
    """One seed: its trial, its final score and what training took."""

    trial: str
    seed: int | None
    path: str
    final_score: float | None
    checkpoint: str | None  # the checkpoint evaluated (None: scored by training)
    env_steps: int | None
    time_s: float | None
    episode_scores: list[float] = field(default_factory=list)  # the evaluation's episodes
    to_target: ToTarget | None = None  # with a target score only

    def to_json(self) -> dict[str, Any]:
        data = {key: getattr(self, key) for key in _TRIAL_KEYS}
        if self.episode_scores:
            data["episode_scores"] = self.episode_scores
        if self.to_target is not None:
            data["to_target"] = asdict(self.to_target)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TrialScore:
        to_target = data.get("to_target")
        return cls(
            **{key: data[key] for key in _TRIAL_KEYS},
            episode_scores=list(data.get("episode_scores") or []),
            to_target=ToTarget(**to_target) if to_target is not None else None,
        )


@dataclass
class CurveBand:
    """The learning curve: IQM over seeds on a grid of x values, with its 95% band."""

    x: list[float]
    centre: list[float]
    low: list[float] | None
    high: list[float] | None


@dataclass
class ExperimentStats:
    """One experiment (a configuration over its seeds): scores, aggregates, curve."""

    label: str
    name: str | None
    algorithm: str | None
    env: str
    run_dir: str
    differs: dict[str, Any]  # the keys whose values tell it from experiments of its name
    seeds: list[int | None]
    final_scores: list[float | None]
    trials: list[TrialScore]
    aggregates: dict[str, Estimate]  # iqm, mean, median (and optimality_gap with a target)
    curve: CurveBand | None = None
    eval_curve: CurveBand | None = None  # greedy evaluation during training, when logged

    def to_json(self) -> dict[str, Any]:
        data = {
            "label": self.label,
            "name": self.name,
            "algorithm": self.algorithm,
            "env": self.env,
            "run_dir": self.run_dir,
            "differs": self.differs,
            "seeds": self.seeds,
            "final_scores": self.final_scores,
            "trials": [trial.to_json() for trial in self.trials],
            "aggregates": {name: value.to_json() for name, value in self.aggregates.items()},
            "curve": asdict(self.curve) if self.curve is not None else None,
        }
        if self.eval_curve is not None:  # reports of runs that evaluated during training
            data["eval_curve"] = asdict(self.eval_curve)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExperimentStats:
        curve, eval_curve = data.get("curve"), data.get("eval_curve")
        return cls(
            **{key: data[key] for key in ("label", "name", "algorithm", "env", "run_dir",
                                          "differs", "seeds", "final_scores")},
            trials=[TrialScore.from_json(trial) for trial in data["trials"]],
            aggregates={name: Estimate.from_json(v) for name, v in data["aggregates"].items()},
            curve=CurveBand(**curve) if curve is not None else None,
            eval_curve=CurveBand(**eval_curve) if eval_curve is not None else None,
        )


@dataclass
class Improvement:
    """P(x > y): the chance that a seed of experiment x scores higher than a seed of y."""

    x: str
    y: str
    probability: Estimate

    def to_json(self) -> dict[str, Any]:
        return {"x": self.x, "y": self.y, **self.probability.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Improvement:
        return cls(data["x"], data["y"], Estimate.from_json(data))


@dataclass
class Bootstrap:
    """How the intervals were drawn (enough to compute them again from the per-seed scores)."""

    method: str
    resamples: int
    confidence: float
    seed: int
    stratified_by: str


# report.json's keys before its bootstrap settings, in their order.
_HEADER = ("created", "command", "versions", "metric", "metric_path", "x", "score", "checkpoint",
           "eval_episodes", "eval_seeds", "target")


@dataclass
class Report:
    """report.json: how the seeds were scored, each experiment's statistics, and the
    probability of improvement between every two experiments."""

    created: str
    command: list[str]
    versions: dict[str, str]
    metric: str
    metric_path: str
    x: str  # the curves' x axis: env_steps or time_s
    score: str  # eval (greedy episodes of a checkpoint) or training (the run's own last value)
    checkpoint: str | None  # last or best (score eval)
    eval_episodes: int | None
    eval_seeds: list[int] | None  # the first and last episode seed (score eval)
    target: float | None
    bootstrap: Bootstrap
    experiments: list[ExperimentStats]
    probability_of_improvement: list[Improvement]
    warnings: list[str] = field(default_factory=list)
    directory: str | None = None  # where the report was written

    def to_json(self) -> dict[str, Any]:
        return {
            **{key: getattr(self, key) for key in _HEADER},
            "bootstrap": asdict(self.bootstrap),
            "experiments": [experiment.to_json() for experiment in self.experiments],
            "probability_of_improvement": [p.to_json() for p in self.probability_of_improvement],
            "warnings": self.warnings,
            "directory": self.directory,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Report:
        return cls(
            **{key: data[key] for key in _HEADER},
            bootstrap=Bootstrap(**data["bootstrap"]),
            experiments=[ExperimentStats.from_json(e) for e in data["experiments"]],
            probability_of_improvement=[
                Improvement.from_json(p) for p in data["probability_of_improvement"]
            ],
            warnings=list(data.get("warnings") or []),
            directory=data.get("directory"),
        )
