"""Find the checkpoint a path points at: a checkpoint, a trial, a run or an experiment directory.

Layout written by ``rlplat train``::

    <output_dir>/<name>/                  experiment directory (one per experiment name)
      <timestamp>/                        run directory: experiment.yaml, run.json, summary.json
        trial_00000/                      trial directory: result.json, events.out.tfevents.*
          checkpoint_000004/              RLlib checkpoint, experiment.yaml, rlplat_checkpoint.json

``rlplat_checkpoint.json`` records the iteration, env steps and ranking score at which the
checkpoint was taken; it is what "best" means here. rlplat writes it last, once Tune has
finished writing the checkpoint, so only checkpoints that have it count as a trial's best or last.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlplat.atomic import write_atomic
from rlplat.config.yaml_io import dump_yaml
from rlplat.errors import UserError
from rlplat.metrics import ENV_STEPS, REPLAY_STEPS, RETURN_MEAN, finite, lookup, metric_path
from rlplat.run_dir import RESOLVED_EXPERIMENT

RLLIB_MARKER = "rllib_checkpoint.json"
CHECKPOINT_INFO = "rlplat_checkpoint.json"


@dataclass(frozen=True)
class CheckpointInfo:
    """What the run reported when the checkpoint was written."""

    iteration: int | None = None
    env_steps: int | None = None
    score_metric: str | None = None
    score: float | None = None
    mode: str = "max"
    episode_return_mean: float | None = None
    iteration_episode_return_mean: float | None = None
    replay_env_steps: int | None = None  # off-policy: env steps in the stored replay memory

    @classmethod
    def read(cls, checkpoint: Path) -> CheckpointInfo | None:
        try:
            data = json.loads((checkpoint / CHECKPOINT_INFO).read_text())
        except (OSError, ValueError):
            return None
        known = {k: data.get(k) for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)

    def write(self, checkpoint: Path) -> None:
        write_atomic(checkpoint / CHECKPOINT_INFO, json.dumps(asdict(self), indent=2) + "\n")


@dataclass(frozen=True)
class PickedCheckpoint:
    path: Path
    why: str
    info: CheckpointInfo | None

    @property
    def experiment_file(self) -> Path | None:
        """The resolved experiment stored with the checkpoint, else its trial's, else its run's."""
        for candidate in (
            self.path / RESOLVED_EXPERIMENT,
            self.path.parent / RESOLVED_EXPERIMENT,
            self.path.parent.parent / RESOLVED_EXPERIMENT,
        ):
            if candidate.is_file():
                return candidate
        return None


def is_checkpoint(path: Path) -> bool:
    return (path / RLLIB_MARKER).is_file()


def is_complete(path: Path) -> bool:
    """A checkpoint rlplat finished recording (a half-written one lacks ``CHECKPOINT_INFO``)."""
    return is_checkpoint(path) and (path / CHECKPOINT_INFO).is_file()


def _checkpoints_in(trial: Path) -> list[Path]:
    return sorted(p for p in trial.glob("checkpoint_*") if p.is_dir() and is_complete(p))


def _trials_in(run: Path) -> list[Path]:
    return sorted(p for p in run.iterdir() if p.is_dir() and _checkpoints_in(p))


def _runs_in(experiment: Path) -> list[Path]:
    return sorted(p for p in experiment.iterdir() if p.is_dir() and _trials_in(p))


def _rank_key(info: CheckpointInfo | None) -> float:
    """Higher is better; checkpoints without a recorded score rank last."""
    if info is None or info.score is None or not math.isfinite(info.score):
        return -math.inf
    return info.score if info.mode == "max" else -info.score


def _pick_in_trial(trial: Path, last: bool) -> PickedCheckpoint:
    checkpoints = _checkpoints_in(trial)
    infos = {c: CheckpointInfo.read(c) for c in checkpoints}
    newest = max(checkpoints, key=lambda c: ((infos[c] and infos[c].iteration) or 0, c.name))
    if last:
        return PickedCheckpoint(newest, f"newest checkpoint of {trial.name}", infos[newest])
    best = max(checkpoints, key=lambda c: (_rank_key(infos[c]), c.name))
    info = infos[best]
    if _rank_key(info) == -math.inf:
        return PickedCheckpoint(
            newest, f"newest checkpoint of {trial.name} (no scores recorded)", infos[newest]
        )
    return PickedCheckpoint(
        best,
        f"best checkpoint of {trial.name} by {info.score_metric} = {info.score:.2f} "
        f"(iteration {info.iteration}, {len(checkpoints)} checkpoint(s) kept)",
        info,
    )


def best_and_last(trial: Path) -> tuple[Path | None, Path | None]:
    """A trial directory's best and newest checkpoints, as ``rlplat eval`` picks them."""
    if not _checkpoints_in(trial):
        return None, None
    return _pick_in_trial(trial, last=False).path, _pick_in_trial(trial, last=True).path


def _pick_in_run(run: Path, last: bool) -> PickedCheckpoint:
    picks = [_pick_in_trial(trial, last=False) for trial in _trials_in(run)]
    best = max(picks, key=lambda p: _rank_key(p.info))
    if last:
        best = _pick_in_trial(best.path.parent, last=True)
    if len(picks) > 1:
        return PickedCheckpoint(
            best.path, f"{best.why}, the best of {len(picks)} trials", best.info
        )
    return best


def find_checkpoint(path: Path, *, last: bool = False) -> PickedCheckpoint:
    """The checkpoint ``path`` designates, and a sentence saying why it was picked.

    A trial directory yields its best checkpoint by the experiment's ranking score (``last``: the
    newest); a run directory its best trial's; an experiment directory its newest run's.
    """
    path = path.expanduser().resolve()
    if not path.exists():
        raise UserError(
            f"{path} does not exist. Give a checkpoint, trial, run or experiment directory."
        )
    if not path.is_dir():
        raise UserError(
            f"{path} is a file, not a checkpoint. Give a checkpoint directory (one containing "
            f"{RLLIB_MARKER}) or the trial/run directory that holds it."
        )
    if is_checkpoint(path):
        return PickedCheckpoint(path, "the checkpoint given", CheckpointInfo.read(path))
    if _checkpoints_in(path):
        return _pick_in_trial(path, last)
    if _trials_in(path):
        return _pick_in_run(path, last)
    runs = _runs_in(path)
    if runs:
        picked = _pick_in_run(runs[-1], last)
        return PickedCheckpoint(
            picked.path, f"newest run {runs[-1].name}: {picked.why}", picked.info
        )
    raise UserError(
        f"no checkpoint found in {path}. Expected a checkpoint directory (containing "
        f"{RLLIB_MARKER}), a trial directory (checkpoint_*/), a run directory (trial_*/) or an "
        "experiment directory (<timestamp>/); a run stopped before its first checkpoint has none."
    )


def describe_checkpoint(checkpoint: Path) -> str:
    """``checkpoint_000004 (iteration 5, 10,045 env steps)``, as far as it was recorded."""
    info = CheckpointInfo.read(checkpoint)
    if info is None or info.iteration is None:
        return checkpoint.name
    steps = f", {info.env_steps:,} env steps" if info.env_steps is not None else ""
    return f"{checkpoint.name} (iteration {info.iteration}{steps})"


def checkpoint_info_from_result(
    result: dict[str, Any], score_metric: str, mode: str
) -> CheckpointInfo:
    """The ``CheckpointInfo`` for a checkpoint taken right after ``result``."""
    steps = finite(lookup(result, ENV_STEPS))
    replay = finite(lookup(result, REPLAY_STEPS))
    return CheckpointInfo(
        iteration=result.get("training_iteration"),
        env_steps=int(steps) if steps is not None else None,
        score_metric=score_metric,
        score=finite(lookup(result, metric_path(score_metric))),
        mode=mode,
        episode_return_mean=finite(lookup(result, RETURN_MEAN)),
        iteration_episode_return_mean=finite(
            lookup(result, metric_path("iteration_episode_return_mean"))
        ),
        replay_env_steps=int(replay) if replay is not None else None,
    )


def obsolete_checkpoints(trial: Path, keep: int | None) -> list[Path]:
    """The trial's checkpoints beyond the ``keep`` best by score; the newest, which a resumed run
    continues from, is always kept."""
    checkpoints = _checkpoints_in(trial)
    if keep is None or len(checkpoints) <= keep:
        return []
    infos = {c: CheckpointInfo.read(c) for c in checkpoints}
    newest = max(checkpoints, key=lambda c: ((infos[c] and infos[c].iteration) or 0, c.name))
    ranked = sorted(checkpoints, key=lambda c: (_rank_key(infos[c]), c.name), reverse=True)
    kept = {*ranked[:keep], newest}
    return [c for c in checkpoints if c not in kept]


def prune_checkpoints(run_dir: Path, keep: int | None) -> None:
    """Delete every trial's obsolete checkpoints once the run has stopped, except the ones Tune's
    saved state resumes from (older than the newest when a full disk stopped it saving)."""
    import shutil

    points = resume_points(run_dir)
    if points is None:
        return  # which checkpoint a resume needs is unknown: keep them all
    for trial in _trials_in(run_dir):
        for checkpoint in obsolete_checkpoints(trial, keep):
            if checkpoint not in points.values():
                shutil.rmtree(checkpoint, ignore_errors=True)


def newest_state(run_dir: Path) -> Path | None:
    """The experiment state file Tune restores a run from: the newest by name (one per session)."""
    return max(run_dir.glob("experiment_state-*.json"), default=None)


def resume_points(run_dir: Path) -> dict[str, Path] | None:
    """Each trial's checkpoint that ``--resume`` restores: the latest one in Tune's newest saved
    state in the run directory (by trial directory name; a trial without one starts over).
    None when that state cannot be read."""
    from ray.tune.experiment.trial import _TrainingRunMetadata

    state = newest_state(run_dir)
    if state is None:
        return {}
    points = {}
    try:
        for _, metadata in json.loads(state.read_text())["trial_data"]:
            manager = _TrainingRunMetadata.from_json_state(metadata).checkpoint_manager
            if manager.latest_checkpoint_result is not None:
                path = Path(manager.latest_checkpoint_result.checkpoint.path)
                points[path.parent.name] = path
    except Exception:  # noqa: BLE001 - a damaged or foreign state: nothing is known
        return None
    return points


def checkpoint_recorder(
    score_metric: str, mode: str, keep: int | None, prune_while_running: bool = True
):  # -> ray.tune.Callback
    """A Tune callback that completes every checkpoint directory Tune writes, and keeps the
    ``keep`` best of each trial (Tune itself is told to keep them all).

    It adds the trial's experiment (a checkpoint copied away from its run still says how to
    rebuild its environment, with the values a search chose) and ``rlplat_checkpoint.json`` (what
    the run reported at that point, used to pick the best checkpoint and to compare with
    ``rlplat eval``).

    Why rlplat deletes checkpoints rather than Tune: Tune deletes a trial's older checkpoint as
    soon as a newer one is written, but saves the experiment state (which checkpoint each trial
    resumes from) only every few seconds, and a full disk can stop it saving at all. A run killed
    in between resumes from a deleted checkpoint and the trial fails. Here a checkpoint is deleted
    only once the state saved in the run directory resumes its trial from a newer one (states are
    saved in order, so no later state goes back to it). Population-based training restores trials
    from other trials' checkpoints long after they were written: ``prune_while_running=False``
    keeps every checkpoint until the run ends (``prune_checkpoints``).
    """
    import shutil

    from ray.tune import Callback

    from rlplat.trainable import trial_experiment

    class RecordCheckpoints(Callback):
        def __init__(self) -> None:
            self._obsolete: dict[Path, Any] = {}  # checkpoint -> its Tune trial
            self._state_seen: tuple[Path, float] | None = None

        def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info):
            target = Path(checkpoint.path)
            if not target.is_dir():
                return
            write_atomic(target / RESOLVED_EXPERIMENT, dump_yaml(trial_experiment(trial.config)))
            checkpoint_info_from_result(trial.last_result or {}, score_metric, mode).write(target)
            if prune_while_running:
                for old in obsolete_checkpoints(target.parent, keep):
                    self._obsolete[old] = trial

        def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
            if not self._obsolete:
                return
            run_dir = next(iter(self._obsolete)).parent.parent
            newest = newest_state(run_dir)
            state = (newest, newest.stat().st_mtime) if newest else None
            if state is None or state == self._state_seen:
                return
            self._state_seen = state
            points = resume_points(run_dir) or {}
            for checkpoint, trial in list(self._obsolete.items()):
                point = points.get(checkpoint.parent.name)
                if point is not None and point.name > checkpoint.name:
                    shutil.rmtree(checkpoint, ignore_errors=True)
                    _forget(trial, checkpoint)
                    del self._obsolete[checkpoint]

    return RecordCheckpoints()


def _forget(trial: Any, checkpoint: Path) -> None:
    """Drop a deleted checkpoint from Tune's list of the trial's checkpoints. Told to keep them
    all, Tune would keep every one, with the full result it was taken at (~40 KB each), in the
    experiment state it saves every second: a state file growing by megabytes on long runs."""
    manager = trial.run_metadata.checkpoint_manager
    kept = [r for r in manager._checkpoint_results if Path(r.checkpoint.path) != checkpoint]
    manager._checkpoint_results = kept
    trial.run_metadata.invalidate_cache()
