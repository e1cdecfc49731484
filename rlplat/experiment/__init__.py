"""Experiment files: YAML with line numbers, the typed schema, overrides, validation."""

from rlplat.experiment.load import load_experiment
from rlplat.experiment.schema import Experiment

__all__ = ["Experiment", "load_experiment"]
