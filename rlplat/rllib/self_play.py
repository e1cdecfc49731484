"""Self-play inside an RLlib algorithm: the seats of each episode, the outcome of each game, and
the opponent slots' weights set from the league's snapshots.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_RL_MODULE

from rlplat.errors import ConfigError, did_you_mean
from rlplat.experiment.schema import MultiAgentSpec, SelfPlaySpec
from rlplat.metrics import finite
from rlplat.rllib.league import RANDOM_OPPONENT, League, Outcome, Seating
from rlplat.rllib.multi_agent import MultiAgentSetup, PolicyMapping

GAMES = "self_play_games"  # env runner metric: {slot: {won|drawn|lost: games}}
OUTCOME_NAMES: dict[int, str] = {1: "won", 0: "drawn", -1: "lost"}
RECENT_GAMES = 4096  # games whose seating a mapping remembers (far more than run at once)


class SelfPlayMapping(PolicyMapping):
    """The experiment's mapping, then the game's seating: every other game the learner takes the
    opponent's seat. Games are counted per process, in the order they start, so a seed replays
    the same seating."""

    def __init__(self, policies: str | dict[str, str], seating: Seating):
        super().__init__(policies)
        self.seating = seating
        self._games: OrderedDict[str, int] = OrderedDict()  # recent episode ids -> game number
        self._started = 0

    def __call__(self, agent_id: Any, episode: Any = None, **kwargs: Any) -> str | None:
        policy = super().__call__(agent_id)
        if policy is None or episode is None:
            return policy
        return self.seating.of(policy, self._game(str(episode.id_)))

    def _game(self, episode_id: str) -> int:
        if episode_id not in self._games:
            self._games[episode_id] = self._started
            self._started += 1
            if len(self._games) > RECENT_GAMES:
                self._games.popitem(last=False)
        return self._games[episode_id]


def self_play_calls(
    spec: MultiAgentSpec,
    setup: MultiAgentSetup,
    random_rewards: Sequence[dict[str, float]],
    locate: Callable[[str], str],
) -> dict[str, Any]:
    """RLlib's multi_agent settings for ``spec.self_play``: its mapping, and only the learner
    (with any policy outside the game of learner against slots) trained. ``random_rewards``:
    the env check's random steps, each step's rewards by agent."""
    self_play = spec.self_play
    assert self_play is not None
    slots = self_play.opponent_slots
    if len(slots) != 1:
        raise ConfigError(
            f"multi_agent.self_play.opponents names {len(slots)} policies; self-play fills one "
            "opponent slot (a policy that may play several agents) from the pool.",
            location=locate("multi_agent.self_play.opponents"),
            key="multi_agent.self_play.opponents",
        )
    for key, names in (("learner", [self_play.learner]), ("opponents", slots)):
        for name in names:
            if name not in setup.policies:
                policies = setup.policies
                raise ConfigError(
                    f"multi_agent.self_play.{key} names {name!r}, which plays no agent; the "
                    f"policies are {', '.join(policies)}." + did_you_mean(name, policies),
                    location=locate(f"multi_agent.self_play.{key}"),
                    key=f"multi_agent.self_play.{key}",
                )
    if self_play.learner in slots or self_play.learner in setup.random:
        raise ConfigError(
            f"the self-play learner {self_play.learner!r} must be a trained policy that is not "
            "also an opponent slot or random.",
            location=locate("multi_agent.self_play.learner"),
            key="multi_agent.self_play.learner",
        )
    for slot in slots:
        same = all(
            spaces[slot] == spaces[self_play.learner]
            for spaces in (setup.observation_spaces, setup.action_spaces)
        )
        if not same:
            raise ConfigError(
                f"opponent slot {slot!r} has other observation or action spaces than the learner "
                f"{self_play.learner!r}: a snapshot of the learner cannot play it.",
                location=locate("multi_agent.self_play.opponents"),
                key="multi_agent.self_play.opponents",
            )
    learner_agents = setup.agents_of[self_play.learner]
    opponent_agents = setup.agents_of[slots[0]]
    if rewarded_alike(random_rewards, learner_agents, opponent_agents):
        raise ConfigError(
            f"self-play needs a game whose sides are rewarded against each other, but in "
            f"{len(random_rewards)} random steps the learner's agents "
            f"({', '.join(learner_agents)}) and the opponent's ({', '.join(opponent_agents)}) "
            "were rewarded alike: a cooperative env. Train its agents together instead (leave "
            "out multi_agent.self_play).",
            location=locate("multi_agent.self_play"),
            key="multi_agent.self_play",
        )
    seating = Seating(self_play.learner, slots[0], self_play.swap_seats)
    return {
        "policy_mapping_fn": SelfPlayMapping(spec.policies, seating),
        "policies_to_train": [p for p in setup.trained if p not in slots],
    }


def rewarded_alike(
    steps: Sequence[dict[str, float]], side: Sequence[str], other: Sequence[str]
) -> bool:
    """Whether two sides' rewards rose and fell together over ``steps`` (each step's rewards by
    agent): equal in every step that rewarded either, or correlated at 0.9 or more. False when
    no step rewarded either side (nothing to tell from)."""
    pairs = [
        (sum(step.get(a, 0.0) for a in side), sum(step.get(a, 0.0) for a in other))
        for step in steps
    ]
    pairs = [pair for pair in pairs if pair != (0.0, 0.0)]
    if not pairs:
        return False
    ours, theirs = np.asarray(pairs).T
    if np.allclose(ours, theirs):
        return True
    if len(pairs) < 3 or ours.std() == 0 or theirs.std() == 0:
        return False
    return bool(np.corrcoef(ours, theirs)[0, 1] >= 0.9)


def game_outcome(chunks: Sequence[Any], learner: str) -> tuple[str, Outcome] | None:
    """(the opponent module, the learner's outcome) of a finished two-sided game, from all its
    episode chunks: won when its agents' return beats the opponent's; None when the learner or
    a single opponent is missing."""
    returns: dict[str, float] = {}
    for chunk in chunks:
        for agent_id, agent_episode in chunk.agent_episodes.items():
            module = chunk.module_for(agent_id)
            returns[module] = returns.get(module, 0.0) + float(agent_episode.get_return())
    if learner not in returns or len(returns) != 2:
        return None
    [opponent] = [module for module in returns if module != learner]
    margin = returns[learner] - returns[opponent]
    return opponent, (margin > 0) - (margin < 0)


def count_game(
    episode: Any, earlier_chunks: Sequence[Any] | None, env_runner: Any, metrics_logger: Any
) -> None:
    """In an env runner at an episode's end: count the game under its opponent slot."""
    mapping = getattr(env_runner.config, "policy_mapping_fn", None)
    if not isinstance(mapping, SelfPlayMapping):
        return
    played = game_outcome([*(earlier_chunks or []), episode], mapping.seating.learner)
    if played is not None:
        slot, outcome = played
        metrics_logger.log_value((GAMES, slot, OUTCOME_NAMES[outcome]), 1, reduce="sum")


def iteration_counts(counts: dict[str, Any]) -> list[int]:
    """(wins, draws, losses) of one slot in an iteration's results. RLlib reduces a "sum" metric
    logged in an earlier iteration but not in this one to NaN: no game of that outcome."""
    return [int(finite(counts.get(name)) or 0) for name in OUTCOME_NAMES.values()]


class SelfPlayDriver:
    """In the algorithm's process: records the iteration's games, freezes the learner when the
    league says so, and gives each opponent slot a snapshot's weights for the next iteration."""

    def __init__(self, spec: SelfPlaySpec, seed: int):
        self.spec = spec
        self.league = League(
            learner=spec.learner,
            pool_size=spec.pool.size,
            sample=spec.pool.sample,
            every=spec.snapshot.every,
            min_win_rate=spec.snapshot.min_win_rate,
            max_every=spec.snapshot.latest_every(),
            seed=seed,
            random_share=spec.pool.random,
            keep_first=spec.pool.keep_first,
            even_share=spec.pool.even,
        )
        self.weights: dict[str, Any] = {}  # snapshot -> the learner's module state then
        self.assigned: dict[str, str] = {}  # slot -> snapshot it plays this iteration

    def start(self, algorithm: Any) -> None:
        """The pool's first snapshot: the learner's initial weights."""
        if not self.league.snapshots:
            self._freeze(algorithm, iteration=0, env_steps=0)
        self._assign(algorithm)

    def after_iteration(self, algorithm: Any, result: dict[str, Any]) -> None:
        games = (result.get("env_runners") or {}).get(GAMES) or {}
        self.league.record_games(
            {self.assigned[slot]: iteration_counts(counts) for slot, counts in games.items()}
        )
        iteration = algorithm.iteration + 1  # Tune counts the iteration once step() returns
        if self.league.snapshot_due(iteration):
            env_steps = int(result.get("num_env_steps_sampled_lifetime", 0))
            self._freeze(algorithm, iteration, env_steps)
        self._assign(algorithm)
        result["self_play"] = {
            "learner_elo": self.league.learner_rating,
            "pool_size": len(self.league.snapshots),
            "win_rate_since_snapshot": self.league.recent_win_rate(),
            "newest_snapshot_elo": self.league.snapshots[-1].rating,
            "opponent": self.assigned,  # slot -> the snapshot it plays next iteration
            "snapshot_elo": {s.name: s.rating for s in self.league.snapshots},
        }

    def _freeze(self, algorithm: Any, iteration: int, env_steps: int) -> None:
        name = self.league.freeze(iteration, env_steps)
        learner = self.spec.learner
        state = algorithm.learner_group.get_state(components=f"learner/rl_module/{learner}")
        self.weights[name] = state["learner"]["rl_module"][learner]
        for gone in self.league.dropped(list(self.weights)):
            del self.weights[gone]

    def _assign(self, algorithm: Any) -> None:
        slots = self.spec.opponent_slots
        self.assigned = dict(zip(slots, self.league.draw(len(slots)), strict=True))
        self._load(algorithm)

    def _weights_of(self, name: str) -> Any:
        """A snapshot's weights; for :data:`RANDOM_OPPONENT` every weight zero, so that the
        policy's logits are all zero: uniformly random among the (legal) actions."""
        if name != RANDOM_OPPONENT:
            return self.weights[name]
        return zeroed(next(iter(self.weights.values())))

    def _load(self, algorithm: Any) -> None:
        """The opponent slots get their assigned snapshots' weights in the learner group (RLlib
        copies every module from there to the env runners on a restore or a runner's restart)
        and in every env runner, evaluation's too."""
        states = {slot: self._weights_of(name) for slot, name in self.assigned.items()}
        algorithm.learner_group.set_state({COMPONENT_LEARNER: {COMPONENT_RL_MODULE: states}})

        def load(runner: Any) -> None:
            if runner.module is not None:
                runner.module.set_state(states)

        for group in (algorithm.env_runner_group, algorithm.eval_env_runner_group):
            if group is not None:
                group.foreach_env_runner(load, local_env_runner=True)

    def get_state(self) -> dict[str, Any]:
        return {
            "league": self.league.get_state(),
            "weights": self.weights,
            "assigned": dict(self.assigned),
        }

    def set_state(self, state: dict[str, Any], algorithm: Any) -> None:
        """Back to the saved league, with the slots playing what they played (no new draw: a
        resumed run draws what the uninterrupted one would have)."""
        self.league.set_state(state["league"])
        self.weights = dict(state["weights"])
        self.assigned = dict(state["assigned"])
        self._load(algorithm)


def zeroed(state: Any) -> Any:
    """``state`` (nested dicts of arrays or tensors) with every array and tensor zero."""
    if isinstance(state, dict):
        return {key: zeroed(value) for key, value in state.items()}
    return state * 0 if hasattr(state, "shape") else state


def self_play_driver(experiment: dict[str, Any]) -> SelfPlayDriver | None:
    """The driver of a trial's experiment (as Tune resolved it) that declares self-play."""
    declared = (experiment.get("multi_agent") or {}).get("self_play")
    if not declared:
        return None
    return SelfPlayDriver(SelfPlaySpec.model_validate(declared), int(experiment.get("seed") or 0))
