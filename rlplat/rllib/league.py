"""The self-play league: frozen snapshots of the learning policy, who plays whom, and ratings.

Pure bookkeeping (no Ray, no torch): the trial freezes the learner's weights into the pool when
:meth:`League.snapshot_due` says so, asks :meth:`League.draw` which snapshots fill the opponent
slots for the next iteration, and reports each finished game with :meth:`League.record`. Its
whole state (pool, ratings, records, the sampler's random state) is one picklable dict, saved
with every checkpoint so that ``--resume`` continues the league exactly.

Ratings are Elo's: the expected score of A against B is 1 / (1 + 10^((R_B - R_A) / 400)), and
each game moves both ratings by K times the surprise. Prioritised fictitious self-play (PFSP, as
in AlphaStar) draws a snapshot with weight (1 - p)^2, where p is the learner's win rate against
it (draws half, one win and one loss as a prior): opponents it has not yet mastered come most.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

SELF_PLAY_STATE = "rlplat_self_play"  # the league in the algorithm's checkpoint state
INITIAL_RATING = 1000.0
ELO_K = 16.0
Outcome = Literal[1, 0, -1]  # the learner's game: won, drawn, lost
RANDOM_OPPONENT = "random"  # drawn instead of a snapshot: the slot plays uniformly random moves


def expected_score(rating: float, opponent: float) -> float:
    """Elo's expected score (a win 1, a draw 0.5) of a player rated ``rating``."""
    return 1.0 / (1.0 + 10.0 ** ((opponent - rating) / 400.0))


@dataclass
class Tally:
    """Games won, drawn and lost by the learner."""

    won: int = 0
    drawn: int = 0
    lost: int = 0

    @property
    def games(self) -> int:
        return self.won + self.drawn + self.lost

    def add(self, outcome: int) -> None:
        if outcome > 0:
            self.won += 1
        elif outcome < 0:
            self.lost += 1
        else:
            self.drawn += 1

    @property
    def share_won(self) -> float:
        """Games won over games played, draws counting as not won (0 with no game)."""
        return self.won / self.games if self.games else 0.0

    def win_rate(self, prior: int = 0) -> float:
        """The share won, draws half, after ``prior`` wins and as many losses (0 with no game
        and no prior)."""
        games = self.games + 2 * prior
        return (self.won + 0.5 * self.drawn + prior) / games if games else 0.0


@dataclass
class Snapshot:
    """A frozen copy of the learner and the learner's record against it."""

    name: str
    iteration: int
    env_steps: int
    rating: float
    record: Tally = field(default_factory=Tally)

    @property
    def learner_win_rate(self) -> float:
        """The learner's win rate against this snapshot, draws half, after one win and one
        loss of prior (0.5 before any game)."""
        return self.record.win_rate(prior=1)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Snapshot:
        """From ``asdict``; checkpoints before 2026-11-27 kept the record flat (wins, draws,
        losses)."""
        state = dict(state)
        flat = [state.pop(key, 0) for key in ("wins", "draws", "losses")]
        record = Tally(**state.pop("record")) if "record" in state else Tally(*flat)
        return cls(**state, record=record)


@dataclass
class League:
    """Snapshots of ``learner`` and its rating; ``draw`` fills opponent slots by ``sample``."""

    learner: str
    pool_size: int
    sample: Literal["latest", "uniform", "pfsp"]
    every: int
    min_win_rate: float | None
    seed: int
    max_every: int | None = None  # with min_win_rate: a snapshot at the latest this often
    random_share: float = 0.0  # share of draws that give the slots RANDOM_OPPONENT
    keep_first: bool = False  # a full pool drops its second-oldest, never the first snapshot
    even_share: float = 0.0  # share of snapshot draws spread evenly over the pool
    learner_rating: float = INITIAL_RATING
    snapshots: list[Snapshot] = field(default_factory=list)
    last_snapshot_iteration: int = 0
    since_snapshot: Tally = field(default_factory=Tally)
    _rng: np.random.Generator | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self._rng is None:
            self._rng = np.random.default_rng(self.seed)

    # --- snapshots --------------------------------------------------------------------------

    def freeze(self, iteration: int, env_steps: int) -> str:
        """Add a snapshot of the learner as it is now (the caller keeps its weights under the
        returned name); the oldest snapshot (with ``keep_first``, the oldest after the first)
        leaves a full pool."""
        name = f"{self.learner}_v{iteration}"
        self.snapshots.append(Snapshot(name, iteration, env_steps, self.learner_rating))
        while len(self.snapshots) > self.pool_size:
            del self.snapshots[1 if self.keep_first else 0]
        self.last_snapshot_iteration = iteration
        self.since_snapshot = Tally()
        return name

    def snapshot_due(self, iteration: int) -> bool:
        """Freeze now? Every ``every`` iterations, and when ``min_win_rate`` is set only once the
        learner's win rate against the pool since the last snapshot reaches it, or, whatever
        that rate, once ``max_every`` iterations have passed: PFSP draws the snapshots the
        learner beats least, so its win rate can stay under the threshold for good."""
        since = iteration - self.last_snapshot_iteration
        if since < self.every:
            return False
        if self.min_win_rate is None or (self.max_every is not None and since >= self.max_every):
            return True
        return self.recent_win_rate() >= self.min_win_rate

    def recent_win_rate(self) -> float:
        """The learner's win rate (draws half) over the games since the last snapshot; 0 with
        none played."""
        return self.since_snapshot.win_rate()

    def names(self) -> list[str]:
        return [snapshot.name for snapshot in self.snapshots]

    def dropped(self, names: list[str]) -> list[str]:
        """Of ``names`` (snapshots the caller holds weights for), those no longer in the pool."""
        kept = set(self.names())
        return [name for name in names if name not in kept]

    # --- who plays ----------------------------------------------------------------------------

    def draw(self, slots: int) -> list[str]:
        """A snapshot for each of ``slots`` opponent slots (one may fill several), or with
        probability ``random_share`` :data:`RANDOM_OPPONENT` for all of them."""
        if not self.snapshots:
            raise ValueError("the pool is empty: freeze the learner first")
        assert self._rng is not None
        if self.random_share and self._rng.random() < self.random_share:
            return [RANDOM_OPPONENT] * slots
        if self.sample == "latest" and not self.even_share:
            return [self.snapshots[-1].name] * slots
        picks = self._rng.choice(len(self.snapshots), size=slots, p=self.draw_probabilities())
        return [self.snapshots[i].name for i in picks]

    def draw_probabilities(self) -> np.ndarray:
        """Each snapshot's chance of a draw: ``sample``'s, mixed with an even share
        ``even_share``. PFSP alone all but stops drawing the snapshots the learner has long
        beaten (its record is lifelong), and the learner can then forget how to beat them; the
        even share keeps each played with a chance of at least ``even_share`` / the number of
        snapshots in the pool."""
        count = len(self.snapshots)
        if self.sample == "latest":
            weights = np.eye(count)[-1]
        elif self.sample == "pfsp":
            weights = np.array([(1.0 - s.learner_win_rate) ** 2 for s in self.snapshots])
        else:
            weights = np.ones(count)
        return (1.0 - self.even_share) * weights / weights.sum() + self.even_share / count

    # --- results --------------------------------------------------------------------------------

    def record(self, snapshot: str, outcome: Outcome) -> None:
        """One finished game of the learner against ``snapshot``: records and both ratings."""
        opponent = next((s for s in self.snapshots if s.name == snapshot), None)
        if opponent is None:
            return  # a game against a snapshot the pool has dropped since
        opponent.record.add(outcome)
        self.since_snapshot.add(outcome)
        score = (outcome + 1) / 2
        change = ELO_K * (score - expected_score(self.learner_rating, opponent.rating))
        self.learner_rating += change
        opponent.rating -= change

    def record_games(self, games: Mapping[str, Sequence[int]]) -> None:
        """An iteration's games, (wins, draws, losses) by snapshot, rated in an even interleaving
        of their outcomes: the order they ended in is not kept, and rated as all wins and then
        all losses, one record would move Elo far from what it says."""
        played = [
            ((i + 0.5) / count, snapshot, outcome)
            for snapshot, counts in games.items()
            for outcome, count in zip((1, 0, -1), counts, strict=True)
            for i in range(count)
        ]
        for _, snapshot, outcome in sorted(played, key=lambda game: game[0]):
            self.record(snapshot, outcome)  # type: ignore[arg-type]

    # --- checkpoints --------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        assert self._rng is not None
        return {
            "learner_rating": self.learner_rating,
            "snapshots": [asdict(snapshot) for snapshot in self.snapshots],
            "last_snapshot_iteration": self.last_snapshot_iteration,
            "since_snapshot": asdict(self.since_snapshot),
            "rng": self._rng.bit_generator.state,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        assert self._rng is not None
        self.learner_rating = state["learner_rating"]
        self.snapshots = [Snapshot.from_state(snapshot) for snapshot in state["snapshots"]]
        self.last_snapshot_iteration = state["last_snapshot_iteration"]
        since = state["since_snapshot"]  # a [wins, draws, losses] list before 2026-11-27
        self.since_snapshot = Tally(**since) if isinstance(since, dict) else Tally(*since)
        self._rng.bit_generator.state = state["rng"]


@dataclass(frozen=True)
class Seating:
    """Who plays which seat in a self-play game: with ``swap_seats`` the learner and the
    opponent slot trade seats every other game, so the learner plays both colours equally."""

    learner: str
    opponent: str
    swap_seats: bool

    def of(self, policy: str, game: int) -> str:
        """The module that plays the seat ``policy`` names in the experiment's mapping, in a
        process's ``game``-th game (counted from 0)."""
        if not (self.swap_seats and game % 2):
            return policy
        return {self.learner: self.opponent, self.opponent: self.learner}.get(policy, policy)
