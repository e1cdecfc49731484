"""``loggers.wandb``: each trial a Weights & Biases run, a search's trials in one group.

A trial's run id is derived from its directory, so ``--resume`` continues the same run, sending
only the env steps past the last one W&B holds: the resumed run's summary online, the run's files
under ``<run dir>/wandb`` offline (W&B writes in the background, so a killed driver's last rows
may never have reached them; they are sent again). Env steps are the x-axis of every chart
(``define_metric(step_metric="env_steps")``).
"""

from __future__ import annotations

import importlib.util
import json
import netrc
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlplat.callbacks.tracking import Tracker, TrialRun, missing_package, path_key
from rlplat.checkpoints import RESOLVED_EXPERIMENT
from rlplat.errors import ConfigError
from rlplat.experiment.schema import WandbLogger

KEY = "loggers.wandb.mode"
STEP = "env_steps"
LOG_BLOCK = 32768  # W&B's run files are LevelDB logs: records in blocks of 32 KiB
DEFAULT_HOST = "https://api.wandb.ai"
RUN_FILES = ("summary.json", RESOLVED_EXPERIMENT)


def has_credentials() -> bool:
    """A key in WANDB_API_KEY or in the netrc entry ``wandb login`` writes for the host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = os.environ.get("WANDB_BASE_URL", DEFAULT_HOST).split("://")[-1].split("/")[0]
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return path.is_file() and netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def check(spec: WandbLogger, location: str) -> None:
    if importlib.util.find_spec("wandb") is None:
        raise missing_package("wandb", location, KEY)
    if spec.mode == "online" and not has_credentials():
        raise ConfigError(
            "a W&B online run needs an API key, and none is set: export WANDB_API_KEY (or run "
            "`wandb login` once), never in the experiment file; or log without an account "
            "with loggers.wandb.mode=offline (wandb sync uploads the runs later).",
            location=location,
            key=KEY,
        )


def offline_records(path: Path) -> Iterator[Any]:
    """The records of an offline run's ``.wandb`` file (W&B's protobuf ``Record``s in a
    LevelDB log: a 7-byte file header, then blocks of records, each with a 7-byte header of
    checksum, length and kind: 1 whole, 2 first, 3 middle, 4 last part). A record cut short by a
    killed process ends the file."""
    from wandb.proto import wandb_internal_pb2  # noqa: PLC0415 - optional

    data = path.read_bytes()
    position, pending = 7, b""
    while position + 7 <= len(data):
        left = LOG_BLOCK - position % LOG_BLOCK
        if left < 7:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        chunk = data[position + 7 : position + 7 + length]
        position += 7 + length
        if len(chunk) < length:
            return
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def history_rows(record: Any) -> dict[str, Any] | None:
    """A history record's row (``{key: value}``), None for any other record."""
    if record.WhichOneof("record_type") != "history":
        return None
    return {
        item.key or "/".join(item.nested_key): json.loads(item.value_json)
        for item in record.history.item
    }


def offline_steps(run_dir: Path, run_id: str) -> list[int]:
    """The env steps of the rows W&B wrote for an offline run, in order (all its sessions)."""
    steps = []
    for path in sorted(run_dir.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb")):
        for record in offline_records(path):
            row = history_rows(record)
            if row and STEP in row:
                steps.append(int(row[STEP]))
    return steps


class WandbTracker(Tracker):
    label = "W&B"

    def __init__(self, spec: WandbLogger, run_dir: Path, tags: dict[str, str], grouped: bool):
        import wandb  # noqa: PLC0415 - optional, slow to import

        self.wandb = wandb
        self.spec = spec
        self.run_dir = run_dir
        self.tags = tags
        self.grouped = grouped
        self._runs: dict[Path, Any] = {}
        self._status = "FINISHED"  # the one trial's, when not grouped

    def _init(self, run_id: str, name: str, **options: Any) -> Any:
        return self.wandb.init(
            project=self.spec.project,
            entity=self.spec.entity,
            mode=self.spec.mode,
            dir=str(self.run_dir),
            id=run_id,
            name=name,
            group=self.run_dir.name if self.grouped else None,
            resume="allow",
            reinit="create_new",
            settings=self.wandb.Settings(console="off", silent=True, x_disable_stats=True),
            **options,
        )

    def start(self, trial: TrialRun) -> int:
        run_id = path_key(trial.path)
        run = self._init(
            run_id,
            trial.name if self.grouped else self.run_dir.name,
            config={**trial.params, **self.tags, "rlplat.seed": trial.seed},
            tags=[self.tags["rlplat.algorithm"], self.tags["rlplat.env"][:64]],
        )
        run.define_metric(STEP)
        run.define_metric("*", step_metric=STEP)
        self._runs[trial.path] = run
        if self.spec.mode == "offline":
            return max(offline_steps(self.run_dir, run_id), default=0)
        return int(run.summary.get(STEP, 0))

    def log(self, trial: TrialRun, scalars: dict[str, float], step: int) -> None:
        self._runs[trial.path].log({**scalars, STEP: step})

    def end(self, trial: TrialRun, status: str) -> None:
        run = self._runs[trial.path]
        gifs = trial.gifs()
        if gifs:
            artifact = self.wandb.Artifact(f"{run.id}-videos", type="rlplat-videos")
            for gif in gifs:
                artifact.add_file(str(gif), name=gif.name)
            run.log_artifact(artifact)
        if self.grouped:  # finished now (W&B flushes it); one trial's run takes the run's files
            run.finish(exit_code=0 if status == "FINISHED" else 1)
            del self._runs[trial.path]
        else:
            self._status = status

    def close(self, run_dir: Path, status: str) -> None:
        # W&B runs have no parent: a search's files go to a run of its own in the group (job
        # type "search"); a single trial's to its run, still open (reopened after a resume that
        # found the trial finished).
        if self.grouped:
            run = self._init(path_key(run_dir), run_dir.name, job_type="search")
        elif self._runs:
            [run] = self._runs.values()
            status = self._status if status == "FINISHED" else status
        else:
            trials = sorted(run_dir.glob("trial_*"))
            if len(trials) != 1:
                return
            run = self._init(path_key(trials[0]), run_dir.name)
        artifact = self.wandb.Artifact(f"{run.id}-files", type="rlplat-run")
        for name in RUN_FILES:
            if (run_dir / name).is_file():
                artifact.add_file(str(run_dir / name))
        if (run_dir / "export").is_dir():
            artifact.add_dir(str(run_dir / "export"), name="export")
        run.log_artifact(artifact)
        run.finish(exit_code=0 if status == "FINISHED" else 1)
        self._runs.clear()
