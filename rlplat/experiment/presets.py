"""Env presets: ``env.preset`` names a standard preprocessing chain, written out in full.

``expand_preset`` turns the preset into the env kwargs and wrappers it stands for; the run's
resolved ``experiment.yaml`` keeps that expansion, not the preset's name. What the user wrote
wins: their kwargs over the preset's, their wrappers after the preset's.

``atari`` is the DeepMind chain as RL Zoo's ``AtariWrapper`` and CleanRL's ``ppo_atari`` apply
it: Gymnasium's ``AtariPreprocessing`` (up to 30 no-ops at reset, 4 frames per step with the last
two max-pooled, 84x84 grayscale), the game score, FIRE at each start, a lost life ending the
episode and rewards clipped to their sign (these two in training only), and the last 4 frames
stacked, uint8 (84, 84, 4). The ALE v5 env itself keeps its sticky actions (a 0.25 chance of
repeating the last action); its own frame skip is off, since the wrapper skips frames.
"""

from __future__ import annotations

from typing import Any

from rlplat.experiment.schema import Experiment

ATARI_MODULE = "rlplat.environments.atari"

PRESETS: dict[str, dict[str, Any]] = {
    "atari": {
        "kwargs": {"frameskip": 1, "repeat_action_probability": 0.25},
        "wrappers": [
            {
                "AtariPreprocessing": {
                    "noop_max": 30,
                    "frame_skip": 4,
                    "screen_size": 84,
                    "terminal_on_life_loss": False,
                    "grayscale_obs": True,
                    "grayscale_newaxis": True,
                    "scale_obs": False,
                }
            },
            {f"{ATARI_MODULE}:StackFrames": {"size": 4}},
            f"{ATARI_MODULE}:FireReset",
            f"{ATARI_MODULE}:GameScore",
            f"{ATARI_MODULE}:EpisodicLife",
            f"{ATARI_MODULE}:SignReward",
        ],
    },
}


def expand_preset(experiment: Experiment) -> Experiment:
    """The experiment with its env preset written out (unchanged without one)."""
    env = experiment.env
    if env.preset is None:
        return experiment
    preset = PRESETS[env.preset]
    expanded = env.model_copy(
        update={
            "preset": None,
            "kwargs": {**preset["kwargs"], **env.kwargs},
            "wrappers": [*preset["wrappers"], *env.wrappers],
        }
    )
    return experiment.model_copy(update={"env": expanded})
