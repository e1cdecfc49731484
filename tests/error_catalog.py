"""Every class of bad input rlplat answers, run for real: the source of docs/errors.md.

``python -m tests.error_catalog > docs/errors.md`` runs each case with the ``rlplat`` command
and writes the table; ``tests/e2e/test_error_catalog.py`` runs them again and checks the table is
current. Paths under the scratch directory print as ``<dir>``, run timestamps as ``<time>``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

BASE = """\
name: bad
algorithm: PPO
env: {id: CartPole-v1}
training: {train_batch_size_per_learner: 256, minibatch_size: 64, num_epochs: 1}
resources:
  env_runners: {count: 0}
stop: {iterations: 2}
output_dir: out
"""
OFFLINE = """\
name: bad
algorithm: BC
env: {id: CartPole-v1}
offline: {input: empty}
stop: {iterations: 2}
output_dir: out
"""
# A Gymnasium multi-agent env declaring three agents' observations but two agents' actions.
LOPSIDED = """\
import gymnasium as gym

class Lopsided(gym.Env):
    observation_space = gym.spaces.Tuple([gym.spaces.Box(0, 1, (2,))] * 3)
    action_space = gym.spaces.Tuple([gym.spaces.Discrete(2)] * 2)

gym.register("Lopsided-v0", entry_point=Lopsided)
"""
SELF_PLAY = BASE.replace(
    "env: {id: CartPole-v1}",
    """env: {pettingzoo: pettingzoo.classic.tictactoe_v3}
multi_agent:
  policies: {player_1: main, player_2: opponent}
  self_play: {learner: main, opponents: opponent}""",
)
FLAKY = BASE.replace("{id: CartPole-v1}", '{factory: "envs.flaky:FlakyCartPole"}')
# A remote runner whose env raised waits before it exits (rlplat's default 10 s); 1 s here.
REMOTE_FLAKY = FLAKY + "fault_tolerance: {delay_between_env_runner_restarts_s: 1}\n"


def _edit(old: str, new: str, text: str = BASE) -> dict[str, str]:
    assert old in text, old
    return {"exp.yaml": text.replace(old, new)}


@dataclass
class Case:
    what: str  # the class of bad input
    args: list[str]  # the rlplat command line, run in the scratch directory
    files: dict[str, str] = field(default_factory=lambda: {"exp.yaml": BASE})
    setup: Callable[[Path, Path], None] | None = None  # (scratch, trained checkpoint)
    needs_ray: bool = False  # gets --address when the catalog runs on a cluster
    exit: int = 2  # 2: bad input; 1: a failure at run time


def _another_ray_version(scratch: Path, checkpoint: Path) -> None:
    """A checkpoint whose files say Ray 2.50.0 wrote it, and whose state this Ray cannot read."""
    target = scratch / "old_checkpoint"
    shutil.copytree(checkpoint, target)
    marker = target / "rllib_checkpoint.json"
    marker.write_text(marker.read_text().replace('"2.60.0"', '"2.50.0"'))
    module = target / "learner_group/learner/rl_module/default_policy"
    (module / "class_and_ctor_args.pkl").write_bytes(b"not a pickle of this Ray")


def _missing_class(scratch: Path, checkpoint: Path) -> None:
    """A checkpoint of a run whose custom environment class is not installed here."""
    target = scratch / "custom_checkpoint"
    shutil.copytree(checkpoint, target)
    experiment = target / "experiment.yaml"
    text = experiment.read_text().replace("  id: CartPole-v1", "  id: null", 1)
    experiment.write_text(text.replace("  factory: null", "  factory: my_lab_envs:Maze", 1))


def _missing_policy_class(scratch: Path, checkpoint: Path) -> None:
    """A checkpoint whose policy class lives in a module this machine does not have."""
    import pickle
    import types

    target = scratch / "custom_policy_checkpoint"
    shutil.copytree(checkpoint, target)
    module = types.ModuleType("my_lab_models")

    class TransformerPolicy:  # stands for a user's own RLModule class
        pass

    TransformerPolicy.__module__ = module.__name__
    TransformerPolicy.__qualname__ = "TransformerPolicy"
    module.TransformerPolicy = TransformerPolicy
    sys.modules[module.__name__] = module
    try:
        data = pickle.dumps({"class": TransformerPolicy, "ctor_args_and_kwargs": ((), {})})
    finally:
        del sys.modules[module.__name__]
    policy = target / "learner_group/learner/rl_module/default_policy"
    (policy / "class_and_ctor_args.pkl").write_bytes(data)


def _empty_dir(scratch: Path, checkpoint: Path) -> None:
    (scratch / "empty").mkdir()


def _copy(scratch: Path, checkpoint: Path) -> None:
    shutil.copytree(checkpoint, scratch / "checkpoint")


def _env_gone(scratch: Path, checkpoint: Path) -> None:
    """A checkpoint whose env is not registered here (a Gymnasium id of another package)."""
    _copy(scratch, checkpoint)
    experiment = scratch / "checkpoint" / "experiment.yaml"
    experiment.write_text(experiment.read_text().replace("CartPole-v1", "LabMaze-v3"))


CLOSED_PORT = 9  # the discard port: nothing listens on it here


def _no_wandb_key(scratch: Path, checkpoint: Path) -> None:
    """No W&B key in the environment or a netrc file (the case runs in its own process)."""
    os.environ.pop("WANDB_API_KEY", None)
    os.environ["NETRC"] = str(scratch / "no-netrc")


def _run(scratch: Path, checkpoint: Path) -> None:
    """The trained checkpoint's whole run directory, as ``run``."""
    shutil.copytree(checkpoint.parents[1], scratch / "run")


def _run_without_checkpoints(scratch: Path, checkpoint: Path) -> None:
    _run(scratch, checkpoint)
    for kept in (scratch / "run").glob("trial_*/checkpoint_*"):
        shutil.rmtree(kept)


def _exported(scratch: Path, checkpoint: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "rlplat.cli",
            "export",
            str(checkpoint),
            "--out",
            "exported",
            "-n",
            "1",
        ],
        cwd=scratch,
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


CASES = [
    Case(
        "Offline algorithm without data",
        ["train", "exp.yaml"],
        {"exp.yaml": OFFLINE.replace("offline: {input: empty}\n", "")},
    ),
    Case(
        "Offline data for an online algorithm",
        ["train", "exp.yaml", "algorithm=PPO"],
        {"exp.yaml": OFFLINE},
        setup=_empty_dir,
    ),
    Case(
        "offline.input that is not a dataset",
        ["train", "exp.yaml"],
        {"exp.yaml": OFFLINE},
        setup=_empty_dir,
    ),
    Case("dataset without a source", ["dataset", "checkpoint", "--out", "data"], setup=_copy),
    Case(
        "dataset --from-replay of an on-policy run",
        ["dataset", "checkpoint", "--from-replay", "--out", "data"],
        setup=_copy,
    ),
    Case(
        "checkpoint.score naming a policy the run does not have",
        ["train", "exp.yaml", "checkpoint.score=policy_return_mean/learner"],
    ),
    Case("TD3 on discrete actions", ["train", "exp.yaml", "algorithm=TD3"]),
    Case(
        "DQN on continuous actions",
        ["train", "exp.yaml", "algorithm=DQN", "env.id=Pendulum-v1", "training={}"],
    ),
    Case(
        "a key RLlib ignores beside the one it uses",
        ["train", "exp.yaml", "training.train_batch_size=4000"],
    ),
    Case(
        "an id its package registers on import, written bare",
        ["train", "exp.yaml", "env.id=MiniGrid-Empty-5x5-v0"],
    ),
    Case(
        "a model RLlib cannot build for the env's observations (the probe)",
        [
            "train",
            "exp.yaml",
            "env.id=minigrid:MiniGrid-Empty-5x5-v0",
            "env.wrappers=[minigrid.wrappers:ImgObsWrapper]",
            "rl_module.model_config.conv_filters=[[16, [8, 8], 4, valid]]",
        ],
    ),
    Case(
        "checkpoint.score that no result carries",
        ["train", "exp.yaml", "checkpoint.score=env_runners/episode_retrun_mean"],
    ),
    Case(
        "evaluation that RLlib reads as off",
        ["train", "exp.yaml", "evaluation.evaluation_interval=0"],
    ),
    Case(
        "YAML aliases that multiply",
        ["train", "bomb.yaml"],
        files={
            "bomb.yaml": "name: bomb\na0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
            + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9))
        },
    ),
    Case(
        "reward_scaling for an off-policy algorithm",
        ["train", "exp.yaml", "algorithm=DQN", "connectors=[reward_scaling]"],
    ),
    Case(
        "log_std_init without a free log std",
        ["train", "exp.yaml", "rl_module.model_config.log_std_init=-2"],
    ),
    Case(
        "SimBa without running observation statistics",
        ["train", "exp.yaml", "rl_module.model_config.simba={width: 64, blocks: 1}"],
    ),
    Case(
        "SimBa setting misspelled",
        [
            "train",
            "exp.yaml",
            "rl_module.model_config.simba={widht: 64}",
            "connectors=[mean_std_filter]",
        ],
    ),
    Case(
        "network setting misspelt (RLlib's networks)",
        ["train", "exp.yaml", "rl_module.model_config.use_lstmm=true"],
    ),
    Case(
        "network setting an own network does not read",
        ["train", "exp.yaml", "algorithm=PQN", "training={}"]
        + ["rl_module.model_config.use_lstm=true"],
    ),
    Case(
        "training setting under rl_module.model_config",
        ["train", "exp.yaml", "algorithm=DQN", "training={}"]
        + ["rl_module.model_config.dueling=false"],
    ),
    Case(
        "LSTM sequence length of 0",
        [
            "train",
            "exp.yaml",
            "rl_module.model_config.use_lstm=true",
            "rl_module.model_config.max_seq_len=0",
        ],
    ),
    Case(
        "SimBa beside an LSTM",
        ["train", "exp.yaml", "rl_module.model_config.simba={width: 64, blocks: 1}"]
        + ["rl_module.model_config.use_lstm=true", "connectors=[mean_std_filter]"],
    ),
    Case(
        "memory type misspelt",
        ["train", "exp.yaml", "rl_module.model_config.memory={type: attn}"],
    ),
    Case(
        "attention memory over 0 steps",
        ["train", "exp.yaml", "rl_module.model_config.memory={type: attention, steps: 0}"],
    ),
    Case(
        "memory beside an LSTM",
        ["train", "exp.yaml", "rl_module.model_config.memory={type: gru}"]
        + ["rl_module.model_config.use_lstm=true"],
    ),
    Case(
        "memory for an algorithm without it",
        ["train", "exp.yaml", "algorithm=DQN", "training={}"]
        + ["rl_module.model_config.memory={type: gru}"],
    ),
    Case(
        "RND setting misspelt",
        ["train", "exp.yaml", "exploration.rnd={coef: 0.5}"],
    ),
    Case(
        "RND for an algorithm without it",
        ["train", "exp.yaml", "algorithm=DQN", "training={}", "exploration.rnd={}"],
    ),
    Case(
        "RND on a multi-agent run",
        ["train", "exp.yaml", "env={pettingzoo: mpe2.simple_spread_v3}", "exploration.rnd={}"],
    ),
    Case(
        "RND beside an LSTM",
        ["train", "exp.yaml", "rl_module.model_config.use_lstm=true", "exploration.rnd={}"],
    ),
    Case(
        "hindsight relabelling on an env without goals",
        ["train", "exp.yaml", "algorithm=DQN", "training={}", "replay.her={}"],
    ),
    Case(
        "hindsight relabelling for an algorithm without a transition memory",
        ["train", "exp.yaml", "replay.her={}"],
    ),
    Case(
        "hindsight relabelling of n-step transitions",
        ["train", "exp.yaml", "algorithm=DQN", "training={n_step: 3}"]
        + ["env={factory: 'envs.bit_flip:BitFlip', kwargs: {bits: 4}}", "replay.her={}"],
    ),
    Case(
        "hindsight normalisation for a module without it",
        ["train", "exp.yaml", "algorithm=DQN", "training={}"]
        + ["env={factory: 'envs.bit_flip:BitFlip', kwargs: {bits: 4}}"]
        + ["replay.her={normalize: true}"],
    ),
    Case(
        "hindsight strategy misspelt",
        ["train", "exp.yaml", "algorithm=DQN", "training={}", "replay.her={strategy: futur}"],
    ),
    Case(
        "activation misspelt",
        ["train", "exp.yaml", "rl_module.model_config.fcnet_activation=sigmoidd"],
    ),
    Case(
        "network too large for any machine",
        ["train", "exp.yaml", "rl_module.model_config.fcnet_hiddens=[100000000]"],
    ),
    Case("count past its bound", ["train", "exp.yaml", f"checkpoint.rescore={2**63}"]),
    Case(
        "CrossQ on discrete actions",
        ["train", "exp.yaml", "algorithm=CrossQ", "training={}"],
    ),
    Case("MADDPG on a single-agent env", ["train", "exp.yaml", "algorithm=MADDPG"]),
    Case("MAPPO on a single-agent env", ["train", "exp.yaml", "algorithm=MAPPO"]),
    Case(
        "MAPPO's critic on the env's state where the env has none",
        [
            "train",
            "exp.yaml",
            "algorithm=MAPPO",
            "env={gymma: 'lbforaging:Foraging-8x8-2p-2f-coop-v3', time_limit: 50}",
            "training={global_state: env}",
        ],
    ),
    Case(
        "MADDPG on a turn-based (AEC) env",
        ["train", "exp.yaml", "algorithm=MADDPG"],
        _edit("env: {id: CartPole-v1}", "env: {pettingzoo: pettingzoo.classic.connect_four_v3}"),
    ),
    Case(
        "self-play slot naming no policy",
        ["train", "exp.yaml"],
        {"exp.yaml": SELF_PLAY.replace("opponents: opponent", "opponents: oponent")},
    ),
    Case(
        "self-play snapshot win rate outside [0, 1]",
        ["train", "exp.yaml", "multi_agent.self_play.snapshot.min_win_rate=60"],
        {"exp.yaml": SELF_PLAY},
    ),
    Case(
        "self-play snapshot bound without the win rate it bounds",
        ["train", "exp.yaml", "multi_agent.self_play.snapshot.max_every=50"],
        {"exp.yaml": SELF_PLAY},
    ),
    Case(
        "self-play pool's even share beside uniform sampling",
        [
            "train",
            "exp.yaml",
            "multi_agent.self_play.pool.sample=uniform",
            "multi_agent.self_play.pool.even=0.5",
        ],
        {"exp.yaml": SELF_PLAY},
    ),
    Case(
        "self-play on a cooperative env",
        ["train", "exp.yaml"],
        {"exp.yaml": SELF_PLAY.replace(
            "{pettingzoo: pettingzoo.classic.tictactoe_v3}",
            "{pettingzoo: mpe2.simple_spread_v3, kwargs: {N: 2}}",
        ).replace("{player_1: main, player_2: opponent}", "{agent_0: main, agent_1: opponent}")},
    ),
    Case(
        "Conditional search space under a searcher that cannot sample it",
        ["train", "exp.yaml"],
        {
            "exp.yaml": BASE.replace(
                "num_epochs: 1}",
                "num_epochs: 1,\n  optimizer: {choice: "
                "[{type: adam}, {type: sgd, momentum: {uniform: [0.5, 0.99]}}]}}",
            )
            + "tune: {num_samples: 2, searcher: bohb}\n"
        },
    ),
    Case(
        "Unknown optimizer type",
        ["train", "exp.yaml"],
        _edit("num_epochs: 1}", "num_epochs: 1, optimizer: {type: sdg}}"),
    ),
    Case(
        "eval --random of a single-agent checkpoint",
        ["eval", "checkpoint", "--random", "good"],
        setup=_copy,
    ),
    Case(
        "YAML: tab indentation",
        ["train", "exp.yaml"],
        _edit("env: {id: CartPole-v1}", "env:\n\tid: CartPole-v1"),
    ),
    Case("YAML: duplicate key", ["train", "exp.yaml"], {"exp.yaml": BASE + "algorithm: DQN\n"}),
    Case(
        "YAML: wrong nesting (a string where a section belongs)",
        ["train", "exp.yaml"],
        _edit("env: {id: CartPole-v1}", "env: CartPole-v1"),
    ),
    Case(
        "Unknown key", ["train", "exp.yaml"], _edit("stop: {iterations: 2}", "stop: {iteration: 2}")
    ),
    Case("Wrong type", ["train", "exp.yaml"], _edit("iterations: 2", "iterations: ten")),
    Case("Negative learning rate", ["train", "exp.yaml", "training.lr=-0.001"]),
    Case(
        "Stable-Baselines3's name for a setting",
        ["train", "exp.yaml", "training.learning_rate=0.001"],
    ),
    Case("gamma > 1", ["train", "exp.yaml", "training.gamma=1.5"]),
    Case(
        "Zero env runners and no local sampling",
        ["train", "exp.yaml"],
        {"exp.yaml": BASE + "env_runners: {create_local_env_runner: false}\n"},
    ),
    Case("Unknown algorithm", ["train", "exp.yaml", "algorithm=PPPO"]),
    Case("Unknown environment", ["train", "exp.yaml", "env.id=CartPol-v1"]),
    Case(
        "Unknown wrapper",
        ["train", "exp.yaml"],
        _edit("{id: CartPole-v1}", "{id: CartPole-v1, wrappers: [flatten_observaton]}"),
    ),
    Case(
        "Gymnasium multi-agent id that does not resolve",
        ["train", "exp.yaml", "env={gymma: 'lbforaging:Foraging-8x8-2p-2f-cop-v3'}"],
    ),
    Case(
        "Gymnasium multi-agent env with more observations than agents",
        ["train", "exp.yaml", "env={gymma: 'lopsided:Lopsided-v0'}"],
        {"exp.yaml": BASE, "lopsided.py": LOPSIDED},
    ),
    Case(
        "Gymnasium multi-agent time limit <= 0",
        ["train", "exp.yaml", "env={gymma: 'lbforaging:Foraging-8x8-2p-2f-v3', time_limit: 0}"],
    ),
    Case("Atari preset on a non-Atari env", ["train", "exp.yaml", "env.preset=atari"]),
    Case(
        "Frame stacking on observations that are not frames",
        ["train", "exp.yaml"],
        _edit(
            "{id: CartPole-v1}",
            '{id: CartPole-v1, wrappers: ["rlplat.environments.atari:StackFrames"]}',
        ),
    ),
    Case(
        "Unknown searcher", ["train", "exp.yaml"], {"exp.yaml": BASE + "tune: {searcher: optima}\n"}
    ),
    Case("Env kwargs the env rejects", ["train", "exp.yaml", "env.kwargs={colour: red}"]),
    Case(
        "Env kwarg misspelt",
        ["train", "exp.yaml", "env.kwargs={sutton_barto_rewards: true}"],
    ),
    Case(
        "Env kwarg the env warns it left unused (a VMAS scenario's)",
        [
            "train",
            "exp.yaml",
            "env.factory=rlplat.environments.gymma:vmas_scenario",
            "env.kwargs={scenario: balance, max_steps: 50, n_agnts: 3}",
            "multi_agent.policies=shared",
        ],
        _edit("env: {id: CartPole-v1}", "env: {id: null}"),
    ),
    Case(
        "Several seeds in the command's own process",
        ["train", "exp.yaml", "--seeds", "3", "resources.driver.process=command"],
    ),
    Case("Malformed override", ["train", "exp.yaml", "training.lr"]),
    Case(
        "Env raising on reset",
        ["train", "exp.yaml", "env.kwargs={crash_on_reset: true}"],
        {"exp.yaml": FLAKY},
    ),
    Case(
        "Env raising on a step",
        ["train", "exp.yaml", "env.kwargs={crash_at_step: 1}"],
        {"exp.yaml": FLAKY},
    ),
    Case(
        "Env returning Gymnasium's old 4-tuple from step",
        ["train", "exp.yaml", "env.kwargs={old_step_api: true}"],
        {"exp.yaml": FLAKY},
    ),
    Case(
        "Observations outside the observation space",
        ["train", "exp.yaml", "env.kwargs={observation_offset: 40}"],
        {"exp.yaml": FLAKY},
    ),
    Case(
        "NaN rewards",
        ["train", "exp.yaml", "env.kwargs={nan_reward: true}"],
        {"exp.yaml": FLAKY},
    ),
    Case(
        "Env raising on every step (during training in the env runners)",
        [
            "train",
            "exp.yaml",
            "resources.env_runners.count=1",
            "env.kwargs={crash_at_step: 1, faults_in_ray_actors: true}",
        ],
        {"exp.yaml": REMOTE_FLAKY},
        needs_ray=True,
        exit=1,
    ),
    Case(
        "Env returning the old 4-tuple (during training in the env runners)",
        [
            "train",
            "exp.yaml",
            "resources.env_runners.count=1",
            "env.kwargs={old_step_api: true, faults_in_ray_actors: true}",
        ],
        {"exp.yaml": REMOTE_FLAKY},
        needs_ray=True,
        exit=1,
    ),
    Case(
        "NaN losses (during training in the env runners)",
        [
            "train",
            "exp.yaml",
            "resources.env_runners.count=1",
            "env.kwargs={nan_reward: true, faults_in_ray_actors: true}",
        ],
        {"exp.yaml": FLAKY},
        needs_ray=True,
        exit=1,
    ),
    Case(
        "Impossible resources",
        [
            "plan",
            "exp.yaml",
            "resources.env_runners.count=1",
            "resources.env_runners.custom={npu: 1}",
        ],
        needs_ray=True,
    ),
    Case(
        "Impossible resources on this machine (refused before the embedded Ray starts)",
        ["train", "exp.yaml", "resources.learners.count=1", "resources.learners.gpus=1"],
    ),
    Case(
        "rlplat's transition replay sampler on a multi-agent env",
        [
            "train",
            "exp.yaml",
            "algorithm=DQN",
            "env={pettingzoo: mpe2.simple_spread_v3}",
            "training={replay_buffer_config: {type: TransitionEpisodeReplayBuffer}}",
        ],
    ),
    Case("Unknown command", ["trian", "exp.yaml"]),
    Case("Unknown option", ["train", "exp.yaml", "--bogus"]),
    Case("Option value of the wrong type", ["eval", ".", "-n", "abc"]),
    Case(
        "Output directory that cannot be created",
        ["train", "exp.yaml", "output_dir=exp.yaml/out"],
        needs_ray=True,
    ),
    Case("Experiment file missing", ["train", "missing.yaml"]),
    Case("Experiment path unreadable (a directory)", ["train", "."]),
    Case("--resume of a directory that is no run", ["train", "--resume", "."]),
    Case(
        "--from a path without checkpoints",
        ["train", "exp.yaml", "--from", "empty"],
        setup=_empty_dir,
    ),
    Case("eval of a path without checkpoints", ["eval", "empty"], setup=_empty_dir),
    Case("eval of a file", ["eval", "exp.yaml"]),
    Case("export of a path without checkpoints", ["export", "empty"], setup=_empty_dir),
    Case(
        "export --out that is a file",
        ["export", "checkpoint", "--out", "exp.yaml"],
        setup=_copy,
    ),
    Case(
        "export of a checkpoint whose env cannot be built here",
        ["export", "checkpoint"],
        setup=_env_gone,
    ),
    Case("eval --explore of an ONNX export", ["eval", "exported", "--explore"], setup=_exported),
    Case(
        "serve on all interfaces without a token",
        ["serve", "checkpoint", "--host", "0.0.0.0"],
        setup=_copy,
    ),
    Case(
        "serve --token-env naming an unset variable",
        ["serve", "checkpoint", "--token-env", "RLPLAT_NO_SUCH_TOKEN"],
        setup=_copy,
    ),
    Case(
        "serve --replica-resources with an unknown key",
        ["serve", "checkpoint", "--replica-resources", "{cpu: 1}"],
        setup=_copy,
    ),
    Case(
        "serve replicas asking for a resource no node has",
        ["serve", "checkpoint", "--replica-resources", "{custom: {npu: 1}}"],
        setup=_copy,
    ),
    Case(
        "serve --autoscale that is not MIN:MAX",
        ["serve", "checkpoint", "--autoscale", "4"],
        setup=_copy,
    ),
    Case(
        "serve --backend torch of an ONNX export",
        ["serve", "exported", "--backend", "torch"],
        setup=_exported,
    ),
    Case(
        "serve --engine that is not an engine",
        ["serve", "checkpoint", "--engine", "locl"],
        setup=_copy,
    ),
    Case(
        "serve --engine local with several replicas",
        ["serve", "checkpoint", "--engine", "local", "--replicas", "2"],
        setup=_copy,
    ),
    Case(
        "serve option that is not a number",
        ["serve", "checkpoint", "--batch-wait-ms", "nan"],
        setup=_copy,
    ),
    Case("experiment file misspelt", ["train", "exp.yml"]),
    Case("serve --stop without a cluster", ["serve", "--stop"]),
    Case(
        "seeds with an early-stopping scheduler",
        ["train", "exp.yaml", "--seeds", "3"],
        _edit("stop: {iterations: 2}", "stop: {iterations: 2}\ntune: {scheduler: asha}"),
    ),
    Case("seeds listing a seed twice", ["train", "exp.yaml", "seeds=[1, 1]"]),
    Case("--stacked without seeds", ["train", "exp.yaml", "--stacked"]),
    Case(
        "Stacked seeds of a PPO whose actor and critic share layers (RLlib's default)",
        ["train", "exp.yaml", "--seeds", "4", "--stacked"],
    ),
    Case("report of a path that is not a run", ["report", "empty"], setup=_empty_dir),
    Case(
        "report of a metric the run never logged",
        ["report", "run", "--metric", "episode_retrun_mean"],
        setup=_run,
    ),
    Case(
        "report scoring by evaluation a run without checkpoints",
        ["report", "run"],
        setup=_run_without_checkpoints,
    ),
    Case("runs of a directory that does not exist", ["runs", "nowhere"]),
    Case(
        "Checkpoint from another Ray version",
        ["eval", "old_checkpoint", "-n", "1"],
        setup=_another_ray_version,
    ),
    Case(
        "Checkpoint needing a class that is not installed (a custom env)",
        ["eval", "custom_checkpoint", "-n", "1"],
        setup=_missing_class,
    ),
    Case(
        "Checkpoint needing a policy class that is not installed",
        ["eval", "custom_policy_checkpoint", "-n", "1"],
        setup=_missing_policy_class,
    ),
    Case("Unknown logger", ["train", "exp.yaml", "loggers.mlfow.tracking_uri=file:mlruns"]),
    Case(
        "MLflow tracking server that does not answer",
        ["train", "exp.yaml", f"loggers.mlflow.tracking_uri=http://127.0.0.1:{CLOSED_PORT}"],
    ),
    Case(
        "W&B online run without a key",
        ["train", "exp.yaml", "loggers.wandb.project=lab"],
        setup=_no_wandb_key,
    ),
]


def normalize(text: str, scratch: Path) -> str:
    text = text.replace(str(scratch.resolve()), "<dir>").replace(str(scratch), "<dir>")
    text = re.sub(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d(-\d+)?", "<time>", text)
    # A cluster's nodes differ from machine to machine.
    return re.sub(r"The cluster's nodes: .*?\. (?=Lower)", "The cluster's nodes: <nodes>. ", text)


def message(output: str) -> str:
    """What rlplat said about the problem: its ``error:`` paragraph and any failed trial's."""
    lines = [
        line.strip()
        for line in output.splitlines()
        if line.startswith(("error:", "Error:")) or re.match(r"\s+trial_\w+ failed: ", line)
    ]
    return "\n".join(lines)


_PROCESSES = multiprocessing.get_context("fork")


def run_case(case: Case, scratch: Path, checkpoint: Path, address: str | None) -> tuple[int, str]:
    """Run one case in its own directory, in this process as the ``rlplat`` entry point would:
    its exit code and its normalized message. The process must be one it can end as it likes."""
    scratch.mkdir(parents=True)
    for name, text in case.files.items():
        (scratch / name).write_text(text)
    if case.setup is not None:
        case.setup(scratch, checkpoint)
    extra = ["--address", address] if case.needs_ray and address else []
    output = scratch / "output.txt"
    code = _rlplat_command(["rlplat", *case.args, *extra], scratch, output)
    return code, normalize(message(output.read_text()), scratch)


def _rlplat_command(argv: list[str], cwd: Path, output: Path) -> int:
    """The ``rlplat`` command line ``argv`` as its entry point runs it, printing to ``output``:
    its exit code (1 and a traceback for an exception it does not handle, as Python's would)."""
    from rlplat.cli import main

    os.chdir(cwd)
    with output.open("w") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    sys.argv = argv
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def _rlplat_env() -> dict[str, str]:
    """The environment of an ``rlplat`` process: this checkout importable, and the hash seed the
    command would otherwise restart itself to fix. The catalog is its own warm interpreter (it
    forks a process per case) and runs no warm Ray: a case that fails before Ray starts would
    leave one running in its directory."""
    from rlplat.cli import FIXED_HASH_SEED

    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PYTHONHASHSEED": FIXED_HASH_SEED,
        "RLPLAT_RAY_IDLE_S": "0",
    }


def trained_checkpoint(workdir: Path, address: str | None) -> Path:
    """A real one-iteration PPO checkpoint for the checkpoint cases to start from."""
    (workdir / "exp.yaml").write_text(BASE.replace("iterations: 2", "iterations: 1"))
    extra = ["--address", address] if address else []
    subprocess.run(
        [sys.executable, "-m", "rlplat.cli", "train", "exp.yaml", *extra],
        cwd=workdir,
        check=True,
        capture_output=True,
        env=_rlplat_env(),
    )
    return next(workdir.glob("out/bad/*/trial_*/checkpoint_*"))


def run_all(address: str | None = None) -> list[tuple[Case, int, str]]:
    """Every case, in order: run by a fresh Python process of this module (see ``_run_cases``)."""
    extra = ["--address", address] if address else []
    done = subprocess.run(
        [sys.executable, "-m", "tests.error_catalog", "--results", *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
        env=_rlplat_env(),
    )
    outcomes = json.loads(done.stdout.splitlines()[-1])
    return [(case, code, text) for case, (code, text) in zip(CASES, outcomes, strict=True)]


def _run_cases(address: str | None) -> list[tuple[int, str]]:
    """Every case, as many at once as there are cores, each in a process of its own forked from
    this one after it imported what every command imports (most of a fresh ``rlplat``'s time)."""
    import ray.rllib.algorithms.ppo  # noqa: F401

    import rlplat.cli  # noqa: F401
    import rlplat.prepare.run_spec  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "trained").mkdir()
        checkpoint = trained_checkpoint(root / "trained", address)
        jobs = [(case, root / f"case{i:02d}", checkpoint, address) for i, case in enumerate(CASES)]
        training = [i for i, case in enumerate(CASES) if case.needs_ray]
        others = [i for i, case in enumerate(CASES) if not case.needs_ray]
        # Cases that start Ray run one after another, in a process pool of their own beside the
        # others: two runs started in the same second on one cluster would share Tune's staging
        # directory (named by the second), and a trial would be renamed.
        with (
            _PROCESSES.Pool(1, maxtasksperchild=1) as one_at_a_time,
            _PROCESSES.Pool(os.cpu_count() or 2, maxtasksperchild=1) as pool,
        ):
            trained = one_at_a_time.starmap_async(run_case, [jobs[i] for i in training], 1)
            rest = pool.starmap(run_case, [jobs[i] for i in others], 1)
            outcomes = dict(zip(others, rest, strict=True))
            outcomes.update(zip(training, trained.get(), strict=True))
        return [outcomes[i] for i in range(len(jobs))]


def command(case: Case) -> str:
    import shlex

    return "rlplat " + " ".join(shlex.quote(arg) for arg in case.args)


def _changed_lines(case: Case) -> str:
    text = case.files.get("exp.yaml", BASE)
    added = [line for line in text.splitlines() if line not in BASE.splitlines()]
    return "<br>".join(f"`{line.replace(chr(9), '<TAB>')}`" for line in added)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")


def render(results: list[tuple[Case, int, str]]) -> str:
    rows = [
        "# What rlplat says about bad input",
        "",
        "Generated by running each case (`python -m tests.error_catalog > docs/errors.md`); "
        "`tests/e2e/test_error_catalog.py` runs them again and fails when this table is out of "
        "date.",
        "Every case starts from the small experiment below (`exp.yaml`, changed as the command or "
        "the case says; `envs.flaky:FlakyCartPole` for the env faults). Exit code 2: the input is "
        "wrong; 1: training failed at run time. No traceback is printed unless `--debug` is given "
        "(`--verbose` shows Ray's logs).",
        "",
        "```yaml",
        BASE.rstrip(),
        "```",
        "",
        "| Bad input | exp.yaml lines changed | Command | Exit | What rlplat prints |",
        "|---|---|---|---|---|",
    ]
    for case, code, text in results:
        cells = [case.what, _changed_lines(case), f"`{command(case)}`", str(code), text]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    if "--results" in sys.argv:  # run_all's worker: the outcomes as one JSON line
        given = sys.argv[sys.argv.index("--address") + 1] if "--address" in sys.argv else None
        print(json.dumps(_run_cases(given)))
    else:
        print(render(run_all()), end="")
