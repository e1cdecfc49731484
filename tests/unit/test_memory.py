"""rlplat's attention memory (rlplat/algorithms/memory.py) as RLlib's recurrent path uses it:
sampling steps one at a time with the state it returns, training runs whole sequences from the
state stored before them; both must compute the same."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import pytest
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

from rlplat.algorithms.memory import MEMORY
from rlplat.rllib.modules import MemoryPPOCatalog

OBSERVATIONS = gym.spaces.Box(-1.0, 1.0, (3,))


def _encoder(**settings):
    torch.manual_seed(0)
    model_config = {**dataclasses.asdict(DefaultModelConfig()), "fcnet_hiddens": [8]}
    model_config[MEMORY] = {"type": "attention", "size": 8, "heads": 2, **settings}
    config = MemoryPPOCatalog.encoder_config_for(OBSERVATIONS, model_config)
    return config.build(framework="torch").eval()


def _run(encoder, observations, state):
    out = encoder({Columns.OBS: observations, Columns.STATE_IN: state})
    return out[ENCODER_OUT], out[Columns.STATE_OUT]


def _batched(state, batch):
    return {key: value.expand(batch, *value.shape) for key, value in state.items()}


@pytest.mark.parametrize("layers", [1, 2])
def test_steps_one_at_a_time_compute_what_the_sequence_computes(layers):
    encoder = _encoder(steps=4, layers=layers)
    observations = torch.randn(2, 11, 3)
    start = _batched(encoder.get_initial_state(), 2)
    whole, _ = _run(encoder, observations, start)
    state, stepped = start, []
    for t in range(11):
        out, state = _run(encoder, observations[:, t : t + 1], state)
        stepped.append(out)
    torch.testing.assert_close(torch.cat(stepped, dim=1), whole)
    # A sequence started from the state stored mid-episode continues the same.
    state = start
    for t in range(5):
        _, state = _run(encoder, observations[:, t : t + 1], state)
    rest, _ = _run(encoder, observations[:, 5:], state)
    torch.testing.assert_close(rest, whole[:, 5:])


def test_a_step_sees_back_as_far_as_its_steps():
    encoder = _encoder(steps=3, layers=1)
    observations = torch.randn(1, 8, 3)
    start = _batched(encoder.get_initial_state(), 1)
    changed = observations.clone()
    changed[:, 0] += 1.0
    before, _ = _run(encoder, observations, start)
    after, _ = _run(encoder, changed, start)
    difference = (before - after).abs().amax(dim=-1)[0]
    assert bool(torch.all(difference[:4] > 0)), "steps 0-3 see step 0"
    torch.testing.assert_close(after[:, 4:], before[:, 4:])  # step 4 sees steps 1-4 only


def test_an_empty_memory_is_not_attended_to():
    encoder = _encoder(steps=4, layers=1)
    observations = torch.randn(1, 1, 3)
    empty = _batched(encoder.get_initial_state(), 1)
    noise = {**empty, "memory": torch.randn_like(empty["memory"])}
    torch.testing.assert_close(
        _run(encoder, observations, noise)[0], _run(encoder, observations, empty)[0]
    )
