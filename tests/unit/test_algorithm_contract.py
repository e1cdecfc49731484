"""An algorithm is one registration: what rlplat checks, refuses and documents follows from it."""

from __future__ import annotations

from pathlib import Path

import pytest
from ray.rllib.algorithms.dqn import DQN, DQNConfig

from rlplat.algorithms.registry import (
    algorithm_names,
    algorithm_record,
    canonical_name,
    register_algorithm,
    unregister_algorithm,
)
from rlplat.algorithms.table import render
from rlplat.errors import UserError
from tests.helpers import rejection


class TinyQConfig(DQNConfig):
    """DQN with one extra setting, as a user's algorithm package would declare it."""

    def __init__(self, algo_class: type | None = None):
        super().__init__(algo_class=algo_class or TinyQ)
        self.q_scale = 1.0

    def training(self, *, q_scale: float = 1.0, **kwargs):  # noqa: ANN201 - RLlib's builder
        super().training(**kwargs)
        self.q_scale = q_scale
        return self


class TinyQ(DQN):
    @classmethod
    def get_default_config(cls) -> TinyQConfig:
        return TinyQConfig(cls)


EXPERIMENT = """\
name: tiny
algorithm: {name}
env: {{id: {env}}}
stop: {{iterations: 1}}
resources:
  env_runners: {{count: 0}}
"""


@pytest.fixture
def tiny_q():
    register_algorithm(
        "TinyQ",
        f"{__name__}:TinyQ",
        discrete_alternative="PPO",
        own_rates="q_lr",
        replay_memory="local_replay_buffer",
    )
    yield "TinyQ"
    unregister_algorithm("TinyQ")


def _experiment(tmp_path: Path, name: str, env: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(EXPERIMENT.format(name=name, env=env))
    return path


def test_a_registration_is_accepted_by_name_and_checked_against_its_config(tmp_path, tiny_q):
    assert tiny_q in algorithm_names()
    assert canonical_name("tinyq") == "TinyQ"
    path = _experiment(tmp_path, "tinyq", "Pendulum-v1")
    message = rejection(path, "training.q_scale=fast")
    assert "training.q_scale" in message and "wrong type" in message
    message = rejection(path, "training.q_scael=2")
    assert "TinyQConfig.training() has no argument 'q_scael'" in message
    assert "q_scale" in message  # did you mean


def test_a_registered_trait_refuses_before_ray(tmp_path, tiny_q):
    message = rejection(_experiment(tmp_path, "TinyQ", "CartPole-v1"))
    assert "TinyQ needs a continuous (Box) action space" in message
    assert "For discrete actions use PPO." in message


def test_the_docs_table_has_a_row_from_the_registration(tiny_q):
    row = next(line for line in render().splitlines() if line.startswith("| `TinyQ`"))
    assert f"`{__name__}:TinyQ`" in row
    assert "Box only (discrete: PPO)" in row
    assert "`local_replay_buffer`" in row and "q_lr" in row
    assert algorithm_record("TinyQ").own_rates == "q_lr"


def test_an_unregistered_algorithm_is_unknown(tmp_path):
    with pytest.raises(UserError, match="unknown algorithm 'TinyQ'"):
        canonical_name("TinyQ")
    assert "`TinyQ`" not in render()


def test_docs_algorithm_table_is_current():
    docs = Path(__file__).resolve().parents[2] / "docs" / "algorithms.md"
    assert docs.read_text() == render(), (
        "regenerate with: python -m rlplat.algorithms.table > docs/algorithms.md"
    )


def test_target_networks_move_tau_of_the_way_and_copy_at_tau_one():
    import torch

    from rlplat.algorithms.base import move_towards

    main, target = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    before = [p.detach().clone() for p in target.parameters()]
    move_towards(main, target, 0.25)
    for moved, old, online in zip(target.parameters(), before, main.parameters(), strict=True):
        torch.testing.assert_close(moved, 0.25 * online + 0.75 * old)
    move_towards(main, target, 1.0)
    for copied, online in zip(target.parameters(), main.parameters(), strict=True):
        assert torch.equal(copied, online)
    move_towards(torch.nn.Identity(), torch.nn.Identity(), 0.5)  # no weights: nothing to move


def test_non_finite_gradients_become_zeros_and_every_optimizer_steps():
    from types import SimpleNamespace

    import torch

    from rlplat.engine.learner import step_if_finite

    first, second = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(3))
    sgd = {"a": torch.optim.SGD([first], lr=1.0), "b": torch.optim.SGD([second], lr=1.0)}
    learner = SimpleNamespace(  # a torch learner's gradients are keyed by their parameters
        module=dict.fromkeys(sgd),
        get_optimizers_for_module=lambda mid: (
            [("default_optimizer", sgd[mid])] if mid in sgd else []
        ),
    )
    step_if_finite(
        learner, {first: torch.tensor([1.0, 2.0]), second: torch.tensor([1.0, 1.0, 1.0])}
    )
    assert torch.equal(first.detach(), torch.tensor([0.0, -1.0]))
    assert torch.equal(second.detach(), torch.zeros(3))
    step_if_finite(learner, {first: torch.tensor([float("nan"), 1.0]), second: torch.ones(3)})
    assert torch.equal(first.detach(), torch.tensor([0.0, -2.0]))  # nan -> 0, the rest applied
    assert torch.equal(second.detach(), -torch.ones(3))


@pytest.mark.parametrize("clip", [0.5, 40.0, 1e-3])
def test_fused_global_norm_clipping_scales_gradients_as_rllibs_does(clip):
    """The learners' clip (fused calls over all tensors) gives RLlib's clipped gradients and
    norm: scaled where the global norm exceeds ``clip``, untouched where it does not, an inf
    gradient counted as 1e9."""
    import torch
    from ray.rllib.utils.torch_utils import clip_gradients as rllib_clip

    from rlplat.engine.learner import RlplatLearner

    ours = RlplatLearner.clip_function(None)  # what RLlib's update clips with
    generator = torch.Generator().manual_seed(0)
    random = [torch.randn(*shape, generator=generator) for shape in [(64, 17), (64,), (6, 64)]]
    for grads in (random, [torch.full((3,), float("inf")), torch.ones(2)]):
        theirs = {i: g.clone() for i, g in enumerate(grads)}
        mine = {i: g.clone() for i, g in enumerate(grads)}
        their_norm = rllib_clip(theirs, grad_clip=clip, grad_clip_by="global_norm")
        my_norm = ours(mine, grad_clip=clip, grad_clip_by="global_norm")
        torch.testing.assert_close(my_norm, their_norm)
        for key in theirs:
            torch.testing.assert_close(mine[key], theirs[key])
        if grads is random:
            norm = torch.linalg.vector_norm(torch.cat([g.flatten() for g in mine.values()]))
            before = torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]))
            torch.testing.assert_close(norm, min(before, torch.tensor(clip)), rtol=1e-5, atol=0)


def test_every_algorithm_trains_with_rlplats_learner_written_in_a_file():
    """Each algorithm's learner is a class of a module's own (no class composed at run time)
    on ``RlplatLearner``: one fused gradient check and clip, minibatches cut once per epoch."""
    import importlib

    from rlplat.algorithms.registry import algorithm_names
    from rlplat.engine.learner import RlplatLearner
    from rlplat.rllib.build import learner_class_for

    for name in algorithm_names():
        learner = learner_class_for(name)
        assert issubclass(learner, RlplatLearner), (name, learner.__mro__)
        module = importlib.import_module(learner.__module__)
        assert getattr(module, learner.__qualname__, None) is learner, (name, learner)


@pytest.mark.parametrize("algorithm", ["PPO", "APPO"])
def test_the_built_config_names_the_algorithms_learner(algorithm, write_yaml):
    from rlplat.experiment.load import load_experiment
    from rlplat.prepare import prepare
    from rlplat.rllib.build import learner_class_for

    path = write_yaml(
        f"name: fused\nalgorithm: {algorithm}\nenv: {{id: CartPole-v1}}\nstop: {{iterations: 1}}\n"
    )
    config = prepare(load_experiment(path), step_env=False).algo_config
    assert config.learner_class is learner_class_for(algorithm)
