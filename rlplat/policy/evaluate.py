"""``rlplat eval``: restore a policy from a checkpoint, roll it out, report and render.

No Ray cluster is started and no Algorithm is built: the policy comes from
:class:`rlplat.policy.restore.Policy` and the environment from the resolved experiment stored
with the run, built by the same :class:`rlplat.environments.make.EnvCreator` training used.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from rich.table import Table

from rlplat.checkpoints import find_checkpoint
from rlplat.datasets.dataset import (
    DatasetInfo,
    DatasetWriter,
    actions_normalized,
    check_recordable,
    episode_steps,
)
from rlplat.environments.make import build_env, render_modes
from rlplat.errors import UserError, allowed_list, did_you_mean
from rlplat.experiment.load import load_experiment
from rlplat.metrics import member_returns
from rlplat.policy.exported import export_actor, export_env_creator, is_export
from rlplat.policy.head_to_head import (
    RANDOM,
    HeadToHead,
    SwappableSeats,
    opponent_module,
    outcome,
    pool_snapshots,
    sides,
)
from rlplat.policy.options import EvalOptions
from rlplat.policy.render import (
    RENDER_CHOICES,
    VIDEO_FORMATS,
    frame_rate,
    has_display,
    label_frames,
    render_mode_for,
    run_headless,
    write_video,
)
from rlplat.policy.rollout import Actor, EpisodeResult, Stats, run_episode
from rlplat.runtime import ExportError, read_manifest
from rlplat.util.paths import new_path


@dataclass
class EvalReport:
    checkpoint: str
    picked: str
    env: str
    episodes: int
    seed: int
    explore: bool
    returns: Stats
    lengths: Stats
    per_episode: list[dict[str, Any]]
    reported: dict[str, Any] | None
    videos: list[str] = field(default_factory=list)
    dataset: str | None = None  # --record: the dataset directory written
    random: list[str] = field(default_factory=list)  # --random: policies that acted at random
    head_to_head: dict[str, Any] | None = None  # --against: the learner's games, counted
    # Multi-agent: the return of each agent, and of each policy (summed over its agents).
    agent_returns: dict[str, Stats] = field(default_factory=dict)
    policy_returns: dict[str, Stats] = field(default_factory=dict)
    # Goal envs: the share of episodes whose last info said is_success (None: it says nothing).
    success_rate: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def evaluate(
    path: Path,
    options: EvalOptions,
    *,
    say: Callable[[str], None] = print,
    show_frame: Callable[[str], None] = print,
    deadline: float | None = None,
    before_episode: Callable[[], None] | None = None,
) -> EvalReport:
    """Evaluate the checkpoint ``path`` designates, or the ONNX export in ``path``; ``say``
    receives progress lines. ``deadline`` (``time.monotonic()``): no episode starts after it
    (the first always does), so the report may hold fewer than ``options.episodes``.
    ``before_episode`` is called before each episode: what it raises ends the evaluation."""
    check_options(options)
    run_headless(options.render)
    exported = is_export(path)
    if exported:
        source = _export_source(path, options)
    else:
        source = _checkpoint_source(path, options)
    say(f"{source.kind}: {source.path}\n  ({source.why})")
    experiment = load_experiment(source.experiment_file).experiment
    mode = render_mode_for(options.render) if options.render else None
    env = build_env(source.env_creator(experiment), experiment.env, mode, source.experiment_file)
    if mode is not None and mode not in render_modes(env):
        env.close()
        raise UserError(unsupported_render(options.render, experiment.env, render_modes(env)))
    actor = source.actor(experiment, env)
    actions = "sampled" if options.explore else "greedy"
    recorder = _recorder(options, source, experiment, env, actor) if options.record else None
    last_seed = options.seed + options.episodes - 1
    say(
        f"Environment: {experiment.env.label}; {options.episodes} "
        f"episode(s), {actions} actions, seeds {options.seed}..{last_seed}"
    )
    tally = _Tally(actor)
    games = _head_to_head(actor, options, source)
    observers: list[EpisodeObserver] = [tally, *([games] if games else [])]
    if recorder is not None:
        observers.append(_Recording(recorder, actor))
    observers.append(_Progress(say))
    if options.render == "ansi":
        observers.append(_TextFrames(show_frame))
    videos = _videos(options, experiment, source, env)
    if videos is not None:
        observers.append(videos)
    try:
        for index in range(options.episodes):
            if index and deadline is not None and time.monotonic() >= deadline:
                break
            if before_episode is not None:
                before_episode()
            for observer in observers:
                observer.before(index)
            result = run_episode(
                actor,
                env,
                seed=options.seed + index,
                explore=options.explore,
                capture_frames=options.render in (*VIDEO_FORMATS, "ansi"),
                max_steps=options.max_steps,
            )
            for observer in observers:
                observer.after(index, result)
            result.frames.clear()
        for observer in observers:
            observer.finish()
    finally:
        env.close()
    dataset = _write_dataset(recorder, say)
    results = tally.results
    return EvalReport(
        checkpoint=str(source.path),
        picked=source.why,
        env=experiment.env.label,
        episodes=len(results),
        seed=options.seed,
        explore=options.explore,
        returns=Stats.of([r.episode_return for r in results]),
        agent_returns=_grouped(results, lambda index, agent: agent),
        policy_returns=_grouped(results, lambda index, agent: tally.played[index][agent])
        if actor.mapping
        else {},
        lengths=Stats.of([float(r.length) for r in results]),
        per_episode=[_episode_record(r) for r in results],
        reported=_with_episode_kind(source.reported, experiment),
        videos=videos.paths if videos is not None else [],
        random=list(options.random),
        dataset=dataset,
        head_to_head=games.games.to_json() | {"summary": games.games.summary()} if games else None,
        success_rate=success_rate(results),
    )


def success_rate(results: list[EpisodeResult]) -> float | None:
    """The share of the episodes that said they succeeded (None where none said either way)."""
    said = [result.success for result in results if result.success is not None]
    return sum(said) / len(said) if said else None


class EpisodeObserver:
    """Something ``evaluate`` does around each episode: before it is played, after it, and
    once after the last one."""

    def before(self, index: int) -> None:
        """Before the ``index``-th episode is played."""

    def after(self, index: int, result: EpisodeResult) -> None:
        """After it, with what it returned (its frames, if captured, are still there)."""

    def finish(self) -> None:
        """After the last episode."""


class _Tally(EpisodeObserver):
    """The episodes' results and, multi-agent, each episode's policy of each agent."""

    def __init__(self, actor: Actor):
        self.actor = actor
        self.results: list[EpisodeResult] = []
        self.played: list[dict[str, Any]] = []

    def after(self, index: int, result: EpisodeResult) -> None:
        self.results.append(result)
        if self.actor.mapping:
            self.played.append({a: self.actor.mapping(a) for a in result.agent_returns})


class _Games(EpisodeObserver):
    """``--against``: the learner's seat set per game (swapped each game), its games counted."""

    def __init__(self, seats: SwappableSeats, games: HeadToHead):
        self.seats, self.games = seats, games

    def before(self, index: int) -> None:
        self.seats.game = index

    def after(self, index: int, result: EpisodeResult) -> None:
        seats = self.seats
        score = outcome(result.agent_returns, seats, seats.learner)
        seat = ", ".join(a for a in result.agent_returns if seats(a) == seats.learner)
        self.games.record(seat, score)


def _head_to_head(actor: Actor, options: EvalOptions, source: _Source) -> _Games | None:
    seats = actor.mapping if isinstance(actor.mapping, SwappableSeats) else None
    if seats is None:
        return None
    greedy = _replays_games(options, source)
    return _Games(seats, HeadToHead(seats.learner, source.opponent, greedy=greedy))


class _Recording(EpisodeObserver):
    """``--record``: each episode's steps into the dataset."""

    def __init__(self, recorder: DatasetWriter, actor: Actor):
        self.recorder, self.actor = recorder, actor

    def after(self, index: int, result: EpisodeResult) -> None:
        self.recorder.add_episode(str(result.seed), episode_steps(self.actor.episode))


class _Progress(EpisodeObserver):
    def __init__(self, say: Callable[[str], None]):
        self.say = say

    def after(self, index: int, result: EpisodeResult) -> None:
        self.say(_episode_line(index, result))


class _TextFrames(EpisodeObserver):
    """``--render ansi``: each step's text frame."""

    def __init__(self, show_frame: Callable[[str], None]):
        self.show_frame = show_frame

    def after(self, index: int, result: EpisodeResult) -> None:
        for step, frame in enumerate(result.frames):
            self.show_frame(f"step {step}\n{frame}")


class _Videos(EpisodeObserver):
    """``--render gif/mp4``: one file per episode, or with ``one_file`` one for all."""

    def __init__(self, options: EvalOptions, stem: str, video_format: str, metadata: dict):
        self.options, self.stem = options, stem
        self.video_format, self.metadata = video_format, metadata
        self.pending: list = []
        self.seeds: list[int] = []
        self.paths: list[str] = []

    def after(self, index: int, result: EpisodeResult) -> None:
        frames = label_frames(result.frames, result.returns_before)
        self.seeds.append(result.seed)
        if self.options.one_file:
            self.pending.extend(frames)
        else:
            self._save(frames, f"{self.stem}_seed{result.seed}")

    def finish(self) -> None:
        if self.options.one_file and self.pending:
            self._save(self.pending, f"{self.stem}_seeds{self.seeds[0]}-{self.seeds[-1]}")

    def _save(self, frames: list, stem: str) -> None:
        out = self.options.out
        self.paths.append(_save(frames, out, stem, self.video_format, self.metadata))


def _videos(options: EvalOptions, experiment: Any, source: _Source, env: Any) -> _Videos | None:
    if options.render not in VIDEO_FORMATS:
        return None
    stem = f"{experiment.name}_{source.path.name}"
    return _Videos(options, stem, options.render, env.metadata)


def _write_dataset(recorder: DatasetWriter | None, say: Callable[[str], None]) -> str | None:
    """``--record``: the episodes written as a dataset; its directory (None: not recording)."""
    if recorder is None:
        return None
    dataset = str(recorder.write())
    say(f"Dataset: {dataset} ({recorder.info.env_steps:,} env steps)")
    return dataset


def _episode_line(index: int, result: EpisodeResult) -> str:
    """The progress line of the ``index``-th episode: seed, return (per agent), length."""
    cut = " (truncated)" if result.truncated else ""
    agents = f" ({member_returns(result.agent_returns)})" if result.agent_returns else ""
    return (
        f"  episode {index + 1:>3}  seed {result.seed}: return "
        f"{result.episode_return:.2f}{agents}, length {result.length}{cut}"
    )


def _episode_record(result: EpisodeResult) -> dict[str, Any]:
    """One episode in the report's ``per_episode``."""
    return {
        "seed": result.seed,
        "return": result.episode_return,
        "length": result.length,
        "truncated": result.truncated,
        **({"agent_returns": result.agent_returns} if result.agent_returns else {}),
        **({"success": result.success} if result.success is not None else {}),
    }


def _with_episode_kind(reported: dict[str, Any] | None, experiment: Any) -> dict[str, Any] | None:
    """Training's own numbers, and whether they come from an offline run (whose episodes are
    greedy evaluation episodes)."""
    if reported is None:
        return None
    return {**reported, "offline": getattr(experiment, "offline", None) is not None}


def _recorder(
    options: EvalOptions, source: _Source, experiment: Any, env: Any, actor: Actor
) -> DatasetWriter:
    """A writer for ``--record``, or a UserError where the episodes cannot be a dataset."""
    from ray.rllib.utils.serialization import gym_space_to_dict  # noqa: PLC0415

    refusal = None
    if source.kind != "Checkpoint":
        refusal = "an ONNX export plays without RLlib's episodes; record from its checkpoint"
    elif actor.multi_agent or hasattr(env, "members"):
        refusal = (
            f"{experiment.env.label} is multi-agent, and datasets hold one agent's episodes "
            "(RLlib's offline algorithms learn single-agent policies)"
        )
    elif experiment.connectors:
        refusal = (
            "the experiment's connectors change observations inside the policy, and a "
            "dataset holds what the env returned; record a policy trained without them"
        )
    if refusal:
        raise UserError(f"--record {options.record}: {refusal}. Nothing was written.")
    check_recordable(env.observation_space, env.action_space)
    info = DatasetInfo(
        env=experiment.model_dump(mode="json")["env"],
        observation_space=gym_space_to_dict(env.observation_space),
        action_space=gym_space_to_dict(env.action_space),
        actions_normalized=actions_normalized(experiment, env.action_space),
        source={
            "kind": "policy",
            "checkpoint": str(source.path),
            "actions": "sampled" if options.explore else "greedy",
            "seeds": [options.seed, options.seed + options.episodes - 1],
            "max_steps": options.max_steps,
        },
    )
    return DatasetWriter(options.record, info)


@dataclass
class _Source:
    """What is evaluated: a checkpoint (torch) or an ONNX export (onnxruntime)."""

    kind: str
    path: Path
    why: str
    experiment_file: Path
    reported: dict[str, Any] | None
    env_creator: Callable[[Any], Callable[[dict], Any]]  # experiment -> env creator
    actor: Callable[[Any, Any], Actor]  # (experiment, env) -> actor
    opponent: str = ""  # --against: what the opponent slot plays, in words


def _checkpoint_source(path: Path, options: EvalOptions) -> _Source:
    picked = find_checkpoint(path, last=options.last)
    if picked.experiment_file is None:
        raise UserError(
            f"no experiment.yaml next to {picked.path} or in its run directory, so its "
            "environment cannot be rebuilt. Copy the run's experiment.yaml into the checkpoint "
            "directory."
        )

    def env_creator(experiment: Any) -> Callable[[dict], Any]:
        # RLlib's algorithm registry (and torch) loads only for checkpoints: an ONNX export
        # is evaluated without them.
        from rlplat.rllib.env_creator import env_creator_for  # noqa: PLC0415

        return env_creator_for(experiment, evaluation=True)

    def actor(experiment: Any, env: Any) -> Actor:
        # torch and RLlib's modules load only now (the slow part of start-up): a bad path or
        # render mode is answered before that.
        from rlplat.policy.restore import Policy  # noqa: PLC0415
        from rlplat.rllib.multi_agent import mapping_for  # noqa: PLC0415

        mapping = mapping_for(experiment, env)
        if options.against is None:
            return Policy.from_checkpoint(picked.path, mapping, random=options.random).actor()
        learner, slot = sides(experiment, options.against)
        seats = SwappableSeats(mapping, learner, slot)
        random = [*options.random, slot] if options.against == RANDOM else options.random
        policy = Policy.from_checkpoint(picked.path, seats, random=random)
        snapshots = pool_snapshots(picked.path) if options.against != RANDOM else {}
        if options.against in snapshots:
            policy.module[slot].set_state(snapshots[options.against])
            source.opponent = f"{options.against} (a snapshot in this checkpoint's pool)"
        elif options.against != RANDOM:
            if not Path(options.against.rpartition(":")[0] or options.against).exists():
                raise UserError(
                    f"--against {options.against}: no such checkpoint or run, and no snapshot "
                    f"of that name in this checkpoint's pool ({', '.join(snapshots)})."
                    + did_you_mean(options.against, list(snapshots))
                )
            other, source.opponent = opponent_module(
                options.against,
                policy.module[slot].observation_space,
                policy.module[slot].action_space,
            )
            policy.module.add_module(slot, other, override=True)
        return policy.actor()

    source = _Source(
        kind="Checkpoint",
        path=picked.path,
        why=picked.why,
        experiment_file=picked.experiment_file,
        reported=asdict(picked.info) if picked.info else None,
        env_creator=env_creator,
        actor=actor,
        opponent=options.against or "",
    )
    return source


def _replays_games(options: EvalOptions, source: _Source) -> bool:
    """Head to head with greedy moves on both sides: a game without chance replays one game per
    seat. Random moves make every game differ."""
    return not options.explore and source.opponent != RANDOM


def _export_source(path: Path, options: EvalOptions) -> _Source:
    if options.against:
        raise UserError(
            f"--against plays a self-play run's checkpoint; {path} is an ONNX export. Evaluate "
            "the checkpoint it came from."
        )
    if options.random:
        raise UserError(
            f"--random swaps a checkpoint's policy for a random one; {path} is an ONNX export. "
            "Evaluate the checkpoint it came from."
        )
    if options.explore:
        raise UserError(
            f"--explore samples from the policy's action distribution; {path} is an ONNX "
            "export, which rlplat eval plays greedily. Leave out --explore (or evaluate the "
            "checkpoint it came from)."
        )
    try:
        manifest = read_manifest(path)
    except ExportError as exc:
        raise UserError(f"{exc}.") from None
    experiment_file = path / manifest.experiment.file
    if not experiment_file.is_file():
        raise UserError(
            f"the export {path} has no {experiment_file.name}, so its environment cannot be "
            "rebuilt; export the checkpoint again."
        )
    verified = "verified" if manifest.verified else "NOT verified (no parity certificate)"
    return _Source(
        kind="ONNX export",
        path=path.resolve(),
        why=f"of {manifest.checkpoint.path}; {verified}",
        experiment_file=experiment_file,
        reported=manifest.training,
        env_creator=lambda experiment: export_env_creator(manifest, experiment.env),
        actor=lambda experiment, env: export_actor(path, manifest),
    )


def _grouped(results: list[EpisodeResult], group_of: Callable[[int, str], Any]) -> dict[str, Stats]:
    """Per-episode returns summed by group (agent, or the policy that played it in episode
    ``index``), then statistics per group."""
    totals: dict[str, list[float]] = {}
    for index, result in enumerate(results):
        sums: dict[str, float] = {}
        for agent, value in result.agent_returns.items():
            group = str(group_of(index, agent))
            sums[group] = sums.get(group, 0.0) + value
        for group, value in sums.items():
            totals.setdefault(group, []).append(value)
    return {group: Stats.of(values) for group, values in totals.items()}


def unsupported_render(render: str, spec: Any, supported: list[str]) -> str:
    options = (["gif", "mp4"] if "rgb_array" in supported else []) + [
        m for m in ("ansi", "human") if m in supported
    ]
    return (
        f"--render {render} needs render mode {render_mode_for(render)!r}, but "
        f"{spec.label!r} supports only: {allowed_list(supported) or 'none'}. "
        + (f"Use --render {' or '.join(options)}." if options else "Leave out --render for it.")
    )


def check_options(options: EvalOptions) -> None:
    if options.render is not None and options.render not in RENDER_CHOICES:
        raise UserError(
            f"--render {options.render!r} is not a render choice; use one of "
            f"{', '.join(RENDER_CHOICES)}." + did_you_mean(options.render, RENDER_CHOICES)
        )
    if options.record is not None and options.record.exists():
        raise UserError(
            f"--record {options.record} already exists; rlplat never overwrites a dataset. "
            "Choose a new directory."
        )
    if options.episodes < 1:
        raise UserError(f"--episodes must be at least 1, got {options.episodes}.")
    if options.max_steps is not None and options.max_steps < 1:
        raise UserError(f"--max-steps must be at least 1, got {options.max_steps}.")
    if options.render == "human" and not has_display():
        raise UserError(
            "--render human needs a display, and none is set (DISPLAY / WAYLAND_DISPLAY are "
            "empty). Use --render gif or --render mp4 to write videos instead."
        )


def _save(frames: list, out: Path, stem: str, video_format: str, metadata: dict) -> str:
    path = new_path(out, stem, f".{video_format}")
    try:
        write_video(frames, path, frame_rate(metadata, video_format))
    except OSError as exc:
        raise UserError(f"cannot write the video {path}: {exc.strerror or exc}.") from None
    return str(path)


def print_report(report: EvalReport, console: Any) -> None:
    """The statistics table, the training's own number for this checkpoint, the video files."""
    title = f"{report.episodes} episode(s) of {report.env}"
    if report.random:
        title += f" (acting uniformly at random: {', '.join(report.random)})"
    table = Table(title=title, title_justify="left")
    table.add_column("")
    for column in ("mean", "std", "min", "max"):
        table.add_column(column, justify="right")
    team = "team return" if report.agent_returns else "return"
    table.add_row(team, *(f"{v:.2f}" for v in asdict(report.returns).values()))
    # Policy rows only when they add something: not one shared policy (= the team), and not one
    # policy per agent (= the agent rows).
    if len(report.policy_returns) > 1 and set(report.policy_returns) != set(report.agent_returns):
        for name, stats in report.policy_returns.items():
            table.add_row(f"policy {name}", *(f"{v:.2f}" for v in asdict(stats).values()))
    for name, stats in report.agent_returns.items():
        table.add_row(f"agent {name}", *(f"{v:.2f}" for v in asdict(stats).values()))
    table.add_row("length", *(f"{v:.1f}" for v in asdict(report.lengths).values()))
    console.print(table)
    if report.success_rate is not None:
        console.print(
            f"Success: {report.success_rate:.0%} of the episodes (is_success in their last info).",
            highlight=False,
        )
    reported = report.reported or {}
    if reported.get("episode_return_mean") is not None:
        steps, episodes = ("env steps", "exploring")
        if reported.get("offline"):
            steps, episodes = ("recorded env steps trained on", "greedy evaluation")
        when = f"iteration {reported.get('iteration')}, {reported.get('env_steps') or 0:,} {steps}"
        games = reported.get("game_score_mean")
        game_score = (
            f", and a mean game score of {games:.2f} over its recent games (training episodes: "
            "one life each, rewards clipped)"
            if games is not None
            else ""
        )
        console.print(
            f"At this checkpoint ({when}) training reported a mean return of "
            f"{reported['episode_return_mean']:.2f} over its recent ({episodes}) episodes"
            f"{game_score}.",
            highlight=False,
        )
    if report.head_to_head:
        console.print(report.head_to_head["summary"], highlight=False)
    for video in report.videos:
        console.print(f"Video: {video}", highlight=False)


class PlayingPolicy:
    """A trained policy choosing one action per observation, for a loop of the caller's own
    (``rlplat.load_policy``): the same actor ``rlplat eval`` plays, with the observations it is
    given recorded as the episode its connectors read (filters, frame stacks, recurrent state).
    ``reset()`` starts a new episode. Single-agent policies only."""

    def __init__(self, actor: Actor, env: Any, checkpoint: Path, why: str):
        self._actor = actor
        self._env = env
        self.checkpoint = checkpoint
        self.why = why
        self.observation_space = env.observation_space
        self.action_space = env.action_space
        self._playing = False

    def reset(self) -> None:
        self._playing = False

    def act(self, observation: Any, explore: bool = False) -> Any:
        """The action for ``observation``, one of the env's observations (as its
        ``observation_space`` holds them); ``explore`` samples instead of the greedy action."""
        self._check(observation)
        if self._playing:
            self._actor.observe(observation, 0.0, False, False, {})
        else:
            self._actor.reset(self._env, observation, {}, 0)
            self._playing = True
        return self._actor.act(observation, explore)

    def close(self) -> None:
        self._env.close()

    def _check(self, observation: Any) -> None:
        """Refuse an observation of another shape than the env's (torch's "mat1 and mat2 shapes
        cannot be multiplied" named neither)."""
        space = self.observation_space
        shape = getattr(space, "shape", None)
        if not isinstance(space, gym.spaces.Box) or shape is None:
            return
        try:
            given = np.asarray(observation, dtype=space.dtype)
        except (TypeError, ValueError):
            return  # not an array: the actor's connectors say what they take
        if given.shape != shape:
            raise ValueError(
                f"act() takes one observation of the env's observation space, {space} (shape "
                f"{shape}); got one of shape {given.shape}."
            )


def load_policy(path: Path, *, last: bool = False) -> PlayingPolicy:
    """The policy of the checkpoint ``path`` designates (as ``rlplat eval`` picks it), or of the
    ONNX export in ``path``, with its env built once for its spaces."""
    options = EvalOptions(last=last)
    source = _export_source(path, options) if is_export(path) else _checkpoint_source(path, options)
    experiment = load_experiment(source.experiment_file).experiment
    env = build_env(source.env_creator(experiment), experiment.env, None, source.experiment_file)
    actor = source.actor(experiment, env)
    if actor.multi_agent:
        env.close()
        raise UserError(
            f"{source.path} is a multi-agent policy: load_policy acts for one agent. Play it "
            "with rlplat.evaluate (rlplat eval), or export it and load the export with "
            "rlplat.runtime.load."
        )
    return PlayingPolicy(actor, env, source.path, source.why)
