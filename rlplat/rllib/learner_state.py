"""Learner connector state in the learner's checkpoint state.

RLlib saves the env runners' connector state (a ``mean_std_filter``'s statistics) with every
checkpoint, but not the learner pipeline's: a stateful learner piece (``reward_scaling``'s running
return variance) would start over on ``--resume``. The mixin adds the pipeline's state to the
learner's own state, so checkpoints carry it and restoring sets it back.
"""

from __future__ import annotations

from typing import Any

from rlplat.seams.rllib_learner import learner_connector, wants_component

LEARNER_CONNECTOR = "rlplat_learner_connector"


class LearnerConnectorState:
    """Learner mixin: ``get_state``/``set_state`` include the learner connector pipeline's."""

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> Any:
        state = super().get_state(  # type: ignore[misc]
            components, not_components=not_components, **kwargs
        )
        pipeline = learner_connector(self)  # type: ignore[arg-type]
        wanted = wants_component(self, LEARNER_CONNECTOR, components, not_components)  # type: ignore[arg-type]
        if wanted and pipeline is not None:
            state[LEARNER_CONNECTOR] = pipeline.get_state()
        return state

    def set_state(self, state: Any) -> None:
        super().set_state(state)  # type: ignore[misc]
        pipeline = learner_connector(self)  # type: ignore[arg-type]
        if LEARNER_CONNECTOR in state and pipeline is not None:
            pipeline.set_state(state[LEARNER_CONNECTOR])
