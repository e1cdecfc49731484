"""Self-play runs keep their league through a SIGKILL and ``--resume``."""

from __future__ import annotations

import os
import pickle
import signal

import numpy as np

from tests.e2e.helpers import eval_json, resume, run_eval
from tests.helpers import launch, read_results, read_until_resumable

SELF_PLAY = """\
name: c4-selfplay
algorithm: PPO
seed: 0
env: {pettingzoo: pettingzoo.classic.connect_four_v3, api: aec}
multi_agent:
  policies: {player_0: main, player_1: opponent}
  self_play:
    learner: main
    opponents: opponent
    snapshot: {every: 1}
    pool: {size: 20, sample: pfsp}
training: {train_batch_size_per_learner: 256, minibatch_size: 64, num_epochs: 1}
rl_module: {model_config: {fcnet_hiddens: [32, 32]}}
resources: {env_runners: {count: 0, envs: 2}}
stop: {iterations: 16}
checkpoint: {every: 2, keep: null}
output_dir: OUTPUT
"""


def test_a_sigkilled_self_play_run_resumes_its_league(ray_session, write_yaml, tmp_path, capsys):
    """A snapshot every iteration into a pool of 20: the pool grows by one per iteration across
    the kill; a league started afresh would hold only the resumed iterations' snapshots. The
    opponent plays its snapshot's weights in the learner group too, from which RLlib sets every
    env runner's modules after a restore. (The league's ratings and its random draws after a
    restore: tests/unit/test_league.py.)"""
    path = write_yaml(SELF_PLAY.replace("OUTPUT", str(tmp_path / "out")))
    process = launch([str(path)], ray_session)
    run_dir = read_until_resumable(process, 3)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    resumed = resume(run_dir, ray_session)
    [trial_dir] = run_dir.glob("trial_*")
    continued = [line for line in resumed.stdout.splitlines() if "continues from" in line]
    assert continued, resumed.stdout[-2000:]
    rows = {r["training_iteration"]: r["self_play"] for r in read_results(trial_dir)}
    # Iteration i froze main_v{i} after main_v0 (the initial weights): i + 1 snapshots.
    assert {i: rows[i]["pool_size"] for i in rows} == {i: i + 1 for i in range(1, 17)}
    resumed_at = int(continued[0].split("(iteration ")[1].split(",")[0])
    assert 2 <= resumed_at < 16
    last = sorted(trial_dir.glob("checkpoint_*"))[-1]
    league = pickle.loads((last / "algorithm_state.pkl").read_bytes())["rlplat_self_play"]
    snapshot = league["weights"][league["assigned"]["opponent"]]
    modules = last / "learner_group" / "learner" / "rl_module"
    played = pickle.loads((modules / "opponent" / "module_state.pkl").read_bytes())
    assert set(played) == set(snapshot)
    assert all(np.array_equal(played[name], snapshot[name]) for name in snapshot)

    # Head to head, the learner taking each seat in turn: against random moves, and against the
    # pool's first snapshot (a name from the checkpoint's pool; a misspelt one is refused).
    random = eval_json(capsys, run_dir, "-n", "4", "--against", "random")["head_to_head"]
    assert random["won"] + random["drawn"] + random["lost"] == 4
    assert set(random["by_seat"]) == {"player_0", "player_1"}
    first = eval_json(capsys, run_dir, "-n", "2", "--explore", "--against", "main_v0")
    assert first["head_to_head"]["opponent"].startswith("main_v0")
    code, _, err = run_eval(capsys, run_dir, "--against", "main_v00")
    assert code == 2 and "Did you mean 'main_v0'" in err, err
