"""TensorBoard event files with short tags and environment steps on the x-axis.

Tune's own TensorBoard logger plots every result key under ``ray/tune/...`` against the training
iteration, because RLlib's new stack reports no ``timesteps_total``. rlplat writes a small set of
readable tags against ``num_env_steps_sampled_lifetime`` instead (and tells Tune not to add its
loggers); result.json and progress.csv keep everything.
"""

from __future__ import annotations

import io
import sys
import threading
from types import TracebackType
from typing import Any

from PIL import Image
from ray.rllib.core import ALL_MODULES, DEFAULT_MODULE_ID
from tensorboardX import SummaryWriter
from tensorboardX.proto.summary_pb2 import Summary
from tensorboardX.summary import hparams

from rlplat.callbacks.observers import Observer, TrialView
from rlplat.experiment.spaces import value_at
from rlplat.metrics import (
    AGENT_RETURNS,
    ENV_STEPS,
    POLICY_RETURNS,
    Throughput,
    finite,
    lookup,
)

# tag -> result path. "return_mean" is over the last N episodes (multi-agent: the team's return,
# summed over agents; policy_return/<policy> and agent_return/<agent> split it); the
# *_iteration/min/max tags cover the episodes that finished in the iteration.
EPISODE_TAGS = {
    "episode/return_mean": "window/episode_return_mean",
    "episode/length_mean": "window/episode_len_mean",
    "episode/return_mean_iteration": "env_runners/episode_return_mean",
    "episode/return_min": "env_runners/episode_return_min",
    "episode/return_max": "env_runners/episode_return_max",
    "eval/return_mean": "evaluation/env_runners/episode_return_mean",
    "eval/return_min": "evaluation/env_runners/episode_return_min",
    "eval/return_max": "evaluation/env_runners/episode_return_max",
    "eval/length_mean": "evaluation/env_runners/episode_len_mean",
}

# RLlib learner stat -> short tag. Stats not listed are written under learner/<stat>.
LEARNER_TAGS = {
    "total_loss": "loss/total",
    "policy_loss": "loss/policy",
    "vf_loss": "loss/value",
    "qf_loss": "loss/q",
    "alpha_loss": "loss/alpha",
    "critic_loss": "loss/critic",
    "actor_loss": "loss/actor",
    "mean_kl_loss": "policy/kl",
    "approx_kl": "policy/approx_kl",
    "clip_fraction": "policy/clip_fraction",
    "entropy": "policy/entropy",
    "curr_entropy_coeff": "policy/entropy_coeff",
    "alpha_value": "policy/alpha",
    "vf_explained_var": "loss/value_explained_var",
    "qf_mean": "q/mean",
    "td_error_mean": "q/td_error_mean",
}


def _learner_tag(stat: str) -> str:
    """The tag of a learner statistic: learning rates per optimizer, the gradients' global norm,
    the short names of LEARNER_TAGS, else ``learner/<stat>``."""
    if stat.endswith("learning_rate"):
        optimizer = stat.removesuffix("learning_rate").rstrip("_")
        return "train/lr" if optimizer in ("", "default_optimizer") else f"train/lr_{optimizer}"
    if stat.startswith("gradients_") and stat.endswith("global_norm"):
        return "train/grad_norm"
    return LEARNER_TAGS.get(stat, f"learner/{stat}")


def short_scalars(result: dict[str, Any], steps_per_s: float | None) -> dict[str, float]:
    """The scalars rlplat plots for one training result, by tag (``eval/*`` only in the results
    of iterations that evaluated: the trial drops RLlib's repeats of an older evaluation)."""
    scalars: dict[str, float] = {}

    def put(tag: str, value: Any) -> None:
        number = finite(value)
        if number is not None:
            scalars[tag] = number

    for tag, path in EPISODE_TAGS.items():
        put(tag, lookup(result, path))
    put("perf/env_steps_per_s", steps_per_s)
    put("perf/iteration", result.get("training_iteration"))
    put("perf/time_total_s", result.get("time_total_s"))

    learners = result.get("learners") or {}
    modules = [m for m in learners if m != ALL_MODULES]
    for module in modules:
        # Multi-agent runs name every policy, even a single shared one.
        suffix = "" if modules == [DEFAULT_MODULE_ID] else f"/{module}"
        stats = learners[module]
        if not isinstance(stats, dict):
            continue
        for stat, value in stats.items():
            put(_learner_tag(stat) + suffix, value)
    for tag, path in (("policy_return", POLICY_RETURNS), ("agent_return", AGENT_RETURNS)):
        for member, value in (lookup(result, path) or {}).items():
            put(f"{tag}/{member}", value)
    for key, value in (result.get("self_play") or {}).items():  # ratings, pool, win rate
        if key == "snapshot_elo":
            for snapshot, rating in value.items():
                put(f"self_play/elo/{snapshot}", rating)
        elif not isinstance(value, dict):
            put(f"self_play/{key}", value)
    return scalars


HPARAM_METRICS = ("episode/return_mean", "episode/length_mean", "eval/return_mean")


def hparam_value(value: Any) -> float | int | str | bool:
    """TensorBoard's HParams view takes numbers, strings and booleans; lists become text."""
    if isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _failed_write_of_tensorboardx(error: BaseException | None, trace: Any) -> bool:
    if not isinstance(error, OSError):
        return False
    frames = trace if isinstance(trace, TracebackType) else None
    while frames is not None:
        if "tensorboardX" in frames.tb_frame.f_code.co_filename:
            return True
        frames = frames.tb_next
    return False


def _quiet_failed_disk_writes() -> None:
    """tensorboardX writes event files from a thread of its own and flushes them once more at
    exit; when the disk fills up or turns read-only both print a traceback (and the thread
    another once its writer is closed) beside the run's own paragraph, which already names the
    failure: the writer's flush after each result (``TensorBoardWriter.trial_result``) raises it
    in the trial. OSErrors raised in tensorboardX's frames there are not printed."""
    if getattr(threading.excepthook, "rlplat_quiet", False):
        return
    thread_hook, unraisable_hook = threading.excepthook, sys.unraisablehook

    def thread_errors(args: Any) -> None:
        if not _failed_write_of_tensorboardx(args.exc_value, args.exc_traceback):
            thread_hook(args)

    def unraisable_errors(unraisable: Any) -> None:
        if not _failed_write_of_tensorboardx(unraisable.exc_value, unraisable.exc_traceback):
            unraisable_hook(unraisable)

    thread_errors.rlplat_quiet = True  # type: ignore[attr-defined]
    threading.excepthook, sys.unraisablehook = thread_errors, unraisable_errors


class TensorBoardWriter(Observer):
    """Writes ``short_scalars`` of each result into the trial directory, x = env steps.

    ``hparams``: the searched keys (paths into the trial's experiment). When a trial ends, its
    values and final scalars go to TensorBoard's HParams view, which compares the trials.
    """

    def __init__(self, flush_secs: int = 5, hparams: list[tuple[str, ...]] | None = None):
        self._flush_secs = flush_secs
        self._hparams = list(hparams or [])
        self._throughput = Throughput()
        self._last_scalars: dict[str, dict[str, float]] = {}
        self._writers: dict[str, SummaryWriter] = {}
        _quiet_failed_disk_writes()

    def trial_started(self, trial: TrialView) -> None:
        if trial.name in self._writers:
            self._writers[trial.name].close()
        trial.staging.mkdir(parents=True, exist_ok=True)
        self._writers[trial.name] = SummaryWriter(str(trial.staging), flush_secs=self._flush_secs)

    def _writer(self, trial: TrialView) -> SummaryWriter:
        if trial.name not in self._writers:
            self.trial_started(trial)
        return self._writers[trial.name]

    def trial_result(self, trial: TrialView, result: dict[str, Any]) -> None:
        steps = finite(lookup(result, ENV_STEPS)) or 0.0
        rate = self._throughput.update(trial.name, result)
        writer = self._writer(trial)
        scalars = short_scalars(result, rate)
        for tag, value in scalars.items():
            writer.add_scalar(tag, value, global_step=int(steps))
        self._last_scalars.setdefault(trial.name, {}).update(scalars)
        writer.flush()

    def write_hparams(self, trial: TrialView) -> None:
        """The trial's searched values and final metrics, for the HParams dashboard."""
        if not self._hparams or trial.name not in self._writers:
            return
        values = {".".join(p): hparam_value(value_at(trial.experiment, p)) for p in self._hparams}
        last = self._last_scalars.get(trial.name, {})
        metrics = {tag: last[tag] for tag in HPARAM_METRICS if tag in last}
        # An open SummaryWriter's event file writer: the writers here are closed only when they
        # leave self._writers.
        file_writer = self._writers[trial.name].file_writer
        for summary in hparams(hparam_dict=values, metric_dict=metrics):
            file_writer.add_summary(summary)

    def add_gif(self, trial: TrialView, tag: str, data: bytes, step: int) -> None:
        """An animated GIF as an image summary: TensorBoard's Images tab plays it."""
        width, height = Image.open(io.BytesIO(data)).size
        image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=data)
        writer = self._writer(trial)
        writer.file_writer.add_summary(
            Summary(value=[Summary.Value(tag=tag, image=image)]), global_step=step
        )
        writer.flush()

    def add_text(self, trial: TrialView, tag: str, text: str, step: int) -> None:
        """A line in TensorBoard's Text tab (a diagnosis, at the env steps it fired)."""
        writer = self._writer(trial)
        writer.add_text(tag, text, global_step=step)
        writer.flush()

    def trial_ended(self, trial: TrialView, outcome: str) -> None:
        self.write_hparams(trial)
        writer = self._writers.pop(trial.name, None)
        if writer is not None:
            writer.close()
        self._last_scalars.pop(trial.name, None)
