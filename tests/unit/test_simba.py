"""SimBa's residual encoder as a network setting: the block, and the networks each algorithm
builds with ``rl_module.model_config.simba``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from rlplat.algorithms.crossq import CrossQConfig
from rlplat.algorithms.networks import (
    BatchRenorm,
    ResidualBlock,
    SimbaCatalog,
    SimbaSettings,
    simba_network,
)
from rlplat.algorithms.sac import PaperCriticSACCatalog, SACConfig, SACModule
from rlplat.algorithms.td3 import TD3Config
from rlplat.experiment.load import load_experiment
from rlplat.prepare import prepare
from rlplat.rllib.modules import SIMBA_CATALOGS
from tests.helpers import EXPERIMENTS

OBS = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
SIMBA = {"simba": {"width": 16, "blocks": 2}}


def test_a_residual_block_adds_a_widened_feed_forward_of_its_normalised_input():
    block = ResidualBlock(4, torch.nn.LayerNorm(4))
    x = torch.randn(3, 4)
    expected = x + block.down(torch.relu(block.up(torch.nn.functional.layer_norm(x, (4,)))))
    assert torch.allclose(block(x), expected)
    assert block.up.out_features == 16, "four times the width inside"
    with torch.no_grad():
        block.down.weight.zero_()
        block.down.bias.zero_()
    assert torch.equal(block(x), x), "the residual stream passes through untouched"


def test_the_encoder_embeds_runs_its_blocks_and_ends_in_a_norm():
    width, blocks, inputs, outputs = 16, 2, 5, 3
    network = simba_network(inputs, SimbaSettings(width, blocks), outputs)
    per_block = 2 * width + (width * 4 * width + 4 * width) + (4 * width * width + width)
    embed, final_norm, head = inputs * width + width, 2 * width, width * outputs + outputs
    expected = embed + blocks * per_block + final_norm + head
    assert sum(p.numel() for p in network.parameters()) == expected
    assert isinstance(network[-2], torch.nn.LayerNorm)
    assert network(torch.randn(7, inputs)).shape == (7, outputs)


def _blocks(module: torch.nn.Module) -> list[ResidualBlock]:
    return [m for m in module.modules() if isinstance(m, ResidualBlock)]


def catalog_module(config_class: type, module_class: type, catalog_class: type) -> Any:
    """An RLlib module built from ``catalog_class``'s SimBa catalog, with the setting."""
    config = config_class().environment(observation_space=OBS, action_space=BOX)
    catalog = SIMBA_CATALOGS[catalog_class]
    assert issubclass(catalog, (SimbaCatalog, catalog_class))
    spec = RLModuleSpec(module_class=module_class, catalog_class=catalog)
    config.rl_module(model_config=SIMBA, rl_module_spec=spec)
    return config.get_rl_module_spec(spaces={"default_policy": (OBS, BOX)}).build()


def test_ppo_builds_simba_actor_and_critic_encoders():
    module = catalog_module(PPOConfig, DefaultPPOTorchRLModule, PPOCatalog)
    assert len(_blocks(module.encoder.actor_encoder)) == 2
    assert len(_blocks(module.encoder.critic_encoder)) == 2
    out = module.forward_inference({Columns.OBS: torch.zeros((4, 5))})
    assert out[Columns.ACTION_DIST_INPUTS].shape == (4, 4)


def test_sacs_critics_encode_the_action_beside_the_observation():
    module = catalog_module(SACConfig, SACModule, PaperCriticSACCatalog)
    assert len(_blocks(module.pi_encoder)) == 2 and len(_blocks(module.qf_encoder)) == 2
    assert module.qf_encoder.net[0].in_features == 5 + 2
    batch = {Columns.OBS: torch.zeros((3, 5)), Columns.ACTIONS: torch.zeros((3, 2))}
    assert module.compute_q_values(batch).shape == (3,)


@pytest.mark.parametrize("config_class", [TD3Config, CrossQConfig], ids=["TD3", "CrossQ"])
def test_rlplats_own_actor_critics_read_the_setting(config_class):
    config = config_class().environment(observation_space=OBS, action_space=BOX)
    config.rl_module(model_config=SIMBA)
    module = config.get_rl_module_spec(spaces={"default_policy": (OBS, BOX)}).build()
    assert len(_blocks(module.actor)) == 2
    critics = module.critics if config_class is CrossQConfig else module.critics()
    assert all(len(_blocks(critic)) == 2 for critic in critics)
    renorms = [m for m in module.modules() if isinstance(m, BatchRenorm)]
    layer_norms = [m for m in module.modules() if isinstance(m, torch.nn.LayerNorm)]
    if config_class is CrossQConfig:
        assert renorms and not layer_norms, "CrossQ normalises by batch renormalisation only"
    else:
        assert layer_norms and not renorms


@pytest.mark.parametrize(
    ("experiment", "encoder"),
    [("cartpole_ppo", "encoder.actor_encoder"), ("pendulum_sac", "qf_encoder")],
    ids=["PPO", "SAC"],
)
def test_the_setting_in_a_file_gives_the_run_simba_networks(experiment, encoder):
    """The path a user takes: the YAML key, checked and built by prepare (the probe's module is
    built from the same spec the trials build from)."""
    loaded = load_experiment(
        EXPERIMENTS / f"{experiment}.yaml",
        ["rl_module.model_config.simba={width: 32, blocks: 3}", "connectors=[mean_std_filter]"],
    )
    run = prepare(loaded)
    spaces = {"default_policy": (run.env.observation_space, run.env.action_space)}
    module = run.algo_config.get_rl_module_spec(spaces=spaces).build()
    network = module.get_submodule(encoder)
    assert len(_blocks(network)) == 3
    assert all(block.up.in_features == 32 for block in _blocks(network))
