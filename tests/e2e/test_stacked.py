"""Stacked seeds (issue 104) on the command line: ``rlplat train ... --seeds N --stacked`` trains
the seeds as one model in one process, and each seed is still a trial that learns on its own,
is evaluated, and continues after a kill."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import time
from pathlib import Path

import gymnasium as gym
import pytest
import torch
from rich.console import Console

from rlplat.checkpoints import (
    REPLAY_STATE,
    CheckpointInfo,
    GreedyEvaluation,
    checkpoints_in,
    find_checkpoint,
)
from rlplat.experiment.load import load_experiment
from rlplat.run.launch import train
from tests.e2e.helpers import eval_json, resume, run_cli
from tests.helpers import iterations_logged, launch

# experiments/cartpole_ppo.yaml's settings, a shorter budget and target.
CARTPOLE = """\
name: stacked
algorithm: PPO
seed: 0
env: {id: CartPole-v1}
training:
  lr: 0.001
  gamma: 0.98
  lambda_: 0.8
  train_batch_size_per_learner: 1000
  minibatch_size: 256
  num_epochs: 12
  use_kl_loss: false
  vf_clip_param: 1000.0
  vf_loss_coeff: 0.5
  entropy_coeff: 0.0
  grad_clip: 0.5
rl_module: {model_config: {fcnet_hiddens: [64, 64], vf_share_layers: false}}
resources: {env_runners: {count: 0, envs: 16}}
reporting: {metrics_num_episodes_for_smoothing: 20}
stop: {episode_return_mean: 150, env_steps: 30000}
checkpoint: {every: 10, keep: 1, at_end: true}
output_dir: OUTPUT
"""


def test_three_stacked_seeds_each_learn_cartpole_as_their_own_trials(
    ray_session, write_yaml, capsys, tmp_path
):
    path = write_yaml(CARTPOLE.replace("OUTPUT", str(tmp_path / "out")))
    # One process (the kill test below splits its stack over two).
    overrides = ["seeds=3", "stacked=true", "resources.driver.cpus=1"]
    summary = train(load_experiment(path, overrides), console=Console(quiet=True))
    run_dir = Path(summary.run_dir)
    assert [t.status for t in summary.trials] == ["finished"] * 3
    seeds, returns = [], []
    for index, trial in enumerate(summary.trials):
        trial_dir = Path(trial.path)
        assert trial_dir.name == f"trial_{index:05d}"
        seeds.append(json.loads((trial_dir / "params.json").read_text())["seed"])
        lines = (trial_dir / "result.json").read_text().splitlines()
        results = [json.loads(line) for line in lines]
        # Each seed stopped at its own target (the untrained policy scores ~20 over 20 episodes).
        assert results[-1]["done"] and results[-1]["window"]["episode_return_mean"] >= 150
        returns.append([r.get("window", {}).get("episode_return_mean") for r in results])
        assert (trial_dir / "progress.csv").is_file() and list(trial_dir.glob("events.out.*"))
        [checkpoint] = checkpoints_in(trial_dir)  # checkpoint.keep
        # Scored as a separate seed's: by its own greedy episodes at the checkpoint's iteration.
        greedy, info = GreedyEvaluation.read(checkpoint), CheckpointInfo.read(checkpoint)
        assert greedy is not None and greedy.episodes == 5 and greedy.iteration == info.iteration
        assert info.score_metric == "eval_episode_return_mean" and info.score is not None
    assert seeds == [0, 1, 2]
    assert len({curve[0] for curve in returns}) == 3, "each seed its own envs and networks"
    # A seed's checkpoint is its policy: rlplat eval plays it (no Ray).
    best = find_checkpoint(run_dir).path
    played = eval_json(capsys, best, "-n", "3")
    assert played["checkpoint"] == str(best) and played["returns"]["mean"] >= 100
    # Beside a run of the same seeds trained apart (here: the same files, without stacked),
    # rlplat report tells the two apart by how they were trained.
    apart = tmp_path / "apart" / run_dir.name
    shutil.copytree(run_dir, apart)
    resolved = apart / "experiment.yaml"
    resolved.write_text(resolved.read_text().replace("stacked: true\n", ""))
    code, out, err = run_cli(
        capsys, "report", run_dir, apart, "--score", "training", "--out", tmp_path / "report"
    )
    assert code == 0, err
    assert "stacked=true: IQM" in out and "stacked=false: IQM" in out


PENDULUM_OFF_POLICY = """\
name: stacked-off-policy
algorithm: ALGORITHM
seed: 0
env: {id: Pendulum-v1}
training:
  NETWORKS
  train_batch_size_per_learner: 32
  num_steps_sampled_before_learning_starts: 200
  training_intensity: 32
  replay_buffer_config: {capacity: 1000}
env_runners: {rollout_fragment_length: 4}
resources: {env_runners: {count: 0}}
stop: {env_steps: 600}
checkpoint: {every: 0, keep: 1, at_end: true}
output_dir: OUTPUT
"""


NETWORKS = {  # the same sizes in each algorithm's keys: (training lines, other sections)
    "SAC": ("", "rl_module: {model_config: {fcnet_hiddens: [32], fcnet_activation: relu}}\n"),
    "TD3": ("  actor_hiddens: [32]\n  critic_hiddens: [32]\n", ""),
}


@pytest.mark.parametrize("algorithm", NETWORKS)
def test_stacked_off_policy_seeds_are_trials_whose_checkpoints_play_and_keep_the_replay(
    algorithm, ray_session, write_yaml, capsys, tmp_path
):
    """Two SAC (TD3) seeds stacked in one process: each its own trial with its own episodes,
    its checkpoint played by rlplat eval as rlplat's SAC (TD3) policy, the stack's checkpoint
    holding each seed's replayed transitions (checkpoint.replay_buffer), so --resume goes on
    with them."""
    text = PENDULUM_OFF_POLICY.replace("OUTPUT", str(tmp_path / "out"))
    text = text.replace("ALGORITHM", algorithm)
    training, sections = NETWORKS[algorithm]
    text = text.replace("  NETWORKS\n", training) + sections
    path = write_yaml(text, name="stack.yaml")
    overrides = ["seeds=2", "stacked=true", "resources.driver.cpus=1"]
    summary = train(load_experiment(path, overrides), console=Console(quiet=True))
    assert [t.status for t in summary.trials] == ["finished"] * 2
    firsts = []
    for trial in summary.trials:
        results = [json.loads(line) for line in (Path(trial.path) / "result.json").open()]
        assert results[-1]["num_env_steps_sampled_lifetime"] >= 600
        assert results[-1]["learners"]["default_policy"]["qf_loss"] > 0
        firsts.append(results[0]["env_runners"]["episode_return_mean"])
    assert firsts[0] != firsts[1], "each seed its own envs"
    played = eval_json(capsys, find_checkpoint(Path(summary.trials[1].path)).path, "-n", "1")
    assert played["episodes"] == 1 and played["returns"]["mean"] < 0
    [part] = Path(summary.run_dir).glob("stack/checkpoint_*/part_0")
    state = pickle.loads((part / "algorithm_state.pkl").read_bytes())
    held = state[REPLAY_STATE]["columns"]["rewards"]
    assert held.shape[0] == 2 and held.shape[1] >= 600  # each seed's own transitions


def test_a_killed_stack_resumes_every_seed_from_its_checkpoint(ray_session, write_yaml, tmp_path):
    """Two seeds over two processes (the command's and a Ray actor), SIGKILLed mid-run: the
    resumed run restores both parts and each seed's trial logs every iteration once."""
    text = CARTPOLE.replace("OUTPUT", str(tmp_path / "out"))
    text = text.replace("train_batch_size_per_learner: 1000", "train_batch_size_per_learner: 256")
    text = text.replace("num_epochs: 12", "num_epochs: 1")
    text = text.replace("envs: 16", "envs: 4").replace("every: 10, keep: 1", "every: 3, keep: 1")
    text = text.replace("{episode_return_mean: 150, env_steps: 30000}", "{iterations: 24}")
    path = write_yaml(text, name="killed.yaml")
    two_processes = "resources.driver.cpus=2"
    process = launch([str(path), "--seeds", "2", "--stacked", two_processes], ray_session)
    run_dir = None
    for line in process.stdout:
        if line.startswith("Run directory:"):
            run_dir = Path(line.split(":", 1)[1].strip())
            break
    assert run_dir is not None
    deadline = time.monotonic() + 120
    while not list(run_dir.glob("stack/*/stack_point.json")):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    killed_at = [len(iterations_logged(run_dir / f"trial_{i:05d}")) for i in range(2)]
    assert all(0 < count < 24 for count in killed_at), killed_at

    resumed = resume(run_dir, ray_session)
    assert "continues from checkpoint_" in resumed.stdout
    for index in range(2):
        trial_dir = run_dir / f"trial_{index:05d}"
        assert iterations_logged(trial_dir) == list(range(1, 25)), "none lost, none twice"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [t["status"] for t in summary["trials"]] == ["finished", "finished"]
    assert {t["env_steps"] for t in summary["trials"]} == {24 * 256}


def test_the_shipped_dqn_stacks_its_seeds_as_rllibs_dqn_policies(ray_session, capsys, tmp_path):
    """experiments/cartpole_dqn.yaml (3-step returns, dueling, double Q) with an observation
    filter on two stacked seeds, briefly: each seed its own trial logging RLlib's DQN results,
    its checkpoint played by rlplat eval as RLlib's DQN policy behind its own filter, the
    stack's replay kept vector step by vector step (4 envs), so its n-step transitions go on
    after --resume."""
    from ray.rllib.connectors.env_to_module.mean_std_filter import MeanStdFilter

    from rlplat.policy.restore import Policy

    path = Path(__file__).parents[2] / "experiments" / "cartpole_dqn.yaml"
    overrides = ["seeds=2", "stacked=true", "resources.driver.cpus=1", "stop.env_steps=2000",
                 "checkpoint.every=0", "checkpoint.at_end=true", "connectors=[mean_std_filter]",
                 f"output_dir={tmp_path}"]  # fmt: skip
    summary = train(load_experiment(path, overrides), console=Console(quiet=True))
    assert [t.status for t in summary.trials] == ["finished"] * 2
    firsts = []
    for trial in summary.trials:
        results = [json.loads(line) for line in (Path(trial.path) / "result.json").open()]
        learner = results[-1]["learners"]["default_policy"]
        assert learner["qf_loss"] > 0 and "qf_max" in learner
        firsts.append(results[0]["env_runners"]["episode_return_mean"])
    assert firsts[0] != firsts[1], "each seed its own envs"
    checkpoint = find_checkpoint(Path(summary.trials[1].path)).path
    played = eval_json(capsys, checkpoint, "-n", "1")
    assert played["episodes"] == 1 and played["returns"]["mean"] >= 8  # CartPole's shortest
    pipeline = Policy.from_checkpoint(checkpoint).env_to_module
    [observation_filter] = [p for p in pipeline.connectors if isinstance(p, MeanStdFilter)]
    [stats] = observation_filter.get_state()[None]["running_stats"]
    assert stats["num_pushes"] > 2016  # its 4 envs' observations at every step, and resets
    [part] = Path(summary.run_dir).glob("stack/checkpoint_*/part_0")
    state = pickle.loads((part / "algorithm_state.pkl").read_bytes())[REPLAY_STATE]
    assert state["envs"] == 4 and state["columns"]["truncateds"].shape[:2] == (2, 2016)


def test_the_shipped_hopper_ppo_stacks_with_each_seeds_filter_and_reward_scale(
    ray_session, capsys, tmp_path
):
    """experiments/mujoco/hopper_ppo.yaml (CleanRL's networks, mean_std_filter, reward_scaling)
    on two stacked seeds, one short iteration: each seed a trial whose checkpoint rlplat eval
    plays behind that seed's own filter, the stack's learner state holding each seed's reward
    scale."""
    from rlplat.algorithms.stacked.ppo import REWARD_SCALING

    path = Path(__file__).parents[2] / "experiments" / "mujoco" / "hopper_ppo.yaml"
    overrides = ["seeds=2", "stacked=true", "resources.driver.cpus=1", "stop.env_steps=256",
                 "training.train_batch_size_per_learner=256", "training.num_epochs=1",
                 "checkpoint.every=0", "checkpoint.at_end=true",
                 f"output_dir={tmp_path}"]  # fmt: skip
    summary = train(load_experiment(path, overrides), console=Console(quiet=True))
    assert [t.status for t in summary.trials] == ["finished"] * 2
    played = eval_json(capsys, find_checkpoint(Path(summary.trials[0].path)).path, "-n", "1")
    assert played["episodes"] == 1 and played["returns"]["mean"] != 0
    [part] = Path(summary.run_dir).glob("stack/checkpoint_*/part_0")
    learner = next(part.rglob("learner/state.pkl"))
    scales = pickle.loads(learner.read_bytes())[REWARD_SCALING]
    assert scales["count"].tolist() == [256.0, 256.0]
    assert scales["var"][0] != scales["var"][1]  # each seed its own returns



def test_one_stacked_ppo_update_is_rlplats_ppo_update_on_the_seeds_episodes():
    """One full-batch PPO update of a stacked Hopper seed (CleanRL's networks, reward scaling,
    episodes ending inside the batch) moves every parameter as rlplat's PPO learner (RLlib's
    loss, GAE and bootstrap rows) moves the same network on that seed's episodes."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.learner.training_data import TrainingData
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from rlplat.algorithms.rllib_learners import PPOLearner
    from rlplat.algorithms.stacked.ppo import StackedPPOConfig
    from rlplat.algorithms.stacked.runner import StackedEnvRunner
    from rlplat.environments.reward_scaling import RewardScaling

    steps, seed = 128, 1
    model_config = {  # CleanRL's MuJoCo networks, as experiments/mujoco/*_ppo.yaml
        "fcnet_hiddens": [16],
        "vf_share_layers": False,
        "fcnet_kernel_initializer": "orthogonal_",
        "fcnet_kernel_initializer_kwargs": {"gain": 2**0.5},
        "fcnet_bias_initializer": "zeros_",
        "free_log_std": True,
    }
    training = {"train_batch_size_per_learner": steps, "minibatch_size": steps, "num_epochs": 1,
                "lr": 0.01, "grad_clip": None, "vf_clip_param": float("inf"),
                "learner_connector": lambda *_: [RewardScaling(gamma=0.99)]}  # fmt: skip
    config = (
        StackedPPOConfig()
        .environment("Hopper-v5")
        .env_runners(num_envs_per_env_runner=1)
        .training(**training)
        .rl_module(model_config=model_config)
        .debugging(seed=0)
        .stacked(seeds=[3, 4])
    )
    runner = StackedEnvRunner(config=config)
    [rollout] = runner.sample()
    env = gym.make("Hopper-v5")
    spaces = {DEFAULT_MODULE_ID: (env.observation_space, env.action_space)}
    stack = config.build_learner(spaces=spaces)
    stack.module[DEFAULT_MODULE_ID].unwrapped().load_state_dict(runner.module.state_dict())
    single = (
        PPOConfig()
        .environment("Hopper-v5")
        .training(**training, learner_class=PPOLearner)
        .rl_module(model_config=model_config)
        .build_learner(spaces=spaces)
    )
    alone = single.module[DEFAULT_MODULE_ID].unwrapped()
    start = runner.module.seed_module_state(seed)
    alone.load_state_dict(alone.state_dict() | start)
    columns = {name: column[seed, :, 0] for name, column in rollout.columns.items()}
    ends = torch.nonzero(columns["terminateds"] | columns["truncateds"]).flatten().tolist()
    assert ends, "an episode ends inside the batch"
    episodes, begin = [], 0
    for end in [*ends, steps - 1] if ends[-1] != steps - 1 else ends:
        rows = slice(begin, end + 1)
        obs = columns[Columns.OBS][rows]
        inputs = alone.forward_exploration({Columns.OBS: obs})[Columns.ACTION_DIST_INPUTS]
        episodes.append(SingleAgentEpisode(
            observations=[*obs.numpy(), columns[Columns.NEXT_OBS][end].numpy()],
            actions=list(columns[Columns.ACTIONS][rows].numpy()),
            rewards=list(columns["rewards"][rows].numpy()),
            extra_model_outputs={Columns.ACTION_LOGP: list(columns[Columns.ACTION_LOGP][rows]),
                                 Columns.ACTION_DIST_INPUTS: list(inputs.detach().numpy())},
            terminated=bool(columns["terminateds"][end]),
            truncated=bool(columns["truncateds"][end]),
            observation_space=env.observation_space, action_space=env.action_space,
            len_lookback_buffer=0,
        ))  # fmt: skip
        begin = end + 1
    timesteps = {"num_env_steps_sampled_lifetime": steps}
    single.update(episodes=episodes, timesteps=timesteps, num_epochs=1, minibatch_size=None)
    stack.update(training_data=TrainingData(episodes=[rollout]), timesteps=timesteps,
                 num_epochs=1, minibatch_size=steps)  # fmt: skip
    after = stack.module[DEFAULT_MODULE_ID].unwrapped().seed_module_state(seed)
    moved = alone.state_dict()
    for name, tensor in after.items():  # lr 0.01: a different update moves elements by ~0.02
        assert not torch.equal(tensor, start[name]), name
        torch.testing.assert_close(tensor, moved[name], rtol=0, atol=1e-4, msg=name)
    runner.stop()
