"""The prepare stage: a loaded experiment checked, built and placed once (``PreparedRun``)."""

from rlplat.prepare.run_spec import (
    PreparedRun,
    prepare,
    trial_algorithm_config,
    trial_config,
)

__all__ = ["PreparedRun", "prepare", "trial_algorithm_config", "trial_config"]
