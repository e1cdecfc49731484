"""The Atari pieces Gymnasium's ``AtariPreprocessing`` leaves out, for ``env.preset: atari``.

Gymnasium's wrapper does the no-op reset, the frame skip with max-pooling and the 84x84
grayscale frame (from ALE's own grayscale screen, resized once per agent step). The usual
DeepMind chain also has these, each a few lines:

- ``GameScore``: the game's score, unclipped and summed over every life, in the info of the step
  that ends the game. Atari tables report this, not the training return.
- ``FireReset``: games that wait for FIRE (Breakout, Pong...) get it at the start of the game and
  of every new life, so no policy stalls on a still screen.
- ``EpisodicLife``: a lost life ends the episode, the game goes on. Training only.
- ``SignReward``: rewards clipped to their sign, -1, 0 or 1. Training only.
- ``StackFrames``: the last 4 frames on the channel axis, (84, 84, 4), as RLlib's CNNs take
  them (Gymnasium's ``FrameStackObservation`` stacks on a new first axis). Stacking in the env
  rather than in RLlib's frame-stacking connector keeps DQN possible (RLlib's learner-side
  stacking does not stack the next observations) and the exported policy's input what the env
  gives; a replay memory holds 4 frames per step (100k steps: 2.8 GB as uint8).

A wrapper class whose ``training_only`` is true is left out when the env is built for
evaluation (in-run greedy evaluation, ``rlplat eval``, export, serve): an evaluation episode is
then a whole game and its return the game score.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

GAME_SCORE = "game_score"
GAME_LENGTH = "game_length"


class GameScore(gym.Wrapper):
    """Adds ``game_score`` (the unclipped rewards of the whole game) and ``game_length`` (its
    steps) to the info of the step that ends the game (terminated or truncated). Placed above
    ``FireReset`` and below ``EpisodicLife``, it counts the agent's steps and the no-op step
    that continues the game after a lost life."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._score = 0.0
        self._length = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._score, self._length = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._score += float(reward)
        self._length += 1
        if terminated or truncated:
            info = {**info, GAME_SCORE: self._score, GAME_LENGTH: self._length}
        return obs, reward, terminated, truncated, info


def _lives(env: gym.Env) -> int:
    return int(env.unwrapped.ale.lives())


class FireReset(gym.Wrapper):
    """In a game with a FIRE action, presses FIRE and then action 2 after a reset and after a
    lost life (the game waits for them); other games pass through unchanged.

    Their rewards count; a game that ends during them is reset.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings()
        self._fire = meanings.index("FIRE") if "FIRE" in meanings and len(meanings) >= 3 else None
        self._lives = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        if self._fire is not None:
            obs, _, terminated, truncated, info = self._press_start()
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self._lives = _lives(self.env)
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        lives = _lives(self.env)
        if self._fire is not None and 0 < lives < self._lives and not (terminated or truncated):
            # The new life starts now; a game that ends meanwhile ends at this step.
            obs, extra, terminated, truncated, info = self._press_start()
            reward += extra
            lives = _lives(self.env)
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def _press_start(self) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """FIRE, then action 2 (unless the game ends after FIRE): the last step's outcome, with
        the reward of both."""
        total = 0.0
        for action in (self._fire, 2):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode (terminated), as in DeepMind's DQN: a state's value then
    stops at the next lost life. Only the game's end resets the game; the reset after a lost
    life continues it with one no-op step. Training only."""

    training_only = True

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = _lives(self.env)
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if self._game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self._game_over = False
        self._lives = _lives(self.env)
        return obs, info


class SignReward(gym.RewardWrapper):
    """Rewards clipped to their sign (-1, 0 or 1), as Atari agents are trained. Training only."""

    training_only = True

    def reward(self, reward: float) -> float:
        return float(np.sign(reward))


class StackFrames(gym.ObservationWrapper):
    """The last ``size`` frames of shape (height, width, 1) as one (height, width, size)
    observation, newest last; a reset starts from zeros and the first frame."""

    def __init__(self, env: gym.Env, size: int = 4):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3 or space.shape[2] != 1:
            raise ValueError(
                f"StackFrames stacks single-channel frames of shape (height, width, 1), got {space}"
            )
        self.observation_space = gym.spaces.Box(
            low=np.repeat(space.low, size, axis=2),
            high=np.repeat(space.high, size, axis=2),
            dtype=space.dtype,
        )
        self._frames = np.zeros(self.observation_space.shape, dtype=space.dtype)

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._frames[...] = 0
        return super().reset(**kwargs)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        self._frames = np.roll(self._frames, -1, axis=2)
        self._frames[..., -1:] = observation
        return self._frames.copy()
