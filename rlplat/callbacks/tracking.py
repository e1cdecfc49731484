"""What a tracker is (one run per trial, scalars by env step) and what every tracker run gets:
the trial's experiment as flat parameters and the run's tags."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from rlplat.callbacks.observers import TrialView
from rlplat.errors import ConfigError
from rlplat.experiment.schema import ENV_SOURCES, Experiment
from rlplat.util.versions import versions

INSTALL = "pip install 'rlplat[trackers]' (or pip install -e '.[trackers]' in a checkout)"


def flat_params(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"training": {"lr": 1e-3}}`` -> ``{"training.lr": 1e-3}``; lists stay values."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flat_params(value, path + "."))
        else:
            flat[path] = value
    return flat


def run_tags(experiment: Experiment, run_dir: Path) -> dict[str, str]:
    """What every tracker run is tagged with: algorithm, env, seed, versions, run directory."""
    env = experiment.env
    source = next(f"{key}:{getattr(env, key)}" for key in ENV_SOURCES if getattr(env, key))
    found = versions()
    return {
        "rlplat.algorithm": experiment.algorithm,
        "rlplat.env": source,
        "rlplat.seed": str(experiment.seed),
        "rlplat.version": found.get("rlplat", ""),
        "ray.version": found.get("ray", ""),
        "rlplat.run_dir": str(run_dir),
    }


class TrialRun:
    """One trial as the trackers see it: its directory, name, parameters and seed."""

    def __init__(self, trial: TrialView):
        self.path = trial.path  # the trial directory
        self.staging = trial.staging  # this session's, where TrainingVideos writes
        self.name = self.path.name
        self.params = flat_params(trial.experiment)
        self.seed = trial.experiment.get("seed")

    def gifs(self) -> list[Path]:
        """The trial's training GIFs: this session's and, after a resume, the earlier ones."""
        found = {gif.name: gif for gif in sorted((self.path / "videos").glob("*.gif"))}
        found.update({gif.name: gif for gif in sorted((self.staging / "videos").glob("*.gif"))})
        return [found[name] for name in sorted(found)]


class Tracker:
    """One tracker: a run per trial (under a parent when ``grouped``), scalars by env step."""

    label = "tracker"

    def start(self, trial: TrialRun) -> int:
        """Open (or, on resume, reopen) the trial's run; the last env step it already holds
        (0 for a new run): results up to it are not sent again."""
        raise NotImplementedError

    def log(self, trial: TrialRun, scalars: dict[str, float], step: int) -> None:
        raise NotImplementedError

    def end(self, trial: TrialRun, status: str) -> None:
        """The trial stopped (``status``: FINISHED, FAILED or KILLED): its files (videos) go
        up, its run is closed."""

    def close(self, run_dir: Path, status: str) -> None:
        """The whole run ended (``status``: FINISHED, FAILED or KILLED): the run's files
        (summary.json, experiment.yaml, export/) go to the parent run (or the one trial's)."""


def path_key(directory: Path) -> str:
    """A short stable key of a directory, to find its tracker run again on resume."""
    return hashlib.sha1(str(directory).encode()).hexdigest()[:16]


def missing_package(package: str, location: str, key: str) -> ConfigError:
    return ConfigError(f"{package} is not installed: {INSTALL}.", location=location, key=key)
