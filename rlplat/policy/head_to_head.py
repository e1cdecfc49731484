"""``rlplat eval <self-play run> --against OPPONENT``: the run's learner plays an opponent head to
head, seats swapped every other game, and the games are counted as won, drawn or lost with a
95 % confidence interval on the share won.

The opponent takes the run's opponent slot: ``random`` (uniformly random legal moves), one of
the run's own snapshots in the checkpoint's pool (``main_v40``), or another run's policy (``PATH``
or ``PATH:POLICY``; without ``:POLICY``, that run's self-play learner or its only trained
policy). The opponent's observations go through this run's
connectors, so both runs must see the game the same way (no observation filters of their own).
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlplat.checkpoints import find_checkpoint
from rlplat.errors import UserError, did_you_mean
from rlplat.experiment.load import load_experiment
from rlplat.experiment.schema import Experiment
from rlplat.rllib.league import RANDOM_OPPONENT, SELF_PLAY_STATE, Seating, Tally

RANDOM = RANDOM_OPPONENT  # --against random: the uniformly random player self-play also draws
Z_95 = 1.959964  # two-sided 95 % normal quantile


def wilson_interval(successes: int, trials: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson's score interval for a binomial share (it stays inside [0, 1] and is sensible at
    0 or all successes, where the normal approximation collapses)."""
    if trials == 0:
        return 0.0, 1.0
    share = successes / trials
    centre = (share + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(share * (1 - share) / trials + z * z / (4 * trials * trials))
    half /= 1 + z * z / trials
    return max(0.0, centre - half), min(1.0, centre + half)


GREEDY_NOTE = (
    " Both sides played greedy moves: in a game without chance that replays one game per seat, "
    "which the interval counts as independent; --explore samples the moves."
)


@dataclass
class HeadToHead:
    """The learner's games against one opponent, in all and by the seats the learner took."""

    learner: str
    opponent: str
    greedy: bool = False  # both sides took their greedy moves
    total: Tally = field(default_factory=Tally)
    by_seat: dict[str, Tally] = field(default_factory=dict)

    def record(self, seat: str, outcome: int) -> None:
        self.total.add(outcome)
        self.by_seat.setdefault(seat, Tally()).add(outcome)

    @property
    def interval(self) -> tuple[float, float]:
        """The 95 % Wilson interval on the share won."""
        return wilson_interval(self.total.won, self.total.games)

    def summary(self) -> str:
        low, high = self.interval
        seats = "; ".join(
            f"as {seat}: {t.won} won, {t.drawn} drawn, {t.lost} lost"
            for seat, t in sorted(self.by_seat.items())
        )
        total = self.total
        return (
            f"{self.learner} against {self.opponent}: {total.won} won, {total.drawn} drawn, "
            f"{total.lost} lost of {total.games} games: {total.share_won:.1%} won (95% CI "
            f"{low:.1%}-{high:.1%}, Wilson). {seats}."
        ) + (GREEDY_NOTE if self.greedy else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "learner": self.learner,
            "opponent": self.opponent,
            "won": self.total.won,
            "drawn": self.total.drawn,
            "lost": self.total.lost,
            "win_rate": self.total.share_won,
            "win_rate_ci95": list(self.interval),
            "by_seat": {seat: vars(t) for seat, t in self.by_seat.items()},
        }


class SwappableSeats:
    """The run's policy mapping, then the learner and the opponent slot trading seats as in
    training's self-play (every other game; ``rlplat eval --against`` sets ``game``)."""

    def __init__(self, mapping: Callable[..., Any], learner: str, slot: str):
        self.mapping = mapping
        self.seating = Seating(learner, slot, swap_seats=True)
        self.game = 0

    @property
    def learner(self) -> str:
        return self.seating.learner

    def __call__(self, agent_id: Any, episode: Any = None, **kwargs: Any) -> Any:
        return self.seating.of(self.mapping(agent_id), self.game)


def sides(experiment: Experiment, against: str) -> tuple[str, str]:
    """(learner, opponent slot) of a self-play run; a clear error for any other run."""
    self_play = experiment.multi_agent.self_play if experiment.multi_agent else None
    if self_play is None:
        raise UserError(
            f"--against {against} plays a self-play run's learner against an opponent, but "
            f"{experiment.name!r} declares no multi_agent.self_play. To score a multi-agent "
            "run against a random side use --random POLICY."
        )
    return self_play.learner, self_play.opponent_slots[0]


def pool_snapshots(checkpoint: Path) -> dict[str, Any]:
    """The self-play snapshots kept in ``checkpoint``'s pool: their module weights by name."""
    state_file = checkpoint / "algorithm_state.pkl"
    if not state_file.is_file():
        return {}
    league = pickle.loads(state_file.read_bytes()).get(SELF_PLAY_STATE) or {}
    return dict(league.get("weights") or {})


def opponent_module(against: str, observation_space: Any, action_space: Any) -> Any:
    """The RLModule of another run's policy (``PATH[:POLICY]``), checked to fit the slot."""
    from ray.rllib.core.rl_module.rl_module import RLModule  # noqa: PLC0415 - torch loads here

    from rlplat.policy.restore import MODULES_DIR  # noqa: PLC0415

    head, colon, policy = against.rpartition(":")
    path_text = head if colon and Path(head).exists() and not Path(against).exists() else against
    policy = policy if path_text == head else ""
    picked = find_checkpoint(Path(path_text))
    modules = picked.path / MODULES_DIR
    found = sorted(p.name for p in modules.iterdir() if p.is_dir()) if modules.is_dir() else []
    if not policy:
        policy = _default_policy(picked.experiment_file, found)
    if policy not in found:
        raise UserError(
            f"--against {against}: {picked.path} has no policy {policy!r}; its policies are "
            f"{', '.join(found) or 'none'}." + did_you_mean(policy, found)
        )
    module = RLModule.from_checkpoint(modules / policy)
    if module.observation_space != observation_space or module.action_space != action_space:
        raise UserError(
            f"--against {against}: its policy {policy!r} sees or acts in other spaces than the "
            "opponent seat of this run, so it cannot play this game."
        )
    module.eval()
    return module, f"{policy} of {picked.path}"


def _default_policy(experiment_file: Path | None, found: list[str]) -> str:
    """The other run's self-play learner, else its only trained (not random) policy."""
    if experiment_file is not None:
        multi_agent = load_experiment(experiment_file).experiment.multi_agent
        if multi_agent is not None and multi_agent.self_play is not None:
            return multi_agent.self_play.learner
        trained = [p for p in found if multi_agent is None or p not in multi_agent.random]
        if len(trained) == 1:
            return trained[0]
    raise UserError(
        f"--against: say which of the policies {', '.join(found)} plays, as PATH:POLICY."
    )


def outcome(agent_returns: dict[str, float], mapping: Callable[..., Any], learner: str) -> int:
    """1, 0 or -1: the learner's agents' return against the others'."""
    ours = sum(r for agent, r in agent_returns.items() if mapping(agent) == learner)
    theirs = sum(r for agent, r in agent_returns.items() if mapping(agent) != learner)
    return (ours > theirs) - (ours < theirs)
