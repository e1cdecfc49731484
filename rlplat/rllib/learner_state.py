"""Learner connector state in the learner's checkpoint state.

RLlib saves the env runners' connector state (a ``mean_std_filter``'s statistics) with every
checkpoint, but not the learner pipeline's: a stateful learner piece (``reward_scaling``'s running
return variance) would start over on ``--resume``. The mixin adds the pipeline's state to the
learner's own state, so checkpoints carry it and restoring sets it back.
"""

from __future__ import annotations

from typing import Any

LEARNER_CONNECTOR = "rlplat_learner_connector"


class LearnerConnectorState:
    """Learner mixin: ``get_state``/``set_state`` include the learner connector pipeline's."""

    _learner_connector: Any

    def get_state(
        self, components: Any = None, *, not_components: Any = None, **kwargs: Any
    ) -> Any:
        state = super().get_state(  # type: ignore[misc]
            components, not_components=not_components, **kwargs
        )
        wanted = self._check_component(  # type: ignore[attr-defined]
            LEARNER_CONNECTOR, components, not_components
        )
        if wanted and self._learner_connector is not None:
            state[LEARNER_CONNECTOR] = self._learner_connector.get_state()
        return state

    def set_state(self, state: Any) -> None:
        super().set_state(state)  # type: ignore[misc]
        if LEARNER_CONNECTOR in state and self._learner_connector is not None:
            self._learner_connector.set_state(state[LEARNER_CONNECTOR])
