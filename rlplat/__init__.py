"""rlplat: one YAML file becomes an RLlib run under Ray Tune."""

__version__ = "0.1.0"
