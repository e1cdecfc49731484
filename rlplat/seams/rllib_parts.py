"""RLlib's catalogs and algorithm configs: the private hooks rlplat's own networks and settings
go through.

RLlib builds a module's networks in its ``Catalog`` and adds an algorithm's settings to the
module's ``model_config`` in its ``AlgorithmConfig``; the steps rlplat changes there (SimBa's
encoders, SAC's concatenating critic, rlplat's own algorithms' module settings) are private
methods and attributes of those classes, with no public hook.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.models.configs import ModelConfig

__all__ = [
    "CatalogHooks",
    "ModelConfigIncludes",
]


class CatalogHooks:
    """Catalog mixin (before an RLlib catalog): the steps of RLlib's catalog that rlplat's
    catalogs change, under public names, each RLlib's own until a subclass overrides it.

    RLlib's ``Catalog`` picks the encoder config in the private classmethod
    ``_get_encoder_config``, keeps the observation's encoder config in ``_encoder_config`` and
    the model config (with RLlib's defaults) in ``_model_config_dict``."""

    @classmethod
    def _get_encoder_config(cls, *args: Any, **kwargs: Any) -> ModelConfig:
        return cls.encoder_config_for(*args, **kwargs)

    @classmethod
    def encoder_config_for(
        cls,
        observation_space: Any,
        model_config_dict: dict,
        action_space: Any = None,
        **kwargs: Any,
    ) -> ModelConfig:
        """The encoder config for these spaces and settings (RLlib's ``_get_encoder_config``)."""
        return super()._get_encoder_config(  # type: ignore[misc]
            observation_space, model_config_dict, action_space, **kwargs
        )

    @property
    def encoder_config(self) -> ModelConfig:
        """The observation's encoder config (RLlib's ``_encoder_config``)."""
        return self._encoder_config  # type: ignore[attr-defined]

    @property
    def model_config_dict(self) -> dict:
        """The module's model config (RLlib's ``_model_config_dict``)."""
        return self._model_config_dict  # type: ignore[attr-defined]


class ModelConfigIncludes(AlgorithmConfig):
    """An algorithm config whose modules' ``model_config`` also holds
    ``model_config_includes()``: RLlib adds an algorithm's settings to its modules' model config
    through the private property ``_model_config_auto_includes``."""

    @property
    def _model_config_auto_includes(self) -> dict[str, Any]:
        return super()._model_config_auto_includes | self.model_config_includes()

    def model_config_includes(self) -> dict[str, Any]:
        """Settings the algorithm's modules read from their ``model_config``."""
        return {}
