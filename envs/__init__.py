"""Custom environments shipped with rlplat; reference them as ``factory: envs.<module>:<name>``."""
