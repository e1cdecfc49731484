"""Stacked seeds (``stacked: true``): the seeds of ``seeds`` trained as stacked models
(``rlplat.algorithms.stacked``), split over the machine's CPUs in parts (the first in the
command's process, ``rlplat.run.stack_parts``), and each seed is still a trial.

Each seed gets the trial directory a separate seed's trial has (``trial_0000i``: params.json,
result.json, progress.csv, TensorBoard files, checkpoints of its policy), so ``report``, ``runs``,
``doctor``, ``eval``, ``export`` and ``serve`` read a stacked run as they read ``--seeds N``.
Each iteration's result is split per seed (``seed_result``) and each seed's stop condition judged
on its own: a seed that reached it ends its trial (with its checkpoint at the end) while the stack
trains on, until every seed has. A seed whose loss became non-finite stops alone (its trial
fails, naming it). The stack's own checkpoints (``stack/checkpoint_NNNNNN/part_<k>``, written
with every round of seed checkpoints) are what ``--resume`` continues from.
"""

from __future__ import annotations

import json
import shutil
import traceback
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from rlplat.callbacks.checkpoints import complete_checkpoint
from rlplat.callbacks.history import trim_trial_history
from rlplat.callbacks.interrupt import LoopStopSignals, StopNow
from rlplat.callbacks.observers import FAILED, FINISHED, Observer, ResumePoint, TrialView
from rlplat.checkpoints import RLLIB_MARKER, obsolete_checkpoints, read_results
from rlplat.experiment.load import trial_experiment
from rlplat.metrics import ENV_STEPS, ITERATION, STACKED_PROCESS_SEEDS, TIME_TOTAL
from rlplat.prepare import PreparedRun, trial_config
from rlplat.prepare.run_spec import trial_resources
from rlplat.prepare.stacked import stack_processes
from rlplat.run.loop import (
    ERROR_REPORT,
    LoopSettings,
    TrialLog,
    next_checkpoint_dir,
    own_streams,
    reached,
    remove_unused_logdir,
    write_params,
)
from rlplat.run.seed_results import seed_result, seed_stopped
from rlplat.run.stack_parts import StackPart, gather, split_seeds
from rlplat.run.summary import TrialOutcome
from rlplat.run.trials import trainable_for
from rlplat.util.atomic import remove_partial_files, write_atomic
from rlplat.util.generators import GeneratorStates

STACK = "stack"  # <run dir>/stack: the stack's checkpoints, which --resume continues from
STACK_POINT = "stack_point.json"  # in a stack checkpoint, written last: iteration, steps, time
PARTS = "parts"  # in STACK_POINT: each part's seed indices
PART = "part_"  # a stack checkpoint's part_<k>: the checkpoint of the stack's k-th part


@dataclass
class SeedTrial:
    """One seed of the stack as a trial: its directory, experiment and how it stands."""

    index: int
    path: Path
    experiment: dict[str, Any]
    log: TrialLog
    last_result: dict[str, Any] = field(default_factory=dict)
    status: str = "not finished"  # then "finished" or "error"
    error: str | None = None

    @property
    def running(self) -> bool:
        return self.status == "not finished"

    def view(self, point: ResumePoint | None = None) -> TrialView:
        return TrialView(
            name=self.path.name,
            path=self.path,
            staging=self.path,
            experiment=self.experiment,
            last_result=self.last_result,
            resumes_from=point,
        )

    def outcome(self) -> TrialOutcome:
        return TrialOutcome(
            path=self.path,
            status=self.status,
            last_result=self.last_result,
            experiment=trial_experiment(self.experiment),
            error=self.error,
        )


class StackedTrialsLoop:
    """Train the run's seeds as stacked algorithms (this process's and its actors') until every
    seed's trial has ended, a signal or an error; each seed's trial written as
    ``SingleTrialLoop`` writes one. ``observers`` are told of each seed's trial as of a trial of
    a run of several seeds."""

    def __init__(
        self,
        run: PreparedRun,
        run_dir: Path,
        settings: LoopSettings,
        observers: list[Observer],
        console: Console,
    ):
        self.run = run
        self.settings = settings
        self.stack_dir = run_dir / STACK
        # Each seed's trial is that seed's run, as a separate trial of --seeds would be.
        space = {key: value for key, value in run.search.param_space.items() if key != "stacked"}
        self.trials = []
        for index, seed in enumerate(run.experiment.seed_list() or []):
            path = run_dir / f"trial_{index:05d}"
            self.trials.append(SeedTrial(index, path, {**space, "seed": seed}, TrialLog(path)))
        self.observers = observers
        self.stops = LoopStopSignals(console, settings.watchdog_s, STACK)

    def train(self, *, resuming: bool = False, retry_errored: bool = False) -> list[TrialOutcome]:
        """The seeds from their start, or (``resuming``) from the stack's newest checkpoint;
        seeds whose trials had ended stay as they ended (failed ones continue with
        ``retry_errored``)."""
        point, earlier_s = self._resume_point() if resuming else (None, 0.0)
        for trial in self.trials:
            trial.path.mkdir(parents=True, exist_ok=True)
            if resuming:
                self._continue(trial, point, retry_errored)
            write_params(trial.path, trial.experiment)
        for observer in self.observers:
            observer.run_started()
        if not any(trial.running for trial in self.trials):
            return [trial.outcome() for trial in self.trials]
        self.parts: list[StackPart] = []
        at_once = False
        with self.stops.installed():
            try:
                if point is not None:
                    self.stops.watchdog.checkpointed(STACK)
                self._build(point, earlier_s)
                for trial in self.trials:
                    if trial.running:
                        for observer in self.observers:
                            observer.trial_started(trial.view(self._seed_point(trial, point)))
                self._iterate(earlier_s)
            except StopNow:
                at_once = True  # left as it is, as SingleTrialLoop leaves its algorithm
            except Exception as exc:  # noqa: BLE001 - the stack failed: every live seed with it
                error = "".join(traceback.format_exception(exc))
                for trial in self.trials:
                    if trial.running:
                        self._fail(trial, error)
            finally:
                self.stops.settle()
            for part in self.parts if not at_once else []:
                with suppress(Exception, StopNow), own_streams(*self._streams):
                    part.stop()
        return [trial.outcome() for trial in self.trials]

    # -- resuming

    def _resume_point(self) -> tuple[ResumePoint | None, float]:
        """The stack's newest complete checkpoint and the training seconds before it."""
        if self.stack_dir.is_dir():
            remove_partial_files(self.stack_dir)
        for path in sorted(self.stack_dir.glob("checkpoint_*"), reverse=True):
            with suppress(OSError, ValueError, KeyError):
                saved = json.loads((path / STACK_POINT).read_text())
                point = ResumePoint(path, int(saved[ITERATION]), int(saved[ENV_STEPS]))
                return point, float(saved[TIME_TOTAL])
        return None, 0.0

    def _continue(self, trial: SeedTrial, point: ResumePoint | None, retry: bool) -> None:
        """A seed's trial as the resumed run starts it: one that had finished (its last result
        said done) or failed (unless ``retry``) stays so; any other is cut back to the stack's
        checkpoint."""
        results = read_results(trial.path)
        report = trial.path / ERROR_REPORT
        if results and results[-1].get("done"):
            trial.status, trial.last_result = "finished", results[-1]
            return
        if report.is_file() and not retry:
            trial.status, trial.error = "error", report.read_text()
            trial.last_result = results[-1] if results else {}
            return
        report.unlink(missing_ok=True)
        iteration, steps = (point.iteration, point.env_steps) if point else (0, 0)
        remove_partial_files(trial.path)
        trim_trial_history(trial.path, iteration, steps)
        rows = [row for row in read_results(trial.path) if row.get(ITERATION) == iteration]
        trial.last_result = rows[-1] if rows else {}

    def _seed_point(self, trial: SeedTrial, point: ResumePoint | None) -> ResumePoint | None:
        """Where a seed's trial continues from: its checkpoint of the stack's iteration."""
        if point is None:
            return None
        own = trial.path / point.checkpoint.name
        return ResumePoint(own, point.iteration, point.env_steps) if own.is_dir() else None

    # -- training

    def _build(self, point: ResumePoint | None, earlier_s: float) -> None:
        """The stack's parts (``stack_parts``), restored from ``point`` when resuming."""
        threads = max(1, int(trial_resources(self.run).head_cpus))
        self._streams = (GeneratorStates.capture(), threads)
        cls = trainable_for(self.run.experiment.algorithm, stacked=True)
        seeds = self.run.experiment.seed_list() or []
        processes = stack_processes(self.run.experiment, self._nodes())
        split = self._saved_split(point) or split_seeds(len(seeds), processes)
        config = trial_config(self.run)
        self.parts = []
        with own_streams(*self._streams):
            # The part's stack starts its own envs and draws its learner's shuffles from its
            # first seed; the others start in actors while the first builds here.
            for number, indices in sorted(enumerate(split), key=lambda item: item[0] == 0):
                part_seeds = [seeds[index] for index in indices]
                part_config = {**config, "seed": part_seeds[0], "seeds": part_seeds}
                self.parts.append(StackPart.start(cls, part_config, indices, remote=number > 0))
            self.parts.sort(key=lambda part: part.indices[0])
            local = self.parts[0].algo
            local.trial_dir, local.earlier_training_s = self.stack_dir, earlier_s
            remove_unused_logdir(local)
            if point is not None:
                gather([part.call("restore", str(point.checkpoint / f"{PART}{number}"))
                        for number, part in enumerate(self.parts)])  # fmt: skip

    def _nodes(self) -> list[Any]:
        return self.run.plan.nodes if self.run.plan else []

    def _saved_split(self, point: ResumePoint | None) -> list[list[int]] | None:
        """The parts a resumed stack's checkpoint was written by (a part's checkpoint holds
        its own seeds)."""
        if point is None:
            return None
        return json.loads((point.checkpoint / STACK_POINT).read_text())[PARTS]

    def _train_parts(self) -> list[dict[str, Any]]:
        """One iteration of every part at once: each part's result."""
        pending = [part.call("train") if part.remote else None for part in self.parts]
        with own_streams(*self._streams):
            pending[0] = self.parts[0].algo.train()
        return gather(pending)

    def _iterate(self, earlier_s: float) -> None:
        """Train until every seed's trial has ended or a stop was asked for."""
        settings = self.settings
        where = {index: (part, local) for part in self.parts
                 for local, index in enumerate(part.indices)}  # fmt: skip
        while any(trial.running for trial in self.trials):
            with self.stops.iteration():
                results = self._train_parts()
            for result in results:
                result[TIME_TOTAL] = float(result.get(TIME_TOTAL) or 0.0) + earlier_s
            self.stops.watchdog.result(STACK, results[0])
            ended = []
            for trial in [trial for trial in self.trials if trial.running]:
                part, local = where[trial.index]
                one = seed_result(results[self.parts.index(part)], local)
                group, key = STACKED_PROCESS_SEEDS.split("/")
                one[group] = {key: len(part.indices)}
                done = reached(one, settings.stop)
                if done:
                    one["done"] = True
                    ended.append(trial)
                trial.last_result = one
                for observer in [trial.log, *self.observers]:
                    observer.trial_result(trial.view(), one)
                if seed_stopped(one):
                    self._fail(trial, _stopped_seed(trial, one))
            iteration = int(results[0].get(ITERATION) or 0)
            every = settings.checkpoint_every
            due = bool(every) and iteration % every == 0
            if due or self.stops.requested:
                self._checkpoint(results[0], [t for t in self.trials if t.running])
            elif ended and settings.checkpoint_at_end:
                self._checkpoint(results[0], ended)
            for trial in ended:
                trial.status = "finished"
                for observer in self.observers:
                    observer.trial_ended(trial.view(), FINISHED)
            if self.stops.requested:
                return

    def _fail(self, trial: SeedTrial, error: str) -> None:
        trial.status, trial.error = "error", error
        with suppress(OSError):  # a full disk: the summary still has the error
            (trial.path / ERROR_REPORT).write_text(error)
        for observer in self.observers:
            observer.trial_ended(trial.view(), FAILED)

    def _checkpoint(self, result: dict[str, Any], trials: list[SeedTrial]) -> None:
        """Each of ``trials``' seeds as a policy checkpoint in its trial (completed with
        rlplat's files), and every part of the stack for ``--resume``; then older checkpoints
        beyond ``checkpoint.keep`` go (the stack keeps its newest only)."""
        settings = self.settings
        stack = next_checkpoint_dir(self.stack_dir)
        saving = []
        with own_streams(*self._streams):
            for number, part in enumerate(self.parts):
                seeds = [(part.indices.index(trial.index), trial.path / stack.name)
                         for trial in trials if trial.index in part.indices]  # fmt: skip
                saving.append(part.save(stack / f"{PART}{number}", seeds))
            gather(saving)
        marker = json.loads((stack / f"{PART}0" / RLLIB_MARKER).read_text())
        for trial in trials:
            path = trial.path / stack.name
            # RLlib's versions as the stack's checkpoint has them; no algorithm state.
            versions = {k: v for k, v in marker.items() if not k.endswith("_file")}
            write_atomic(path / RLLIB_MARKER, json.dumps(versions))
            complete_checkpoint(
                path, trial.experiment, trial.last_result, settings.score_metric, settings.mode
            )
        point = {key: result.get(key) for key in (ITERATION, TIME_TOTAL)}
        point[ENV_STEPS] = (result.get("env_runners") or {}).get(ENV_STEPS, 0)
        point[PARTS] = [part.indices for part in self.parts]
        write_atomic(stack / STACK_POINT, json.dumps(point))
        self.stops.watchdog.checkpointed(STACK)
        for trial in trials:
            for observer in self.observers:
                observer.trial_checkpointed(trial.view(), trial.path / stack.name)
            for old in obsolete_checkpoints(trial.path, settings.keep):
                shutil.rmtree(old, ignore_errors=True)
        for old in sorted(self.stack_dir.glob("checkpoint_*"))[:-1]:
            shutil.rmtree(old, ignore_errors=True)


def _stopped_seed(trial: SeedTrial, result: dict[str, Any]) -> str:
    seed = trial.experiment.get("seed")
    return (
        f"seed {seed} ({trial.path.name}): its loss or gradient became NaN or infinite at "
        f"iteration {result.get(ITERATION)}; its parameters stay at their last finite values "
        "and the stack's other seeds trained on. Lower training.lr, clip gradients "
        "(training.grad_clip), or check the env for NaN or infinite observations and rewards."
    )
