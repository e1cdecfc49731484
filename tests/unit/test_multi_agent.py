"""Multi-agent setups without training: bad input refused before Ray, policy mapping, masked
modules, the ways to name a PettingZoo env."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import CONNECT_FOUR, MULTI_AGENT_ADVERSARY, SPREAD, assert_rejected, replace

# --- bad input: caught while loading, before Ray starts --------------------------------------

ERROR_CASES = {
    "unknown wrapper": (
        SPREAD,
        lambda t: replace(t, "kwargs: {N: 3", "wrappers: [colour_reduction_v0]\n  kwargs: {N: 3"),
        ["env.wrappers.0", "'colour_reduction_v0'", "Did you mean 'color_reduction_v0'?",
         "frame_stack_v1", "resize_v1"],
    ),
    "bad wrapper argument": (
        SPREAD,
        lambda t: replace(
            t, "kwargs: {N: 3", "wrappers: [{dtype_v0: {dtyp: float32}}]\n  kwargs: {N: 3"
        ),
        ["env.wrappers.0", "'dtype_v0' does not accept", "its arguments: dtype",
         "Did you mean 'dtype'?"],
    ),
    "wrapper argument the wrapper rejects": (
        SPREAD,
        lambda t: replace(
            t, "kwargs: {N: 3", "wrappers: [{color_reduction_v0: {mode: Z}}]\n  kwargs: {N: 3"
        ),
        ["env.wrappers.0", "wrapper 'color_reduction_v0' failed", "'full', 'R', 'G', 'B'"],
    ),
    "wrapper that fails only when used": (
        SPREAD,
        lambda t: replace(
            t, "kwargs: {N: 3", "wrappers: [{frame_stack_v1: {stack_size: 0}}]\n  kwargs: {N: 3"
        ),
        ["key 'env'", "failed: reset() raised", "could not broadcast"],
    ),
    "Gymnasium wrapper on a PettingZoo env": (
        SPREAD,
        lambda t: replace(t, "kwargs: {N: 3", "wrappers: [FlattenObservation]\n  kwargs: {N: 3"),
        ["'FlattenObservation' is a Gymnasium wrapper, for single-agent envs only"],
    ),
    "shared policy over different spaces": (
        MULTI_AGENT_ADVERSARY,
        lambda t: replace(t, 'policies: {"adversary_*": adversary, "agent_*": good}',
                          "policies: shared").replace("  train: [good]\n", "").replace(
                              "  overrides: {good: {lr: 0.001}}\n", ""),
        ["exp.yaml:8", "multi_agent.policies", "different observation spaces",
         "pad_observations_v0"],
    ),
    "pattern that matches no agent": (
        MULTI_AGENT_ADVERSARY,
        lambda t: replace(t, '"agent_*": good', '"agents_*": good'),
        ["multi_agent.policies.agents_*", "matches no agent", "adversary_0, agent_0, agent_1"],
    ),
    "agents no pattern covers": (
        MULTI_AGENT_ADVERSARY,
        lambda t: replace(t, '"agent_*": good', '"agent_0": good'),
        ["no pattern matches the agents agent_1", "'*': <policy>"],
    ),
    "unknown policy to train": (
        MULTI_AGENT_ADVERSARY,
        lambda t: replace(t, "train: [good]", "train: [goood]"),
        ["multi_agent.train", "'goood'", "adversary, good", "Did you mean 'good'?"],
    ),
    "unknown per-policy setting": (
        MULTI_AGENT_ADVERSARY,
        lambda t: replace(t, "{lr: 0.001}", "{learning_rate: 0.001}"),
        ["multi_agent.overrides.good.learning_rate", "not a 'training' setting"],
    ),
    "PettingZoo env that is not there": (
        SPREAD,
        lambda t: replace(t, "mpe2.simple_spread_v3", "mpe2.simple_sprad_v3"),
        ["exp.yaml:5", "env.pettingzoo", "Did you mean 'mpe2.simple_spread_v3'?",
         "pip install 'pettingzoo[butterfly,sisl,classic]' mpe2"],
    ),
    "unknown api": (
        SPREAD,
        lambda t: replace(t, "kwargs: {N: 3", "api: turns\n  kwargs: {N: 3"),
        ["env.api", "'turns' is not allowed here", "Allowed: aec, parallel"],
    ),
    "multi_agent on a Gymnasium env": (
        SPREAD,
        lambda t: replace(t, "pettingzoo: mpe2.simple_spread_v3", "id: CartPole-v1").replace(
            "  kwargs: {N: 3, max_cycles: 25}\n", ""),
        ["key 'multi_agent'", "single-agent environment"],
    ),
    "connectors on a PettingZoo env": (
        SPREAD,
        lambda t: t + "connectors: [mean_std_filter]\n",
        ["key 'connectors'", "normalize_obs_v0"],
    ),
    "action masks with an algorithm that ignores them": (
        CONNECT_FOUR,
        lambda t: replace(t, "algorithm: PPO", "algorithm: DQN").replace(
            "  train_batch_size_per_learner: 200\n  minibatch_size: 100\n  num_epochs: 1\n",
            "  train_batch_size_per_learner: 32\n"),
        ["key 'algorithm'", "supported with PPO"],
    ),
}


@pytest.mark.parametrize("case", list(ERROR_CASES), ids=list(ERROR_CASES))
def test_bad_multi_agent_input_exits_2(case, tmp_path):
    base, edit, expected = ERROR_CASES[case]
    path = tmp_path / "exp.yaml"
    path.write_text(edit(base.replace("OUTPUT", str(tmp_path / "out"))))
    assert_rejected(path, expected, tmp_path / "out")


def test_masked_module_gives_illegal_actions_zero_probability():
    import gymnasium as gym
    import torch
    from ray.rllib.core.columns import Columns

    from rlplat.rllib.modules import MaskedPPOModule

    space = gym.spaces.Dict(
        {
            "observation": gym.spaces.Box(0, 1, (6, 7, 2), np.int8),
            "action_mask": gym.spaces.Box(0, 1, (7,), np.int8),
        }
    )
    module = MaskedPPOModule(
        observation_space=space, action_space=gym.spaces.Discrete(7), model_config={}
    )
    masks = torch.randint(0, 2, (256, 7), dtype=torch.int8)
    masks[:, 3] = 1  # at least one legal move per row
    batch = {
        Columns.OBS: {
            "observation": torch.randint(0, 2, (256, 6, 7, 2), dtype=torch.int8),
            "action_mask": masks,
        }
    }
    for forward in (module.forward_exploration, module.forward_inference, module.forward_train):
        probs = torch.softmax(forward(dict(batch))[Columns.ACTION_DIST_INPUTS], dim=-1)
        assert torch.all(probs[masks == 0] == 0)
        assert torch.allclose(probs.sum(-1), torch.ones(256))


def test_policy_mapping_first_matching_pattern_wins():
    from rlplat.rllib.multi_agent import PolicyMapping

    mapping = PolicyMapping({"agent_0": "solo", "agent_*": "team", "*": "rest"})
    assert [mapping(a) for a in ("agent_0", "agent_1", "adversary_0")] == ["solo", "team", "rest"]
    assert PolicyMapping("shared")("x") == "shared"
    assert PolicyMapping("independent")("piston_3") == "piston_3"


@pytest.mark.parametrize(
    "env_section",
    [
        "factory: mpe2.simple_spread_v3:parallel_env",  # a PettingZoo env from a factory
        "pettingzoo: mpe2.simple_spread_v3\n  api: aec",  # the same game, turn by turn
    ],
)
def test_other_ways_to_name_a_pettingzoo_env(env_section, tmp_path):
    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare

    path = tmp_path / "exp.yaml"
    path.write_text(replace(SPREAD, "pettingzoo: mpe2.simple_spread_v3", env_section))
    config = prepare(load_experiment(path)).algo_config
    assert config.is_multi_agent
    assert config.policy_mapping_fn("agent_2") == "shared"


def test_a_card_game_hand_that_ends_at_its_first_action_keeps_rllibs_agent_check():
    """RLlib checks every key of a step's dicts against env.agents (one random step after
    reset): a leduc hand folded at once reports both players after PettingZoo removed them."""
    from pettingzoo.classic import leduc_holdem_v4

    from rlplat.environments.pettingzoo import to_multi_agent_env

    env = to_multi_agent_env(leduc_holdem_v4.env())
    [first] = env.reset(seed=0)[0]
    fold = 2
    observations, _, terminateds, *_ = env.step({first: fold})
    assert terminateds["__all__"] and set(observations) == {"player_0", "player_1"}
    assert set(observations) <= set(env.agents)
