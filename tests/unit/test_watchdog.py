"""The watchdog tells the truth: an off-policy warm-up's fast iterations do not make the first
training iteration "stuck", and a trial without a checkpoint is never stopped by one Ctrl-C."""

from __future__ import annotations

import io
import signal
import time

import pytest
from rich.console import Console

from rlplat.callbacks.interrupt import GracefulStop

WARM_UP = {"num_env_steps_sampled_lifetime": 1000}
TRAINED = {
    "num_env_steps_sampled_lifetime": 2000,
    "learners": {"__all_modules__": {"num_env_steps_trained_lifetime": 256}},
}


class Trial:
    trial_id, status = "t1", "RUNNING"

    def __str__(self) -> str:
        return "SAC_00000"


def _watch(results: list[dict], checkpointed: bool) -> tuple[GracefulStop, str]:
    """A trial reports ``results``, then stays in its next iteration past the watchdog."""
    out = io.StringIO()
    stop, trial = GracefulStop(Console(file=out, width=400), watchdog_s=0.05), Trial()
    stop.on_trial_start(0, [trial], trial)
    for result in results:
        stop.on_trial_result(0, [trial], trial, dict(result))
    if checkpointed:
        stop.on_checkpoint(0, [trial], trial, checkpoint=None)
    time.sleep(0.1)
    stop.on_step_end(0, [trial])
    return stop, out.getvalue()


def test_a_first_training_iteration_after_a_warm_up_is_not_called_stuck():
    stop, said = _watch([WARM_UP, WARM_UP], checkpointed=False)
    assert (
        "none of its iterations has trained yet" in said and "stuck" not in said.split(":")[1][:60]
    )
    assert "no checkpoint yet: stopping it now would lose its 1,000 env steps" in said
    stop._on_signal(signal.SIGINT, None)  # the first Ctrl-C waits for the iteration, as usual
    assert stop.requested and not stop._stopping


def test_a_trial_with_a_checkpoint_stuck_past_its_training_iterations_stops_on_one_ctrl_c():
    stop, said = _watch([WARM_UP, TRAINED], checkpointed=True)
    assert "its slowest training iteration so far took" in said and "may be stuck" in said
    assert "Ctrl-C now stops at once" in said
    with pytest.raises(KeyboardInterrupt):  # no Tune handler in a unit test: stopping raises
        stop._on_signal(signal.SIGINT, None)
