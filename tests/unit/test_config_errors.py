"""Every bad input is rejected before Ray starts: exit code 2, file:line, key, allowed values.

The checks ``rlplat train`` makes before Ray's start, run here as the command runs them; the
command's own exit code and paragraph are checked by tests/e2e (test_cli, the error catalog)."""

from __future__ import annotations

import sys

import pytest

from tests.helpers import EXPERIMENTS, TINY_PPO, assert_rejected, rejection, replace

CASES = {
    # id: (edit of the tiny experiment, overrides, strings the message must contain)
    "unknown top-level key": (
        lambda t: replace(t, "algorithm: PPO", "algoritm: PPO"),
        [],
        ["exp.yaml:2", "'algoritm'", "Did you mean 'algorithm'?", "Allowed here:"],
    ),
    "unknown key in our section": (
        lambda t: replace(t, "iterations: 3", "iteration: 3"),
        [],
        ["exp.yaml:13", "stop.iteration", "Did you mean 'iterations'?", "env_steps"],
    ),
    "unknown RLlib key": (
        lambda t: replace(t, "num_epochs: 2", "num_epoch: 2"),
        [],
        ["exp.yaml:9", "training.num_epoch", "PPOConfig.training()", "Did you mean 'num_epochs'?"],
    ),
    "wrong type in our section": (
        lambda t: replace(t, "iterations: 3", "iterations: many"),
        [],
        ["exp.yaml:13", "stop.iterations", "valid integer", "'many'"],
    ),
    "wrong type in an RLlib section": (
        lambda t: replace(t, "num_epochs: 2", "num_epochs: two"),
        [],
        ["exp.yaml:9", "training.num_epochs", "wrong type", "'two'"],
    ),
    "unknown env id": (
        lambda t: replace(t, "CartPole-v1", "CartPol-v1"),
        [],
        ["exp.yaml:5", "env.id", "'CartPol-v1'", "Did you mean 'CartPole-v1'?"],
    ),
    "unknown algorithm": (
        lambda t: replace(t, "algorithm: PPO", "algorithm: PPOO"),
        [],
        ["exp.yaml:2", "'algorithm'", "Did you mean 'PPO'?", "DQN", "SAC"],
    ),
    "RLlib key that rlplat owns": (
        lambda t: replace(t, "num_epochs: 2", "num_epochs: 2\nenv_runners:\n  num_env_runners: 2"),
        [],
        ["env_runners.num_env_runners", "resources.env_runners.count"],
    ),
    "duplicate key": (
        lambda t: replace(t, "seed: 3", "seed: 3\nseed: 4"),
        [],
        ["exp.yaml:4", "duplicate key", "only once"],
    ),
    "tab indentation": (
        lambda t: replace(t, "  id: CartPole-v1", "\tid: CartPole-v1"),
        [],
        ["exp.yaml:5", "tabs are not allowed"],
    ),
    "missing required section": (
        lambda t: replace(t, "env:\n  id: CartPole-v1\n", ""),
        [],
        ["'env'", "required"],
    ),
    "no stop condition": (
        lambda t: replace(t, "stop:\n  iterations: 3\n", "stop: {}\n"),
        [],
        ["'stop'", "at least one stop condition", "env_steps"],
    ),
    "unknown checkpoint metric": (
        lambda t: t + "checkpoint_extra: 1\n",
        [],
        ["'checkpoint_extra'", "Did you mean 'checkpoint'?"],
    ),
    "unknown score metric": (
        lambda t: replace(t, "keep: 2", "keep: 2\n  score: reward"),
        [],
        ["checkpoint.score", "'reward'", "episode_return_mean"],
    ),
    "bad override syntax": (lambda t: t, ["training.lr"], ["command line", "section.key=value"]),
    "override with a wrong type": (
        lambda t: t,
        ["training.lr=fast"],
        ["command-line override 'training.lr=fast'", "training.lr", "wrong type"],
    ),
    "override of an unknown key": (
        lambda t: t,
        ["stop.env_step=100"],
        ["command-line override 'stop.env_step=100'", "Did you mean 'env_steps'?"],
    ),
    "env kwargs the env rejects": (
        lambda t: replace(
            t, "id: CartPole-v1", "factory: envs.corridor:Corridor\n  kwargs: {lenght: 4}"
        ),
        [],
        ["env.kwargs", "rejected its arguments", "lenght"],
    ),
    "factory that does not exist": (
        lambda t: replace(t, "id: CartPole-v1", "factory: envs.corridor:Coridor"),
        [],
        ["env.factory", "no attribute 'Coridor'", "Did you mean 'Corridor'?"],
    ),
    "unknown connector": (
        lambda t: t + "connectors: [mean_std_filtr]\n",
        [],
        ["exp.yaml:", "'connectors'", "unknown connector", "Did you mean 'mean_std_filter'?"],
    ),
    "unknown connector option": (
        lambda t: t + "connectors: [{frame_stack: {frames: 4}}]\n",
        [],
        ["'connectors'", "no option 'frames'", "num_frames"],
    ),
    "connector that cannot take the observations": (
        lambda t: t + "connectors: [mean_std_filter, {frame_stack: {num_frames: 4}}]\n",
        [],
        ["connectors[1]", "'frame_stack' cannot take the observations", "(height, width, 1)"],
    ),
    "RLlib connector callable": (
        lambda t: t + "env_runners:\n  env_to_module_connector: x\n",
        [],
        ["env_runners.env_to_module_connector", "'connectors'"],
    ),
    "video without checkpoints": (
        lambda t: replace(t, "every: 1", "every: 2") + "video: {every: 3}\n",
        [],
        ["'video'", "multiple of checkpoint.every"],
    ),
    "video of an env without frames": (
        lambda t: (
            replace(t, "id: CartPole-v1", "factory: envs.corridor:Corridor") + "video: {every: 1}\n"
        ),
        [],
        ["video.every", "rgb_array", "renders only: ansi"],
    ),
    "misspelt placement strategy": (
        lambda t: t,
        ["resources.placement=SPRED"],
        ["resources.placement", "'SPRED'", "Did you mean 'SPREAD'?", "STRICT_PACK"],
    ),
    "CPU as a custom resource": (
        lambda t: replace(
            t, "env_runners: {count: 0}", "env_runners: {count: 0, custom: {CPU: 1}}"
        ),
        [],
        ["exp.yaml:11", "resources.env_runners.custom", "'CPU' is not a custom resource", "cpus"],
    ),
    "unknown key in a preference": (
        lambda t: replace(t, "env_runners: {count: 0}", "env_runners: {prefer: [{npu: 1}]}"),
        [],
        ["resources.env_runners.prefer.0.npu", "unknown key 'npu'", "custom"],
    ),
    "envs per runner set twice": (
        lambda t: t + "env_runners:\n  num_envs_per_env_runner: 4\n",
        [],
        ["env_runners.num_envs_per_env_runner", "resources.env_runners.envs"],
    ),
    "value RLlib rejects": (
        lambda t: replace(t, "minibatch_size: 64", "minibatch_size: 100000"),
        [],
        ["validate() rejected", "minibatch_size"],
    ),
    "transition sampler on a multi-agent env": (
        lambda t: replace(
            replace(t, "algorithm: PPO", "algorithm: DQN"),
            "env:\n  id: CartPole-v1",
            "env:\n  pettingzoo: mpe2.simple_spread_v3\n  kwargs: {N: 2, max_cycles: 10}",
        ).replace(
            "  minibatch_size: 64\n  num_epochs: 2\n",
            "  replay_buffer_config: {type: TransitionEpisodeReplayBuffer}\n",
        ),
        [],
        ["training.replay_buffer_config.type", "single-agent", "EpisodeReplayBuffer"],
    ),
    "TD3 on discrete actions": (
        lambda t: replace(t, "  minibatch_size: 64\n  num_epochs: 2\n", ""),
        ["algorithm=TD3"],
        ["'algorithm'", "TD3 needs a continuous (Box) action space", "Discrete(2)", "SAC or DQN"],
    ),
    "TD3 on several learners": (
        lambda t: replace(
            replace(t, "  minibatch_size: 64\n  num_epochs: 2\n", ""),
            "id: CartPole-v1",
            "id: Pendulum-v1",
        ),
        ["algorithm=TD3", "resources.learners.count=2"],
        ["resources.learners.count must be 0 or 1, got 2", "synchronise"],
    ),
    "network setting RLlib's networks do not read": (
        lambda t: t,
        ["rl_module.model_config.use_lstmm=true"],
        ["rl_module.model_config.use_lstmm", "do not read 'use_lstmm'", "Did you mean 'use_lstm'?"],
    ),
    "network setting an own network does not read": (
        lambda t: replace(t, "  minibatch_size: 64\n  num_epochs: 2\n", ""),
        ["algorithm=PQN", "rl_module.model_config.use_lstm=true"],
        ["rl_module.model_config.use_lstm", "PQN's networks are rlplat's own", "hiddens"],
    ),
    "training setting under model_config": (
        lambda t: replace(
            replace(t, "  minibatch_size: 64\n  num_epochs: 2\n", ""),
            "id: CartPole-v1",
            "id: Pendulum-v1",
        ),
        ["algorithm=TD3", "rl_module.model_config.actor_hiddens=[32]"],
        ["actor_hiddens is a training setting of TD3", "set training.actor_hiddens"],
    ),
    "unknown optimizer type": (
        lambda t: replace(t, "num_epochs: 2", "num_epochs: 2\n  optimizer: {type: sdg, lr: 0.1}"),
        [],
        ["training.optimizer.type", "'sdg'", "Did you mean 'sgd'?"],
    ),
    "argument the optimizer does not take": (
        lambda t: replace(
            t, "num_epochs: 2", "num_epochs: 2\n  optimizer: {type: adam, momentum: 0.9}"
        ),
        [],
        ["training.optimizer.momentum", "torch.optim.Adam takes no argument 'momentum'", "betas"],
    ),
    "optimizer for a learner with its own": (
        lambda t: replace(
            t, "  minibatch_size: 64\n  num_epochs: 2\n", "  optimizer: {type: sgd}\n"
        ),
        ["algorithm=SAC"],
        ["training.optimizer", "SAC's learner sets up its own optimizers", "alpha_lr", "PPO, APPO"],
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_bad_input_exits_2_with_a_clear_message(case, write_yaml, tmp_path):
    edit, overrides, expected = CASES[case]
    path = write_yaml(edit(TINY_PPO.replace("OUTPUT", str(tmp_path / "out"))))
    assert_rejected(path, expected, tmp_path / "out", *overrides)


def test_missing_file(tmp_path):
    message = rejection(tmp_path / "nope.yaml")
    assert "nope.yaml" in message and "not found" in message and "Did you mean" not in message
    (tmp_path / "exp.yaml").write_text(TINY_PPO)
    message = rejection(tmp_path / "exp.yml")
    assert f"Did you mean '{tmp_path}/exp.yaml'?" in message


def test_from_a_path_without_checkpoints_is_refused(tmp_path):
    """rlplat train --from <path> is the override init.checkpoint=<path>."""
    empty = tmp_path / "nothing"
    empty.mkdir()
    message = rejection(EXPERIMENTS / "cartpole_ppo.yaml", f"init.checkpoint={empty}")
    assert "key 'init.checkpoint'" in message and "no checkpoint found" in message


def test_seed_option_sets_the_runs_seed():
    """rlplat train --seed N (as SB3 and CleanRL users type it) is the override seed=N."""
    from rlplat.experiment.load import load_experiment
    from rlplat.run.options import TrainOptions

    overrides = TrainOptions(seed=7).with_overrides(["stop.env_steps=1000"])
    assert load_experiment(EXPERIMENTS / "cartpole_ppo.yaml", overrides).experiment.seed == 7


def test_step_counts_may_be_written_as_whole_floats():
    from rlplat.experiment.load import load_experiment

    overrides = ["stop.env_steps=1e5", "stop.iterations=20.0"]
    stop = load_experiment(EXPERIMENTS / "cartpole_ppo.yaml", overrides).experiment.stop
    assert (stop.env_steps, stop.iterations) == (100_000, 20)
    message = rejection(EXPERIMENTS / "cartpole_ppo.yaml", "stop.env_steps=2.5")
    assert "key 'stop.env_steps'" in message and "valid integer (got 2.5)" in message


def test_a_score_naming_a_policy_the_run_does_not_have_is_refused():
    """connect_four trained as one shared policy keeps the file's policy_return_mean/learner:
    no result would carry it, so every checkpoint would be unscored and "best" arbitrary."""
    shared = ["multi_agent.policies=shared", "multi_agent.random=[]"]
    message = rejection(EXPERIMENTS / "connect_four_ppo.yaml", *shared)
    assert "key 'checkpoint.score'" in message and "policy 'learner'" in message
    assert "its policy ids are shared" in message
    message = rejection(EXPERIMENTS / "cartpole_ppo.yaml", "checkpoint.score=agent_return_mean/a")
    assert "no agent ids" in message and "episode_return_mean" in message


def test_a_complex_key_holding_a_list_is_invalid_yaml():
    """ruamel raises TypeError while hashing such a key: one paragraph, not a traceback."""
    from rlplat.errors import ConfigError
    from rlplat.experiment.yaml_io import parse_yaml

    with pytest.raises(ConfigError, match="a key is itself a mapping holding a list") as info:
        parse_yaml("training:\n  ? {lr: [1, 2]}\n  : 1\n", "exp.yaml")
    assert info.value.exit_code == 2


def test_a_key_under_an_overridden_section_is_located_at_the_override(tmp_path):
    """The override replaced the whole list, so the file's line for it would be wrong."""
    path = tmp_path / "exp.yaml"
    text = TINY_PPO.replace("OUTPUT", str(tmp_path / "out")) + "connectors: [mean_std_filter]\n"
    path.write_text(text)
    message = rejection(path, "algorithm=DQN", "connectors=[reward_scaling]")
    assert message.startswith("command-line override 'connectors=[reward_scaling]'"), message
    assert "works with PPO, APPO, IMPALA" in message


def test_keep_first_in_a_pool_of_one_is_refused():
    """The new snapshot would be dropped as soon as it was taken: the pool would never change."""
    selfplay = EXPERIMENTS / "connect_four_selfplay.yaml"
    message = rejection(selfplay, "multi_agent.self_play.pool={size: 1, keep_first: true}")
    assert "multi_agent.self_play.pool" in message and "at least 2 snapshots" in message


def test_a_first_stage_is_refused_beside_a_checkpoint_several_trials_or_a_missing_file(
    tmp_path,
):
    """init.experiment trains one run and starts this one from it: not with a checkpoint too,
    not for seeds or a search (whose trials would need one first run each)."""
    (tmp_path / "first.yaml").write_text(TINY_PPO.replace("OUTPUT", str(tmp_path / "out")))
    path = tmp_path / "exp.yaml"
    path.write_text(
        TINY_PPO.replace("OUTPUT", str(tmp_path / "out")) + "init: {experiment: first.yaml}\n"
    )
    assert "not both" in rejection(path, f"init.checkpoint={tmp_path}")
    message = rejection(path, "seeds=2")
    assert message.startswith(f"{path}:18") and "key 'init.experiment'" in message, message
    assert "several trials" in message and "--from" in message
    message = rejection(path, "init.experiment=firts.yaml")
    assert f"{tmp_path / 'firts.yaml'} is not a file" in message, message


def test_an_algorithm_for_discrete_actions_is_refused_on_box_actions():
    message = rejection(EXPERIMENTS / "cartpole_dqn.yaml", "env.id=Pendulum-v1")
    assert "key 'algorithm'" in message and "DQN needs a Discrete action space" in message
    assert "SAC or TD3" in message


def test_a_key_rllib_ignores_beside_the_one_it_uses_is_refused():
    message = rejection(EXPERIMENTS / "cartpole_ppo.yaml", "training.train_batch_size=4000")
    assert "key 'training.train_batch_size'" in message
    assert "cartpole_ppo.yaml:20" in message and "remove train_batch_size" in message


def test_an_id_a_package_registers_on_import_is_named_with_its_package(monkeypatch):
    """MiniGrid registers its ids when imported: the bare id is refused with the form that
    works, and that form (Gymnasium's module:EnvId) passes. (MiniGrid's modules and ids are
    taken out as a fresh process has them, whatever other tests imported.)"""
    import gymnasium

    for name in [name for name in sys.modules if name.split(".")[0] == "minigrid"]:
        monkeypatch.delitem(sys.modules, name)
    for env_id in [env_id for env_id in gymnasium.registry if env_id.startswith("MiniGrid-")]:
        monkeypatch.delitem(gymnasium.registry, env_id)
    message = rejection(EXPERIMENTS / "cartpole_ppo.yaml", "env.id=MiniGrid-Empty-5x5-v0")
    assert "write 'minigrid:MiniGrid-Empty-5x5-v0'" in message
    message = rejection(EXPERIMENTS / "cartpole_ppo.yaml", "env.id=minigrid:MiniGrid-Nope-v0")
    assert (
        "'MiniGrid-Nope-v0' is not a registered Gymnasium id after importing 'minigrid'" in message
    )
    message = rejection(EXPERIMENTS / "cartpole_ppo.yaml", "env.id=nopkg:Thing-v0")
    assert "cannot import 'nopkg'" in message and "key 'env.id'" in message


@pytest.mark.parametrize("env_id", ["''", "-v1", "nopkg.sub-v0"])
def test_an_id_that_names_no_package_is_unknown_not_a_traceback(env_id):
    """An id whose first word is no module name (empty, or dotted: looking a dotted name up
    imports its parent) is an unknown id; the fuzz test found ``id: ''`` raising ValueError."""
    message = rejection(EXPERIMENTS / "cartpole_ppo.yaml", f"env.id={env_id}")
    assert "unknown Gymnasium environment" in message and "env.id" in message


def test_a_module_rllib_cannot_build_is_refused_before_ray_with_the_key_to_change():
    """RLlib has no CNN for 7x7 frames; an explicit conv_filters that it cannot build is
    refused by the probe (module built on the env's spaces) instead of 80 s into the run."""
    frames = [
        "env.id=minigrid:MiniGrid-Empty-5x5-v0",
        "env.wrappers=[minigrid.wrappers:ImgObsWrapper]",
    ]
    message = rejection(
        EXPERIMENTS / "cartpole_ppo.yaml",
        *frames,
        "rl_module.model_config.conv_filters=[[16, [8, 8], 4, valid]]",
    )
    assert "key 'rl_module.model_config.conv_filters'" in message, message
    assert "failed while building the RLModule or sampling" in message
    assert "assert input_dim > 0" in message and "before Ray starts" in message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"name: caf\xe9\nalgorithm: PPO\n", "is not UTF-8 text: byte 0xe9 at line 1"),
        (
            b"name: x\na0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
            + b"".join(
                f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n".encode() for i in range(1, 9)
            ),
            "more than 100,000 values once its YAML aliases",
        ),
        (b"x: [" + b"1, " * 400_000 + b"1]\n", "experiment files are at most 1 MiB"),
    ],
    ids=["latin-1", "alias bomb", "1.1 MiB"],
)
def test_unreadable_experiment_files_exit_2_at_once(tmp_path, content, expected):
    path = tmp_path / "exp.yaml"
    path.write_bytes(content)
    message = rejection(path)
    assert message.startswith(str(path)) and expected in message, message


def test_the_vmas_backend_names_which_of_its_two_conditions_failed():
    vmas = EXPERIMENTS / "marl" / "vmas_balance_ppo.yaml"
    wrapped = rejection(vmas, "env.wrappers=[gymnasium.wrappers:RecordEpisodeStatistics]")
    assert "remove env.wrappers" in wrapped and "factory" not in wrapped
    other = rejection(vmas, "env.factory=envs.corridor:Corridor", "env.kwargs={}")
    assert "factory: rlplat.environments.gymma:vmas_scenario" in other
    assert "wrappers" not in other
