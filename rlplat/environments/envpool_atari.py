"""EnvPool as an env runner's vector of Atari games (``env.backend: envpool``).

EnvPool steps a batch of ALE games in C++ threads with its own preprocessing. It replaces the
Gymnasium vector env of the training env runners only when it runs the same chain as the
``atari`` preset: ``envpool_options`` translates that chain (the env's kwargs and the wrappers
the preset expands to) into EnvPool's options, and refuses anything it has no equivalent for.
Evaluation, ``rlplat eval``, export and serve keep the Gymnasium chain, so a policy trained
here is scored, rendered and served on the frames Gymnasium makes (they differ from EnvPool's
in a few pixels of the moving ball and paddle; a stack starts from copies of the first frame
rather than zeros).

``EnvPoolAtari`` makes the pool look like the vector env RLlib steps: frames channels-last
(84, 84, 4) as the preset's, one seed per env, Gymnasium's next-step autoreset (EnvPool's own:
the step after an episode's end resets it and ignores the action), and the game's unclipped
score over all its lives in the info of the step that ends the game, as ``GameScore`` puts it.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from rlplat.environments.atari import GAME_LENGTH, GAME_SCORE
from rlplat.experiment.presets import ATARI_MODULE as ATARI
from rlplat.experiment.schema import EnvSpec, entry_parts

# The preset's wrappers after AtariPreprocessing and StackFrames, in order, and the EnvPool
# option each one turns on; an absent one turns it off (GameScore is the adapter's own).
SWITCHES = {
    f"{ATARI}:FireReset": "use_fire_reset",
    f"{ATARI}:GameScore": None,
    f"{ATARI}:EpisodicLife": "episodic_life",
    f"{ATARI}:SignReward": "reward_clip",
}
# AtariPreprocessing's arguments that EnvPool has no switch for, and the value EnvPool works as.
FIXED_PREPROCESSING = {
    "terminal_on_life_loss": False,
    "grayscale_obs": True,
    "grayscale_newaxis": True,
    "scale_obs": False,
}
# The ALE env's kwargs EnvPool takes under the same names.
ENV_KWARGS = ("repeat_action_probability", "full_action_space", "mode", "difficulty")
# The ALE env's kwargs that end a game after so many frames (max_episode_steps: gym.make's time
# limit on the frame-skip-1 env); EnvPool counts agent steps of frame_skip frames.
FRAME_LIMITS = ("max_num_frames_per_episode", "max_episode_steps")


class NotTranslatable(ValueError):
    """The env's chain has no EnvPool equivalent; the message says which part."""


def envpool_task(env_id: str) -> str:
    """EnvPool's name for an ALE id: ``ALE/Breakout-v5`` is ``Breakout-v5``."""
    return env_id.removeprefix("ALE/")


def envpool_options(spec: EnvSpec) -> dict[str, Any]:
    """EnvPool's ``make`` options that run ``spec``'s env and wrappers (the atari preset's
    chain, written out), for training: the training-only wrappers included."""
    kwargs = dict(spec.kwargs)
    if kwargs.pop("frameskip", 1) != 1:
        raise NotTranslatable(
            "env.kwargs.frameskip must be 1 (AtariPreprocessing skips the frames)"
        )
    unknown = sorted(set(kwargs) - set(ENV_KWARGS) - set(FRAME_LIMITS))
    if unknown:
        raise NotTranslatable(
            f"env.kwargs {', '.join(unknown)} have no EnvPool equivalent; it takes "
            f"{', '.join(ENV_KWARGS)}"
        )
    options: dict[str, Any] = {key: kwargs[key] for key in ENV_KWARGS if key in kwargs}
    entries = [entry_parts(entry) for entry in spec.wrappers]
    names = [name for name, _ in entries]
    if names[:2] != ["AtariPreprocessing", f"{ATARI}:StackFrames"]:
        raise NotTranslatable(
            "the wrappers must start with AtariPreprocessing and StackFrames, as the atari "
            f"preset writes them, got {names[:2]}"
        )
    options.update(_preprocessing(entries[0][1]))
    options["stack_num"] = int(entries[1][1].get("size", 4))
    rest = names[2:]
    order = list(SWITCHES)
    if any(name not in SWITCHES for name in rest) or rest != sorted(rest, key=order.index):
        raise NotTranslatable(
            f"after StackFrames only {', '.join(order)} may follow, in that order, got {rest}"
        )
    for name, option in SWITCHES.items():
        if option is not None:
            options[option] = name in rest
    if options["use_fire_reset"] and not options["episodic_life"]:
        raise NotTranslatable(
            "FireReset without EpisodicLife: EnvPool presses FIRE only when an episode starts, "
            "so after a lost life that is not an episode's end the game would wait for FIRE"
        )
    for key in FRAME_LIMITS:
        if key in kwargs:
            options["max_episode_steps"] = math.ceil(kwargs[key] / options["frame_skip"])
    return options


def _preprocessing(arguments: dict[str, Any]) -> dict[str, Any]:
    """EnvPool's options for AtariPreprocessing's arguments."""
    for key, value in FIXED_PREPROCESSING.items():
        if arguments.get(key, value) != value:
            raise NotTranslatable(
                f"AtariPreprocessing's {key} must be {value} (EnvPool has no other), got "
                f"{arguments[key]}"
            )
    size = arguments.get("screen_size", 84)
    height, width = (size, size) if isinstance(size, int) else size
    noop_max = int(arguments.get("noop_max", 30))
    if noop_max < 1:
        raise NotTranslatable("AtariPreprocessing's noop_max must be at least 1 for EnvPool")
    return {
        "noop_max": noop_max,
        "frame_skip": int(arguments.get("frame_skip", 4)),
        "img_height": int(height),
        "img_width": int(width),
    }


class EnvPoolAtari(gym.vector.VectorEnv):
    """``num_envs`` games of ``task`` in one EnvPool, stepped as RLlib steps a vector env."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, task: str, num_envs: int, threads: int, options: dict[str, Any]):
        import envpool  # noqa: PLC0415 - the envpool extra, needed only with this backend

        self._make = lambda **seeds: envpool.make_gymnasium(
            task, num_envs=num_envs, batch_size=num_envs, num_threads=threads, **options, **seeds
        )
        self._pool = self._make(seed=0)
        self.num_envs = num_envs
        stack, height, width = self._pool.observation_space.shape
        self.single_observation_space = gym.spaces.Box(
            0, 255, (height, width, stack), dtype=np.uint8
        )
        self.single_action_space = self._pool.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._score = np.zeros(num_envs)
        self._length = np.zeros(num_envs, dtype=np.int64)
        self._resetting = np.zeros(num_envs, dtype=bool)  # its last step ended an episode
        self._game_over = np.zeros(num_envs, dtype=bool)  # ... and the game with it
        self._lives = np.zeros(num_envs, dtype=np.int64)

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """All games anew; a seed (one per env, or one for env 0 and counting up) rebuilds
        the pool, which takes its seeds only when made, and only below 2**31."""
        if seed is not None:
            self._pool.close()
            if isinstance(seed, list | tuple):
                seeds: dict[str, Any] = {"env_seed": [each % 2**31 for each in seed]}
            else:
                seeds = {"seed": seed % 2**31}
            self._pool = self._make(**seeds)
        frames, info = self._pool.reset()
        self._score[:], self._length[:] = 0.0, 0
        self._resetting[:], self._game_over[:] = False, False
        self._lives = np.asarray(info["lives"]).copy()
        return _channels_last(frames), {}

    def step(
        self, actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        frames, rewards, terminated, truncated, info = self._pool.step(np.asarray(actions))
        terminated, truncated = terminated.astype(bool), truncated.astype(bool)
        playing = ~self._resetting  # the step after an episode's end only resets its env
        next_life = self._resetting & ~self._game_over
        # A game that ended during the no-ops of a new life is restarted by the pool without
        # a word: it goes unreported and the count starts over.
        restarted = next_life & (info["lives"] > self._lives)
        self._score[restarted], self._length[restarted] = 0.0, 0
        self._score += np.where(playing, info["reward"], 0.0)
        # Counted as the Gymnasium chain counts them: the step that starts a new life is one.
        self._length += playing | (next_life & ~restarted)
        game_over = playing & (info["terminated"].astype(bool) | truncated)
        infos: dict[str, Any] = {}
        if game_over.any():
            infos = {
                GAME_SCORE: self._score.copy(),
                f"_{GAME_SCORE}": game_over,
                GAME_LENGTH: self._length.copy(),
                f"_{GAME_LENGTH}": game_over,
            }
            self._score[game_over], self._length[game_over] = 0.0, 0
        self._resetting, self._game_over = terminated | truncated, game_over
        self._lives = np.asarray(info["lives"]).copy()
        return _channels_last(frames), rewards.astype(np.float32), terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        if hasattr(self, "_pool"):  # not when making it failed
            self._pool.close()


def _channels_last(frames: np.ndarray) -> np.ndarray:
    """EnvPool's (envs, stack, height, width) as a contiguous (envs, height, width, stack)."""
    return np.ascontiguousarray(np.moveaxis(frames, 1, -1))
