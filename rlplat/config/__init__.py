"""Experiment files: YAML with line numbers, the typed schema, overrides, validation."""

from rlplat.config.load import load_experiment
from rlplat.config.schema import Experiment

__all__ = ["Experiment", "load_experiment"]
