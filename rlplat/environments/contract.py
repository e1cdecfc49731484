"""Does the env keep Gymnasium's (or PettingZoo's) contract? Checked before Ray starts.

RLlib's env runners catch whatever an env's ``step`` raises and rebuild the env, so an env that
returns the old 4-tuple fails on every step forever, and observations outside their declared
space train without a word. Here the env (after the experiment's wrappers, as training sees it)
is reset and stepped with random actions, and the first broken promise becomes one paragraph.
Single-agent envs then go through Gymnasium's own ``check_env`` (reset signature, seeding,
determinism); its warnings are advice and stay quiet, its failures are reported.
"""

from __future__ import annotations

import math
import reprlib
import traceback
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env as gymnasium_check_env

from rlplat.environments.kinds import ACTION_MASK, is_multi_agent

RANDOM_STEPS = 32

SINGLE_AGENT_STEP = "(observation, reward, terminated, truncated, info)"
MULTI_AGENT_STEP = "(observations, rewards, terminateds, truncateds, infos), each a dict by agent"

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 80
_short.maxlist = _short.maxtuple = _short.maxdict = 4


class ContractBroken(Exception):
    """The env broke its API's contract; ``str()`` says how, in one sentence."""


class EnvRaised(ContractBroken):
    """The env raised while being reset or stepped."""


def check_contract(env: Any, *, steps: int = RANDOM_STEPS) -> list[dict[str, float]]:
    """Reset ``env`` and take ``steps`` random steps; raise ``ContractBroken`` at the first
    value Gymnasium or PettingZoo forbid. ``env`` is single-agent (``gym.Env``) or RLlib's
    ``MultiAgentEnv`` as rlplat's PettingZoo adapters build it. A multi-agent env's rewards of
    each step, by agent, are returned (nothing for a single-agent env)."""
    if is_multi_agent(env):
        api = _MultiAgent(env)
        _random_episodes(env, steps, api)
        return api.rewards
    _random_episodes(env, steps, _SingleAgent())
    _gymnasium_checker(env)
    return []


def _gymnasium_checker(env: gym.Env) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gymnasium_check_env(env, skip_render_check=True, skip_close_check=True)
    except Exception as exc:  # noqa: BLE001 - every failure of the checker is the env's
        raise ContractBroken(f"Gymnasium's env checker failed: {_describe(exc)}") from None


def _describe(exc: Exception) -> str:
    """The exception, or for a bare ``assert`` the line that failed."""
    text = str(exc)
    if text:
        return f"{type(exc).__name__}: {text}"
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    where = f"{frame.filename.rpartition('/')[2]}:{frame.lineno}"
    return f"{type(exc).__name__} at {where}: {frame.line}"


def _random_episodes(env: Any, steps: int, api: _SingleAgent | _MultiAgent) -> None:
    spaces = env.action_spaces.values() if is_multi_agent(env) else [env.action_space]
    for index, space in enumerate(spaces):
        space.seed(index)  # the same actions, and so the same report, every time
    observations = api.reset(env, seed=0)
    for step in range(1, steps + 1):
        actions = api.random_actions(env, observations)
        try:
            result = env.step(actions)
        except Exception as exc:  # noqa: BLE001 - the env's own failure, reported as such
            raise EnvRaised(
                f"step() raised {_describe(exc)} (random actions, step {step} after reset)"
            ) from None
        observations, done = api.check_step(env, result)
        if done:
            observations = api.reset(env, seed=step)


class _SingleAgent:
    def reset(self, env: gym.Env, seed: int) -> Any:
        result = _call(env.reset, "reset", seed=seed)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ContractBroken(
                f"reset() returned {_returned(result)}; Gymnasium requires (observation, info)."
            )
        observation, info = result
        _check_observation(observation, env.observation_space, "reset()")
        _check_info(info, "reset()")
        return observation

    def random_actions(self, env: gym.Env, observation: Any) -> Any:
        return env.action_space.sample()

    def check_step(self, env: gym.Env, result: Any) -> tuple[Any, bool]:
        if not (isinstance(result, tuple) and len(result) == 5):
            raise ContractBroken(
                f"step() returned {_returned(result)}; Gymnasium requires {SINGLE_AGENT_STEP} "
                "(an old-API env returning (obs, reward, done, info) needs updating)."
            )
        observation, reward, terminated, truncated, info = result
        _check_observation(observation, env.observation_space, "step()")
        _check_reward(reward, "step()")
        _check_flag(terminated, "terminated", "step()")
        _check_flag(truncated, "truncated", "step()")
        _check_info(info, "step()")
        return observation, bool(terminated or truncated)


class _MultiAgent:
    def __init__(self, env: Any):
        self.spaces = dict(env.observation_spaces)
        self.rewards: list[dict[str, float]] = []  # each step's, by agent

    def reset(self, env: Any, seed: int) -> dict[str, Any]:
        result = _call(env.reset, "reset", seed=seed)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ContractBroken(
                f"reset() returned {_returned(result)}; PettingZoo requires (observations, "
                "infos), each a dict by agent."
            )
        observations, infos = result
        self._check_observations(observations, "reset()")
        if not isinstance(infos, dict):
            raise ContractBroken(f"reset() returned infos {_returned(infos)}; must be a dict.")
        return observations

    def random_actions(self, env: Any, observations: dict[str, Any]) -> dict[str, Any]:
        actions = {}
        for agent, observation in observations.items():
            space = env.action_spaces[agent]
            mask = observation.get(ACTION_MASK) if isinstance(observation, dict) else None
            if mask is not None and isinstance(space, gym.spaces.Discrete) and np.any(mask):
                actions[agent] = space.sample(mask=np.asarray(mask, dtype=np.int8))
            else:
                actions[agent] = space.sample()
        return actions

    def check_step(self, env: Any, result: Any) -> tuple[dict[str, Any], bool]:
        if not (isinstance(result, tuple) and len(result) == 5):
            raise ContractBroken(
                f"step() returned {_returned(result)}; PettingZoo requires {MULTI_AGENT_STEP}."
            )
        observations, rewards, terminateds, truncateds, infos = result
        self._check_observations(observations, "step()")
        for name, values in (("rewards", rewards), ("infos", infos)):
            if not isinstance(values, dict):
                raise ContractBroken(f"step() returned {name} {_returned(values)}; must be a dict.")
        for agent, reward in rewards.items():
            _check_reward(reward, f"step() for agent {agent!r}")
        self.rewards.append({agent: float(reward) for agent, reward in rewards.items()})
        for name, flags in (("terminated", terminateds), ("truncated", truncateds)):
            for agent, flag in flags.items():
                _check_flag(flag, name, f"step() for agent {agent!r}")
        done = bool(terminateds.get("__all__") or truncateds.get("__all__"))
        return observations, done

    def _check_observations(self, observations: Any, where: str) -> None:
        if not isinstance(observations, dict):
            raise ContractBroken(
                f"{where} returned observations {_returned(observations)}; must be a dict by agent."
            )
        for agent, observation in observations.items():
            if agent not in self.spaces:
                raise ContractBroken(
                    f"{where} returned an observation for {agent!r}, which is not one of the "
                    f"env's possible_agents ({', '.join(map(str, self.spaces))})."
                )
            _check_observation(observation, self.spaces[agent], f"{where} for agent {agent!r}")


def _call(method: Any, name: str, **kwargs: Any) -> Any:
    try:
        return method(**kwargs)
    except Exception as exc:  # noqa: BLE001 - the env's own failure, reported as such
        raise EnvRaised(f"{name}() raised {_describe(exc)}") from None


def _returned(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} values {_short.repr(value)}"
    return f"{type(value).__name__} {_short.repr(value)}"


def _check_observation(observation: Any, space: gym.Space, where: str) -> None:
    if space.contains(observation):
        if _all_finite(observation):
            return
        raise ContractBroken(
            f"{where} returned an observation with NaN or infinite values: "
            f"{_short.repr(observation)}."
        )
    raise ContractBroken(
        f"{where} returned an observation outside the declared observation space {space}: "
        f"{_observation_mismatch(observation, space)}."
    )


def _observation_mismatch(observation: Any, space: gym.Space) -> str:
    if isinstance(space, gym.spaces.Box):
        array = np.asarray(observation)
        if array.shape != space.shape:
            return f"shape {array.shape}, the space's is {space.shape}"
        if not np.can_cast(array.dtype, space.dtype):
            return f"dtype {array.dtype}, the space's is {space.dtype}"
        outside = np.argwhere((array < space.low) | (array > space.high))
        if len(outside):
            index = tuple(int(i) for i in outside[0])
            where = index[0] if len(index) == 1 else index
            return (
                f"{len(outside)} value(s) out of bounds, e.g. [{where}] = {array[index]:.4g} "
                f"outside [{space.low[index]:.4g}, {space.high[index]:.4g}]"
            )
    return f"got {_returned(observation)}"


def _all_finite(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return all(_all_finite(v) for v in value)
    array = np.asarray(value)
    return not np.issubdtype(array.dtype, np.floating) or bool(np.all(np.isfinite(array)))


def _check_reward(reward: Any, where: str) -> None:
    if isinstance(reward, (bool, np.bool_)) or not isinstance(reward, (int, float, np.number)):
        raise ContractBroken(
            f"{where} returned reward {_returned(reward)}; a reward must be a real number "
            "(int or float)."
        )
    if not math.isfinite(float(reward)):
        raise ContractBroken(f"{where} returned reward {reward}; rewards must be finite.")


def _check_flag(flag: Any, name: str, where: str) -> None:
    if not isinstance(flag, (bool, np.bool_)):
        raise ContractBroken(f"{where} returned {name} {_returned(flag)}; it must be a bool.")


def _check_info(info: Any, where: str) -> None:
    if not isinstance(info, dict):
        raise ContractBroken(f"{where} returned info {_returned(info)}; it must be a dict.")
