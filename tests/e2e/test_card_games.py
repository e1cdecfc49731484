"""A PettingZoo card game whose hands end after one or two moves (leduc hold'em, AEC, both
players removed at a hand's end): the check before Ray gives the same answer every time, and
the run it passed trains."""

from __future__ import annotations

from rich.console import Console

from tests.helpers import CONNECT_FOUR, replace

LEDUC = replace(
    replace(CONNECT_FOUR, "connect_four_v3", "leduc_holdem_v4"), "tiny-connect-four", "tiny-leduc"
)


def test_the_check_says_the_same_every_time_and_what_it_passed_trains(
    ray_session, write_yaml, tmp_path
):
    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare
    from rlplat.run.launch import train

    path = write_yaml(LEDUC.replace("OUTPUT", str(tmp_path / "out")))
    # Unseeded, as a new user's file: RLlib's own env check steps one random action.
    unseeded = [prepare(load_experiment(path, ["seed=null"])) for _ in range(3)]
    assert all(run.probe is not None and run.probe.env_steps >= 32 for run in unseeded)
    seeded = [prepare(load_experiment(path)).probe for _ in range(2)]
    assert seeded[0].losses == seeded[1].losses, "the same file, the same probe"
    summary = train(load_experiment(path), console=Console(quiet=True))
    assert summary.trials[0].status == "finished", summary.trials[0].error
    assert summary.trials[0].env_steps >= 200
