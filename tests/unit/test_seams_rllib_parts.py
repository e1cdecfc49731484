"""Canaries of rlplat/seams/rllib_parts.py: RLlib's catalog, model config, distribution and
algorithm config internals its seams rely on."""

from __future__ import annotations

import inspect
from typing import Any

import gymnasium as gym
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.models.catalog import Catalog
from ray.rllib.core.models.configs import MLPEncoderConfig

from rlplat.seams.rllib_parts import CatalogHooks, ModelConfigIncludes
from tests.seam_canary import has, holds

SEAM = "rlplat.seams.rllib_parts."


def test_catalog_hooks():
    seam = SEAM + "CatalogHooks"
    params = ("observation_space", "model_config_dict", "action_space")
    has(seam, Catalog, "_get_encoder_config", params=params)
    has(seam, Catalog, "_encoder_config")
    has(seam, Catalog, "_model_config_dict")
    holds(
        seam,
        "self._get_encoder_config(" in inspect.getsource(Catalog._determine_components_hook),
        "RLlib's Catalog picks its encoder config with self._get_encoder_config",
    )
    chosen = MLPEncoderConfig(input_dims=[3], hidden_layer_dims=[7])

    class Hooked(CatalogHooks, Catalog):
        @classmethod
        def encoder_config_for(cls, *args: Any, **kwargs: Any) -> MLPEncoderConfig:
            return chosen

    catalog = Hooked(
        gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(2), {"fcnet_hiddens": [5]}
    )
    holds(seam, catalog.encoder_config is chosen, "the catalog keeps encoder_config_for's config")
    settings = catalog.model_config_dict
    holds(
        seam,
        settings["fcnet_hiddens"] == [5] and "fcnet_activation" in settings,
        "the catalog's model config is the module's over RLlib's defaults",
    )


def test_model_config_includes():
    seam = SEAM + "ModelConfigIncludes"
    has(seam, AlgorithmConfig, "_model_config_auto_includes")
    holds(
        seam,
        isinstance(vars(AlgorithmConfig)["_model_config_auto_includes"], property),
        "AlgorithmConfig._model_config_auto_includes is a property",
    )

    class Including(ModelConfigIncludes):
        def model_config_includes(self) -> dict[str, Any]:
            return {"own": 1, "overridden": 1}

    config = Including().rl_module(model_config={"overridden": 2})
    holds(
        seam,
        config.model_config["own"] == 1 and config.model_config["overridden"] == 2,
        "model_config holds the algorithm's includes, the module's own settings over them",
    )
