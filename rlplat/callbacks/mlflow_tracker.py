"""``loggers.mlflow``: each trial an MLflow run, a search's trials nested under a parent run.

Runs are found again by their tags (``rlplat.trial_dir``, ``rlplat.run_dir``), so ``--resume``
continues the same runs; MLflow cannot delete metric points, so a resumed trial sends only the
env steps past the last one its run holds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from rlplat.callbacks.tracking import Tracker, TrialRun, missing_package, path_key
from rlplat.checkpoints import RESOLVED_EXPERIMENT
from rlplat.errors import ConfigError, first_line
from rlplat.experiment.schema import MlflowLogger

KEY = "loggers.mlflow.tracking_uri"
# A store that stops answering costs seconds per call, not MLflow's default minutes of retries.
HTTP_LIMITS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
}
PARAM_VALUE_LIMIT = 6000  # MLflow's longest parameter value
PARAMS_PER_CALL = 100  # MLflow's log_batch limits
METRICS_PER_CALL = 1000
STEP_METRIC = "perf/iteration"  # every result has it: the steps a run holds
RUN_FILES = ("summary.json", RESOLVED_EXPERIMENT)
TRIAL_TAG = "rlplat.trial_dir"
TRIAL_KEY_TAG = "rlplat.trial_key"  # a hash of the trial directory, to find its run again
RUN_KEY_TAG = "rlplat.run_key"  # the same for the run directory (the parent run, or the one run)
ROLE_TAG = "rlplat.role"


def client(tracking_uri: str) -> Any:
    for name, value in HTTP_LIMITS.items():
        os.environ.setdefault(name, value)
    from mlflow.tracking import MlflowClient  # noqa: PLC0415 - optional, slow to import

    return MlflowClient(tracking_uri=tracking_uri)


def check(spec: MlflowLogger, location: str) -> None:
    """The store answers (a server is up, a local store opens), else a ConfigError."""
    if importlib.util.find_spec("mlflow") is None:
        raise missing_package("mlflow", location, KEY)
    try:
        client(spec.tracking_uri).search_experiments(max_results=1)
    except Exception as exc:  # noqa: BLE001 - whatever the store says, it is not usable
        reason = failure_reason(exc)
        raise ConfigError(
            f"the MLflow tracking store {spec.tracking_uri!r} does not answer ({reason}). Start "
            "a server (mlflow server --backend-store-uri sqlite:///mlflow.db --port 5000) and "
            "give its http://host:port, or a local store (file:/path or sqlite:///path.db).",
            location=location,
            key=KEY,
        ) from None


def failure_reason(exc: Exception) -> str:
    """Why a store did not answer, in a few words (MLflow's message nests urllib3's)."""
    text = str(exc)
    if "Connection refused" in text or "Failed to establish a new connection" in text:
        return "connection refused: nothing listens there"
    if "timed out" in text.lower():
        return f"no answer within {os.environ['MLFLOW_HTTP_REQUEST_TIMEOUT']} s"
    return re.sub(r" at 0x[0-9a-f]+", "", first_line(exc))[:300]


def mlflow_name(tag: str) -> str:
    """A TensorBoard tag or parameter key, with the characters MLflow refuses in a name
    replaced."""
    return re.sub(r"[^\w./\- :]", "_", tag)


def param_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:PARAM_VALUE_LIMIT]


class MlflowTracker(Tracker):
    label = "MLflow"

    def __init__(
        self, spec: MlflowLogger, name: str, run_dir: Path, tags: dict[str, str], grouped: bool
    ):
        self.client = client(spec.tracking_uri)
        self.experiment_name = spec.experiment or name
        self.run_dir = run_dir
        self.tags = tags
        self.grouped = grouped
        self._experiment_id: str | None = None
        self._parent: str | None = None
        self._single: str | None = None  # the one trial's run, when not grouped
        self._runs: dict[Path, str] = {}

    def _experiment(self) -> str:
        if self._experiment_id is None:
            found = self.client.get_experiment_by_name(self.experiment_name)
            self._experiment_id = (
                found.experiment_id
                if found
                else self.client.create_experiment(self.experiment_name)
            )
        return self._experiment_id

    def _find(self, key_tag: str, directory: Path) -> str | None:
        """The run tagged with the key of ``directory`` (a hash: paths may hold quotes)."""
        query = f"tags.`{key_tag}` = '{path_key(directory)}'"
        runs = self.client.search_runs([self._experiment()], filter_string=query, max_results=1)
        return runs[0].info.run_id if runs else None

    def _parent_run(self) -> str:
        if self._parent is None:
            tags = {**self.tags, RUN_KEY_TAG: path_key(self.run_dir), ROLE_TAG: "search"}
            self._parent = (
                self._find(RUN_KEY_TAG, self.run_dir)
                or self.client.create_run(
                    self._experiment(), run_name=self.run_dir.name, tags=tags
                ).info.run_id
            )
        return self._parent

    def start(self, trial: TrialRun) -> int:
        run_id = self._runs.get(trial.path) or self._find(TRIAL_KEY_TAG, trial.path)
        if run_id is not None:
            self._remember(trial, run_id)
            self.client.update_run(run_id, status="RUNNING")
            history = self.client.get_metric_history(run_id, STEP_METRIC)
            return max((point.step for point in history), default=0)
        from mlflow.entities import Param  # noqa: PLC0415 - optional

        tags = {
            **self.tags,
            TRIAL_TAG: str(trial.path),
            TRIAL_KEY_TAG: path_key(trial.path),
            "rlplat.seed": str(trial.seed),
        }
        if self.grouped:
            tags["mlflow.parentRunId"] = self._parent_run()
        else:
            tags[RUN_KEY_TAG] = path_key(self.run_dir)
        name = trial.name if self.grouped else self.run_dir.name
        run_id = self.client.create_run(self._experiment(), run_name=name, tags=tags).info.run_id
        params = {mlflow_name(key)[:250]: param_text(value) for key, value in trial.params.items()}
        entries = [Param(key, value) for key, value in params.items()]
        for start in range(0, len(entries), PARAMS_PER_CALL):
            self.client.log_batch(run_id, params=entries[start : start + PARAMS_PER_CALL])
        self._remember(trial, run_id)
        return 0

    def _remember(self, trial: TrialRun, run_id: str) -> None:
        self._runs[trial.path] = run_id
        if not self.grouped:
            self._single = run_id

    def log(self, trial: TrialRun, scalars: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric  # noqa: PLC0415 - optional

        now = int(time.time() * 1000)
        metrics = [Metric(mlflow_name(tag), value, now, step) for tag, value in scalars.items()]
        for start in range(0, len(metrics), METRICS_PER_CALL):
            self.client.log_batch(
                self._runs[trial.path], metrics=metrics[start : start + METRICS_PER_CALL]
            )

    def end(self, trial: TrialRun, status: str) -> None:
        run_id = self._runs.pop(trial.path)
        for gif in trial.gifs():
            self.client.log_artifact(run_id, str(gif), "videos")
        self.client.set_terminated(run_id, status)

    def close(self, run_dir: Path, status: str) -> None:
        if self.grouped:
            target = self._parent_run()
        else:
            target = self._single or self._find(RUN_KEY_TAG, run_dir)
        if target is None:
            return
        for name in RUN_FILES:
            if (run_dir / name).is_file():
                self.client.log_artifact(target, str(run_dir / name))
        if (run_dir / "export").is_dir():
            self.client.log_artifacts(target, str(run_dir / "export"), "export")
        if self.grouped:
            self.client.set_terminated(target, status)
