"""The self-play league's bookkeeping: snapshots, who is drawn, Elo ratings, its saved state."""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np
import pytest

from rlplat.rllib.league import INITIAL_RATING, League, expected_score
from rlplat.rllib.self_play import iteration_counts, rewarded_alike


def league(**changes) -> League:
    settings = dict(
        learner="main", pool_size=20, sample="pfsp", every=10, min_win_rate=None, seed=0
    )
    return League(**{**settings, **changes})


def test_elo_moves_ratings_by_the_surprise_and_keeps_their_sum():
    games = league()
    snapshot = games.freeze(iteration=0, env_steps=0)
    for _ in range(20):
        games.record(snapshot, 1)
    [frozen] = games.snapshots
    assert games.learner_rating > INITIAL_RATING + 100 > INITIAL_RATING > frozen.rating
    assert games.learner_rating + frozen.rating == pytest.approx(2 * INITIAL_RATING)
    # Each further win surprises less: the learner is expected to win.
    before = games.learner_rating
    games.record(snapshot, 1)
    assert 0 < games.learner_rating - before < 16 * (1 - 0.5)
    assert expected_score(1200, 1000) == pytest.approx(0.7597, abs=1e-4)


def test_pfsp_draws_the_snapshots_the_learner_beats_least_most():
    games = league(sample="pfsp")
    beaten, hard = games.freeze(0, 0), games.freeze(10, 1000)
    for _ in range(30):
        games.record(beaten, 1)
        games.record(hard, -1)
    # Weights (1 - 31/32)^2 and (1 - 1/32)^2: the hard one about 900 times as often.
    drawn = Counter(games.draw(20000))
    assert drawn[hard] > 100 * drawn[beaten] > 0


def test_latest_and_uniform_draws():
    games = league(sample="latest")
    names = [games.freeze(i * 10, i) for i in range(3)]
    assert games.draw(4) == [names[-1]] * 4
    uniform = league(sample="uniform")
    names = [uniform.freeze(i * 10, i) for i in range(3)]
    assert set(Counter(uniform.draw(3000)).values()) < set(range(900, 1100))


def test_snapshots_wait_for_the_interval_and_the_win_rate():
    games = league(every=10, min_win_rate=0.6)
    first = games.freeze(0, 0)
    assert not games.snapshot_due(9)
    for outcome in (1, 1, -1, 0):  # 2.5 of 4: 62.5%
        games.record(first, outcome)
    assert games.recent_win_rate() == 0.625
    assert games.snapshot_due(10)
    games.freeze(10, 100)
    assert games.recent_win_rate() == 0.0 and not games.snapshot_due(25)  # no games: not yet
    assert league(every=10).snapshot_due(10)  # no threshold: on the interval alone


def test_a_win_rate_that_stays_under_the_threshold_cannot_stall_the_pool():
    """PFSP keeps the learner on the snapshots it beats least, so its win rate since the last
    snapshot can stay under min_win_rate; max_every freezes one anyway."""
    games = league(every=10, min_win_rate=0.6, max_every=50)
    snapshot = games.freeze(0, 0)
    for _ in range(100):
        games.record(snapshot, 1)
        games.record(snapshot, -1)
        games.record(snapshot, 1)
        games.record(snapshot, -1)
        games.record(snapshot, 0)  # win rate 0.5, under 0.6 for good
    assert games.recent_win_rate() == 0.5
    assert not any(games.snapshot_due(i) for i in range(10, 50))
    assert games.snapshot_due(50)
    from rlplat.experiment.schema import SnapshotRule

    assert SnapshotRule(every=10, min_win_rate=0.6).latest_every() == 50
    assert SnapshotRule(every=10).latest_every() is None


def test_a_full_pool_drops_its_oldest_snapshot():
    games = league(pool_size=2)
    names = [games.freeze(i * 10, i) for i in range(3)]
    assert games.names() == names[1:]
    assert games.dropped(names) == names[:1]
    games.record(names[0], 1)  # a game that ended after its opponent left: ignored
    assert games.learner_rating == INITIAL_RATING


def test_restored_state_continues_exactly():
    games = league(sample="pfsp")
    for i in range(3):
        games.record(games.freeze(i * 10, i * 100), 1)
    games.draw(5)
    saved = copy.deepcopy(games.get_state())
    expected = (games.draw(50), games.get_state())

    restored = league(sample="pfsp", seed=123)
    restored.set_state(saved)
    assert (restored.draw(50), restored.get_state()) == expected


def test_a_league_saved_with_flat_records_restores():
    # the state checkpoints wrote before the records became Tally objects
    games = league(sample="pfsp")
    games.record(games.freeze(0, 0), 1)
    flat = games.get_state()
    flat["snapshots"] = [
        {k: v for k, v in snapshot.items() if k != "record"} | {"wins": 3, "draws": 1, "losses": 2}
        for snapshot in flat["snapshots"]
    ]
    flat["since_snapshot"] = [4, 0, 1]

    restored = league(sample="pfsp")
    restored.set_state(flat)
    assert restored.snapshots[0].learner_win_rate == (3 + 0.5 + 1) / (6 + 2)
    assert restored.recent_win_rate() == 4 / 5


def test_the_learner_takes_each_seat_every_other_game():
    from rlplat.rllib.league import Seating

    seating = Seating(learner="main", opponent="opponent", swap_seats=True)
    games = [(seating.of("main", game), seating.of("opponent", game)) for game in range(4)]
    assert games == [("main", "opponent"), ("opponent", "main")] * 2
    assert seating.of("spectator", 1) == "spectator"
    fixed = Seating(learner="main", opponent="opponent", swap_seats=False)
    assert {fixed.of("main", game) for game in range(5)} == {"main"}


def test_an_iterations_games_are_rated_by_their_record_not_their_order():
    """30 wins and 10 losses against an equal snapshot: interleaved, the learner ends about as
    far ahead as 75 % says (191 Elo, approached from below); counted as 30 wins and then 10
    losses it would end 50 ahead."""
    games = league()
    snapshot = games.freeze(0, 0)
    games.record_games({snapshot: (30, 0, 10)})
    assert 100 < games.learner_rating - games.snapshots[0].rating < 191
    same = league()
    same.freeze(0, 0)
    same.record_games({snapshot: (30, 0, 10)})
    assert same.get_state() == games.get_state()


def test_sides_rewarded_against_each_other_are_a_game_for_self_play():
    """tic-tac-toe (one side's +1 is the other's -1) is a game; simple_spread's agents share
    their reward, so it is no game: self-play refuses it before Ray starts."""
    from rlplat.environments.make import check_env
    from rlplat.experiment.schema import EnvSpec
    from rlplat.rllib.self_play import rewarded_alike

    def random_rewards(module: str, kwargs: dict) -> tuple:
        spec = EnvSpec.model_validate({"pettingzoo": module, "kwargs": kwargs})
        return check_env(spec, lambda key: key).random_rewards

    board = random_rewards("pettingzoo.classic.tictactoe_v3", {})
    assert any(any(step.values()) for step in board), "a random game is won within the steps"
    assert not rewarded_alike(board, ["player_1"], ["player_2"])
    spread = random_rewards("mpe2.simple_spread_v3", {"N": 2, "max_cycles": 25})
    assert rewarded_alike(spread, ["agent_0"], ["agent_1"])


def test_rewards_that_rise_and_fall_together_are_alike():
    shared = [{"a": -float(i % 5), "b": -float(i % 5)} for i in range(15)]
    assert rewarded_alike(shared, ["a"], ["b"])
    # A shared reward with an occasional small penalty of one side's own still moves together.
    penalised = [{"a": r["a"] - 0.3 * (i == 7), "b": r["b"]} for i, r in enumerate(shared)]
    assert rewarded_alike(penalised, ["a"], ["b"])
    assert not rewarded_alike([{"a": 0.0, "b": 0.0}] * 10, ["a"], ["b"]), "nothing to tell"
    zero_sum = [{"a": 0.0, "b": 0.0}] * 9 + [{"a": 1.0, "b": -1.0}]
    assert not rewarded_alike(zero_sum, ["a"], ["b"])


def test_wilson_interval_matches_its_formula_and_stays_in_bounds():
    from scipy.stats import binomtest

    from rlplat.policy.head_to_head import wilson_interval

    expected = binomtest(190, 200).proportion_ci(0.95, method="wilson")
    assert wilson_interval(190, 200) == pytest.approx((expected.low, expected.high), abs=1e-6)
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == pytest.approx(1.0)
    assert 0.0 < wilson_interval(10, 10)[0] < 0.75, "ten of ten wins is no certainty"


def test_swapped_seats_trade_the_learner_and_the_opponent_and_count_from_the_learner():
    from rlplat.policy.head_to_head import HeadToHead, SwappableSeats, outcome
    from rlplat.rllib.multi_agent import PolicyMapping

    seats = SwappableSeats(
        PolicyMapping({"player_0": "main", "player_1": "opponent"}), "main", "opponent"
    )
    assert [seats("player_0"), seats("player_1")] == ["main", "opponent"]
    seats.game = 1
    assert [seats("player_0"), seats("player_1")] == ["opponent", "main"]
    assert outcome({"player_0": 1.0, "player_1": -1.0}, seats, "main") == -1  # main is player_1
    games = HeadToHead("main", "random")
    for seat, score in (("player_0", 1), ("player_1", 1), ("player_1", 0), ("player_0", -1)):
        games.record(seat, score)
    counted = games.to_json()
    assert (counted["won"], counted["drawn"], counted["lost"]) == (2, 1, 1)
    assert counted["by_seat"]["player_1"] == {"won": 1, "drawn": 1, "lost": 0}
    assert "2 won, 1 drawn, 1 lost of 4 games: 50.0% won" in games.summary()
    assert counted["win_rate"] == 0.5, "a draw is not a win"
    assert HeadToHead("main", "random").to_json()["win_rate"] == 0.0, "no game, no share won"


def test_an_outcome_without_a_game_this_iteration_counts_none():
    # RLlib reduces a "sum" metric that had values in an earlier iteration, and none now, to NaN
    assert iteration_counts({"won": 3.0, "drawn": float("nan"), "lost": 1.0}) == [3, 0, 1]
    assert iteration_counts({"lost": 2.0}) == [0, 0, 2]


def test_a_random_share_of_draws_plays_random_moves_and_is_not_rated():
    from rlplat.rllib.league import RANDOM_OPPONENT

    games = league(sample="uniform", random_share=0.25)
    games.freeze(0, 0)
    drawn = [games.draw(1)[0] for _ in range(2000)]
    assert 0.2 < drawn.count(RANDOM_OPPONENT) / len(drawn) < 0.3
    before = games.learner_rating
    games.record(RANDOM_OPPONENT, 1)
    assert games.learner_rating == before and games.recent_win_rate() == 0.0


def test_keep_first_drops_the_oldest_after_the_first():
    games = league(pool_size=3, keep_first=True)
    names = [games.freeze(i * 10, i) for i in range(5)]
    assert games.names() == [names[0], *names[3:]]
    assert games.dropped(names) == names[1:3]


def test_an_even_share_keeps_drawing_a_snapshot_pfsp_has_given_up_on():
    games = league(sample="pfsp")
    first, hard = games.freeze(0, 0), games.freeze(10, 1000)
    for _ in range(200):
        games.record(first, 1)
    games.record(hard, -1)
    beaten, lost = (1 / 202) ** 2, (2 / 3) ** 2  # 201 of 202 and 1 of 3 with the prior
    assert games.draw_probabilities()[0] == pytest.approx(beaten / (beaten + lost))

    games.even_share = 0.5
    probabilities = games.draw_probabilities()
    assert probabilities.sum() == pytest.approx(1.0)
    assert probabilities[0] == pytest.approx(0.5 * beaten / (beaten + lost) + 0.25)
    drawn = Counter(games.draw(1)[0] for _ in range(4000))
    assert 0.22 < drawn[first] / 4000 < 0.28


def test_without_an_even_share_draws_are_pfsps_own():
    games = league(sample="pfsp")
    names = [games.freeze(i * 10, i) for i in range(3)]
    for outcome, name in zip((1, -1, 0), names, strict=True):
        games.record(name, outcome)
    weights = np.array([(1 - 2 / 3) ** 2, (1 - 1 / 3) ** 2, (1 - 1 / 2) ** 2])
    expected = np.random.default_rng(0).choice(3, size=50, p=weights / weights.sum())
    assert games.draw(50) == [names[i] for i in expected]


def test_an_even_share_mixes_into_latest_and_leaves_it_alone_at_zero():
    games = league(sample="latest")
    names = [games.freeze(i * 10, i) for i in range(4)]
    assert games._rng is not None
    before = copy.deepcopy(games._rng.bit_generator.state)
    assert set(games.draw(50)) == {names[-1]}
    assert games._rng.bit_generator.state == before  # no random number drawn

    games.even_share = 0.4
    assert games.draw_probabilities().tolist() == pytest.approx([0.1, 0.1, 0.1, 0.7])
    drawn = Counter(games.draw(4000))
    assert all(0.08 < drawn[name] / 4000 < 0.12 for name in names[:3])
