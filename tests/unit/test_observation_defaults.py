"""What a first experiment gets without asking: observations RLlib's default encoders cannot
take get a wrapper or a CNN sized for the frames, and remote env runners fit the machine's CPUs,
each written into the experiment and said in one line."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rlplat.cluster.placement import LOCAL_NODE_ID, Node
from rlplat.environments.make import EnvInfo
from rlplat.environments.observations import FlatObservation, FloatObservation
from rlplat.experiment.load import load_experiment
from rlplat.prepare import prepare
from rlplat.prepare.observations import (
    FLAT_OBSERVATION,
    FLOAT_MULTI_AGENT,
    FLOAT_OBSERVATION,
    NATURE_CNN,
    SMALL_CNN,
    with_observation_defaults,
)
from tests.helpers import EXPERIMENTS

DISCRETE = gym.spaces.Discrete(3)


def _experiment(*overrides: str):
    return load_experiment(EXPERIMENTS / "cartpole_ppo.yaml", list(overrides)).experiment


@pytest.mark.parametrize(
    "space",
    [
        gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,)), "b": gym.spaces.Discrete(4)}),
        gym.spaces.Tuple((gym.spaces.Discrete(32), gym.spaces.Discrete(11))),
        gym.spaces.Discrete(500),
        gym.spaces.Box(-1, 1, (5, 5)),
    ],
    ids=["Dict", "Tuple", "Discrete", "2D Box"],
)
def test_spaces_without_a_default_encoder_are_flattened(space):
    defaults = with_observation_defaults(_experiment(), EnvInfo(space, DISCRETE))
    assert defaults.experiment.env.wrappers[-1] == FLAT_OBSERVATION
    assert defaults.wrapped and "env.wrappers" in defaults.notes[0]


def test_a_1d_box_and_an_experiment_with_connectors_are_left_alone():
    box = EnvInfo(gym.spaces.Box(-1, 1, (4,)), DISCRETE)
    assert with_observation_defaults(_experiment(), box).notes == ()
    tuple_space = EnvInfo(gym.spaces.Tuple((DISCRETE, DISCRETE)), DISCRETE)
    own = _experiment("connectors=[mean_std_filter]")
    assert with_observation_defaults(own, tuple_space).experiment.env.wrappers == []


@pytest.mark.parametrize(
    ("shape", "expected"),
    [((7, 7, 3), SMALL_CNN), ((84, 84, 4), NATURE_CNN), ((96, 96, 3), NATURE_CNN)],
)
def test_frames_get_a_cnn_sized_for_them_unless_the_experiment_names_one(shape, expected):
    frames = EnvInfo(gym.spaces.Box(0, 255, shape, np.uint8), DISCRETE)
    model = with_observation_defaults(_experiment(), frames).experiment.rl_module["model_config"]
    assert model["conv_filters"] == expected["conv_filters"]
    assert model["fcnet_hiddens"] == [64, 64], "the file's own settings stay"
    own = _experiment("rl_module.model_config.conv_filters=[[8, [3, 3], 1]]")
    assert with_observation_defaults(own, frames).notes == ()


def test_multi_agent_2d_observations_get_supersuits_flatten_and_action_masks_stay():
    grid = gym.spaces.Box(0, 1, (27, 5))
    agents = EnvInfo(grid, DISCRETE, agents=["a", "b"], observation_spaces={"a": grid, "b": grid})
    assert with_observation_defaults(_experiment(), agents).experiment.env.wrappers == [
        "flatten_v0"
    ]
    masked = gym.spaces.Dict(
        {"observation": gym.spaces.Box(0, 1, (4,)), "action_mask": gym.spaces.MultiBinary(3)}
    )
    game = EnvInfo(masked, DISCRETE, agents=["a"], observation_spaces={"a": masked})
    assert with_observation_defaults(_experiment(), game).notes == ()


def test_flat_observation_leaves_out_minigrids_mission_text():
    space = gym.spaces.Dict(
        {
            "image": gym.spaces.Box(0, 10, (2, 2, 3), np.uint8),
            "direction": gym.spaces.Discrete(4),
            "mission": gym.spaces.Text(20),
        }
    )

    class Grid(gym.Env):
        observation_space, action_space = space, DISCRETE

        def reset(self, *, seed=None, options=None):
            return {"image": np.ones((2, 2, 3), np.uint8), "direction": 2, "mission": "go"}, {}

    env = FlatObservation(Grid())
    observation, _ = env.reset()
    assert env.observation_space.shape == (12 + 4,) and observation.dtype == np.float32
    assert observation in env.observation_space and observation[12 + 2] == 1.0


def test_boolean_and_integer_observations_are_cast_to_float_and_uint8_frames_are_not():
    frames = EnvInfo(gym.spaces.Box(0, 1, (10, 10, 2), np.bool_), DISCRETE)
    defaults = with_observation_defaults(_experiment(), frames)
    assert defaults.experiment.env.wrappers == [FLOAT_OBSERVATION] and defaults.wrapped
    assert "bool" in defaults.notes[0]
    counts = EnvInfo(gym.spaces.Box(0, 9, (6,), np.int32), DISCRETE)
    assert with_observation_defaults(_experiment(), counts).experiment.env.wrappers == [
        FLOAT_OBSERVATION
    ]
    atari = EnvInfo(gym.spaces.Box(0, 255, (84, 84, 4), np.uint8), DISCRETE)
    assert with_observation_defaults(_experiment(), atari).experiment.env.wrappers == []
    grid = gym.spaces.Box(0, 1, (5, 5), np.int8)
    agents = EnvInfo(grid, DISCRETE, agents=["a"], observation_spaces={"a": grid})
    wrappers = with_observation_defaults(_experiment(), agents).experiment.env.wrappers
    assert wrappers == [FLOAT_MULTI_AGENT, "flatten_v0"], "cast, then flattened"


def test_float_observation_gives_float32_frames_inside_its_space():
    from envs.bool_frames import BoolFrames

    env = FloatObservation(BoolFrames())
    observation, _ = env.reset(seed=3)
    assert observation.dtype == np.float32 and observation.shape == (10, 10, 2)
    assert observation in env.observation_space and observation.sum() == 2.0


def _nodes(cpus: float) -> list[Node]:
    return [Node("n" * 8, "127.0.0.1", True, {"CPU": cpus}, {"CPU": cpus})]


def test_env_runners_unset_fit_the_cluster_and_set_ones_stay():
    loaded = load_experiment(EXPERIMENTS / "cartpole_ppo.yaml", ["resources.env_runners={}"])
    # One remote env runner fits; PPO's learner waits for it, so the driver samples instead.
    small = prepare(loaded, _nodes(2), probe=False)
    assert small.experiment.resources.env_runners.count == 0
    [note] = [note for note in small.notes if "resources.env_runners.count" in note]
    assert "count: 0" in note and "has 2" in note and "the driver samples" in note
    assert prepare(loaded, _nodes(16), probe=False).experiment.resources.env_runners.count is None
    given = load_experiment(EXPERIMENTS / "cartpole_ppo.yaml", ["resources.env_runners.count=2"])
    assert prepare(given, _nodes(2), probe=False).experiment.resources.env_runners.count == 2


def test_a_lone_trial_with_threads_to_use_takes_the_free_cpus_and_others_keep_theirs():
    this_machine = [Node(LOCAL_NODE_ID, "this machine", True, {"CPU": 4.0}, {"CPU": 3.0})]
    breakout = EXPERIMENTS / "atari" / "breakout_ppo.yaml"
    lone = prepare(load_experiment(breakout, []), this_machine, probe=False)
    assert lone.experiment.resources.driver.cpus == 3.0  # the free ones
    [note] = [note for note in lone.notes if "resources.driver.cpus" in note]
    assert "torch and EnvPool get 3 threads" in note
    for overrides in (
        ["seeds=2"],
        ["resources.driver.cpus=1"],
        ["resources.driver.process=actor"],
        ["evaluation.evaluation_num_env_runners=1"],
    ):
        kept = prepare(load_experiment(breakout, overrides), this_machine, probe=False)
        assert kept.experiment.resources.driver.cpus == (1.0 if "cpus" in overrides[0] else None)
    mlp = prepare(load_experiment(EXPERIMENTS / "cartpole_ppo.yaml", []), this_machine, probe=False)
    assert mlp.experiment.resources.driver.cpus is None


def test_an_lstm_without_a_sequence_length_gets_rllibs_default_and_says_so():
    switch = "rl_module.model_config.use_lstm=true"
    run = prepare(load_experiment(EXPERIMENTS / "cartpole_ppo.yaml", [switch]), probe=False)
    assert run.experiment.rl_module["model_config"]["max_seq_len"] == 20
    assert any("rl_module.model_config.max_seq_len: 20" in note for note in run.notes)
    given = load_experiment(
        EXPERIMENTS / "cartpole_ppo.yaml",
        ["rl_module.model_config.use_lstm=true", "rl_module.model_config.max_seq_len=7"],
    )
    assert prepare(given, probe=False).experiment.rl_module["model_config"]["max_seq_len"] == 7


def test_a_card_game_of_discrete_observations_gets_each_agents_one_hot(tmp_path):
    """Rock-paper-scissors observes the opponent's last move (Discrete(4)): each agent's
    observation becomes its one-hot vector, which RLlib's MLP takes."""
    from rlplat.environments.observations import flat_agents

    path = tmp_path / "rps.yaml"
    path.write_text(
        "name: rps\nalgorithm: PPO\nenv: {pettingzoo: pettingzoo.classic.rps_v2}\n"
        "stop: {env_steps: 1000}\n"
    )
    run = prepare(load_experiment(path), probe=False)
    assert "rlplat.environments.observations:flat_agents" in run.experiment.env.wrappers
    assert run.env.observation_spaces["player_0"] == gym.spaces.Box(0, 1, (4,), np.float32)
    from pettingzoo.classic import rps_v2

    env = flat_agents(rps_v2.parallel_env())
    observations, _ = env.reset(seed=0)
    assert observations["player_0"].tolist() == [0, 0, 0, 1]  # "none yet", one-hot
