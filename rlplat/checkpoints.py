"""Find the checkpoint a path points at: a checkpoint, a trial, a run or an experiment directory.

Layout written by ``rlplat train``::

    <output_dir>/<name>/                  experiment directory (one per experiment name)
      <timestamp>/                        run directory: experiment.yaml, run.json, summary.json
        trial_00000/                      trial directory: result.json, events.out.tfevents.*
          checkpoint_000004/              RLlib checkpoint, experiment.yaml, rlplat_checkpoint.json

``rlplat_checkpoint.json`` records the iteration, env steps and ranking score at which the
checkpoint was taken, and what the score is; it is what "best" means here. rlplat writes it last,
once Tune has finished writing the checkpoint, so only checkpoints that have it count as a trial's
best or last. ``rlplat_evaluation.json``, written with the checkpoint by the trial, holds the greedy
evaluation of the checkpoint's own weights (the default score).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlplat.errors import UserError
from rlplat.metrics import (
    ENV_STEPS,
    EVAL_SCORE,
    REPLAY_STEPS,
    RETURN_MEAN,
    WINDOW_BEFORE_LEARNING,
    finite,
    lookup,
    metric_path,
)
from rlplat.util.atomic import write_atomic
from rlplat.util.options import option

RLLIB_MARKER = "rllib_checkpoint.json"
CHECKPOINT_INFO = "rlplat_checkpoint.json"
EVALUATION = "rlplat_evaluation.json"
# The resolved experiment, in every run, trial and checkpoint directory.
RESOLVED_EXPERIMENT = "experiment.yaml"
# Where rlplat keeps the replay memory (DQN, SAC, QMIX) in a checkpoint's algorithm_state.pkl.
ALGORITHM_STATE = "algorithm_state.pkl"
REPLAY_STATE = "rlplat_replay_memory"
# A run directory's record of how it started (versions, nodes, the driver processes) and, once
# its driver ends, what each trial did.
RUN_INFO = "run.json"
SUMMARY = "summary.json"
# A trial directory's results, one JSON line per iteration (Tune's JSON logger).
RESULTS_JSON = "result.json"
# Where an RLlib checkpoint keeps the learner (weights and optimizer) and the RLModules in it.
LEARNER = "learner_group/learner"
RL_MODULE = f"{LEARNER}/rl_module"


@dataclass(frozen=True)
class GreedyEvaluation:
    """Greedy episodes (explore off) of the weights a checkpoint holds, played by RLlib's
    evaluation at the checkpoint's iteration."""

    iteration: int
    episodes: int
    return_mean: float | None

    @classmethod
    def from_result(cls, evaluation: dict[str, Any], iteration: int) -> GreedyEvaluation:
        """From RLlib's ``evaluation`` results of one evaluation."""
        runners = evaluation.get("env_runners") or {}
        return cls(
            iteration=iteration,
            episodes=int(finite(runners.get("num_episodes")) or 0),
            return_mean=finite(runners.get("episode_return_mean")),
        )

    @classmethod
    def read(cls, checkpoint: Path) -> GreedyEvaluation | None:
        try:
            data = json.loads((checkpoint / EVALUATION).read_text())
            return cls(**{k: data[k] for k in cls.__dataclass_fields__})
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, checkpoint: Path) -> None:
        write_atomic(checkpoint / EVALUATION, json.dumps(asdict(self), indent=2) + "\n")


@dataclass(frozen=True)
class CheckpointInfo:
    """What the run reported when the checkpoint was written, and what its score means."""

    iteration: int | None = None
    env_steps: int | None = None
    score_metric: str | None = None
    score: float | None = None
    mode: str = "max"
    scored_by: str | None = None  # what the score is, in words (printed by eval/export/serve)
    episode_return_mean: float | None = None
    game_score_mean: float | None = None  # envs that report whole games (the atari preset)
    iteration_episode_return_mean: float | None = None
    evaluation_episodes: int | None = None
    evaluation_return_mean: float | None = None
    replay_env_steps: int | None = None  # off-policy: env steps in the stored replay memory
    # Re-scored at the trial's end (checkpoint.rescore): the score's 95% interval half-width,
    # and the score the checkpoint had during training.
    score_interval: float | None = None
    training_score: float | None = None
    rescore_episodes: int | None = None  # the greedy episodes the re-score played

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


def checkpoints_in(trial: Path) -> list[Path]:
    return sorted(p for p in trial.glob("checkpoint_*") if p.is_dir() and is_complete(p))


def trials_in(run: Path) -> list[Path]:
    return sorted(p for p in run.iterdir() if p.is_dir() and checkpoints_in(p))


def _runs_in(experiment: Path) -> list[Path]:
    return sorted(p for p in experiment.iterdir() if p.is_dir() and trials_in(p))


def _rank_key(info: CheckpointInfo | None) -> float:
    """Higher is better; checkpoints without a recorded score rank last."""
    if info is None or info.score is None or not math.isfinite(info.score):
        return -math.inf
    return info.score if info.mode == "max" else -info.score


def _pick_in_trial(trial: Path, last: bool) -> PickedCheckpoint:
    checkpoints = checkpoints_in(trial)
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
    scored_by = f": {info.scored_by}" if info.scored_by else ""
    return PickedCheckpoint(
        best,
        f"best checkpoint of {trial.name} by {info.score_metric} = {info.score:.2f}{scored_by} "
        f"(iteration {info.iteration}, {len(checkpoints)} checkpoint(s) kept)",
        info,
    )


def best_and_last(trial: Path) -> tuple[Path | None, Path | None]:
    """A trial directory's best and newest checkpoints, as ``rlplat eval`` picks them."""
    if not checkpoints_in(trial):
        return None, None
    return _pick_in_trial(trial, last=False).path, _pick_in_trial(trial, last=True).path


def _pick_in_run(run: Path, last: bool) -> PickedCheckpoint:
    picks = [_pick_in_trial(trial, last=False) for trial in trials_in(run)]
    best = max(picks, key=lambda p: _rank_key(p.info))
    if last:
        best = _pick_in_trial(best.path.parent, last=True)
    if len(picks) > 1:
        return PickedCheckpoint(
            best.path, f"{best.why}, the best of {len(picks)} trials", best.info
        )
    return best


def last_option() -> Any:
    """The ``--last`` option of the commands that take a checkpoint, a trial or a run directory:
    ``find_checkpoint(path, last=...)``."""
    return option(False, help="Newest checkpoint of a trial instead of the best.")


def existing(path: Path) -> Path:
    """``path`` made absolute; UserError when nothing is there. Cheap: commands check their
    path with it before loading RLlib (seconds)."""
    path = path.expanduser().resolve()
    if not path.exists():
        raise UserError(
            f"{path} does not exist. Give a checkpoint, trial, run or experiment directory."
        )
    return path


def find_checkpoint(path: Path, *, last: bool = False) -> PickedCheckpoint:
    """The checkpoint ``path`` designates, and a sentence saying why it was picked.

    A trial directory yields its best checkpoint by the experiment's ranking score (``last``: the
    newest); a run directory its best trial's; an experiment directory its newest run's.
    """
    path = existing(path)
    if not path.is_dir():
        raise UserError(
            f"{path} is a file, not a checkpoint. Give a checkpoint directory (one containing "
            f"{RLLIB_MARKER}) or the trial/run directory that holds it."
        )
    if is_checkpoint(path):
        return PickedCheckpoint(path, "the checkpoint given", CheckpointInfo.read(path))
    if checkpoints_in(path):
        return _pick_in_trial(path, last)
    if trials_in(path):
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


def describe_score(info: CheckpointInfo | None) -> str | None:
    """``eval_episode_return_mean -983.26 (greedy return over 5 episodes)``; None unscored."""
    if info is None or info.score is None:
        return None
    what = f" ({info.scored_by})" if info.scored_by else ""
    return f"{info.score_metric} {info.score:.2f}{what}"


def describe_checkpoint(checkpoint: Path) -> str:
    """``checkpoint_000004 (iteration 5, 10,045 env steps)``, as far as it was recorded."""
    info = CheckpointInfo.read(checkpoint)
    if info is None or info.iteration is None:
        return checkpoint.name
    steps = f", {info.env_steps:,} env steps" if info.env_steps is not None else ""
    return f"{checkpoint.name} (iteration {info.iteration}{steps})"


def checkpoint_info_from_result(
    result: dict[str, Any],
    score_metric: str,
    mode: str,
    evaluation: GreedyEvaluation | None = None,
) -> CheckpointInfo:
    """The ``CheckpointInfo`` for a checkpoint taken right after ``result``, whose weights
    ``evaluation`` played (if they were evaluated)."""
    steps = finite(lookup(result, ENV_STEPS))
    replay = finite(lookup(result, REPLAY_STEPS))
    score, scored_by = _score(result, score_metric, evaluation)
    return CheckpointInfo(
        iteration=result.get("training_iteration"),
        env_steps=int(steps) if steps is not None else None,
        score_metric=score_metric,
        score=score,
        mode=mode,
        scored_by=scored_by,
        episode_return_mean=finite(lookup(result, RETURN_MEAN)),
        game_score_mean=finite(lookup(result, metric_path("game_score_mean"))),
        iteration_episode_return_mean=finite(
            lookup(result, metric_path("iteration_episode_return_mean"))
        ),
        evaluation_episodes=evaluation.episodes if evaluation else None,
        evaluation_return_mean=evaluation.return_mean if evaluation else None,
        replay_env_steps=int(replay) if replay is not None else None,
    )


def _score(
    result: dict[str, Any], score_metric: str, evaluation: GreedyEvaluation | None
) -> tuple[float | None, str]:
    """A checkpoint's score and what it is. The greedy evaluation scores only the weights it
    played; a training-window score is withheld while the window holds episodes played before
    the first update (a warm-up checkpoint is never best)."""
    if score_metric == EVAL_SCORE:
        if evaluation is None or evaluation.return_mean is None:
            return None, "not evaluated"
        return evaluation.return_mean, f"greedy return over {evaluation.episodes} episodes"
    path = metric_path(score_metric)
    if path.startswith("window/"):
        before = int(finite(lookup(result, WINDOW_BEFORE_LEARNING)) or 0)
        if before:
            return None, f"unscored: {before} episode(s) in the window precede learning"
        episodes = finite(lookup(result, "window/num_episodes"))
        size = f" over the last {int(episodes)} episodes" if episodes else ""
        return finite(lookup(result, path)), f"training window{size}"
    return finite(lookup(result, path)), f"the run's {score_metric}"


def obsolete_checkpoints(trial: Path, keep: int | None) -> list[Path]:
    """The trial's checkpoints beyond the ``keep`` best by score; the newest, which a resumed run
    continues from, is always kept."""
    checkpoints = checkpoints_in(trial)
    if keep is None or len(checkpoints) <= keep:
        return []
    infos = {c: CheckpointInfo.read(c) for c in checkpoints}
    newest = max(checkpoints, key=lambda c: ((infos[c] and infos[c].iteration) or 0, c.name))
    ranked = sorted(checkpoints, key=lambda c: (_rank_key(infos[c]), c.name), reverse=True)
    kept = {*ranked[:keep], newest}
    return [c for c in checkpoints if c not in kept]


def read_results(trial_dir: Path) -> list[dict[str, Any]]:
    """Every result the trial reported, oldest first. A line a crash or a full disk left broken
    (cut off, bytes that are not UTF-8, JSON that is not an object) is skipped."""
    results = []
    try:
        lines = (trial_dir / RESULTS_JSON).read_text(errors="replace").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            results.append(row)
    return results
