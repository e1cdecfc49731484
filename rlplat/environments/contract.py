"""Does the env keep Gymnasium's (or PettingZoo's) contract? Checked before Ray starts.

RLlib's env runners catch whatever an env's ``step`` raises and rebuild the env, so an env that
returns the old 4-tuple fails on every step forever, and observations outside their declared
space train without a word. Here the env (after the experiment's wrappers, as training sees it)
is reset and stepped with random actions across episode ends, and the first broken promise
becomes one paragraph. Single-agent envs then go through Gymnasium's own ``check_env`` (reset
signature, seeding, determinism); its warnings are advice and stay quiet, its failures are
reported. Each part (``env.check``: contract, bounds, determinism) refuses, warns once or is
skipped on its own, and an observation past a bound by float rounding only is accepted with a
note.
"""

from __future__ import annotations

import math
import reprlib
import warnings
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils.env_checker import check_env as gymnasium_check_env

from rlplat.environments.kinds import ACTION_MASK, is_multi_agent
from rlplat.experiment.schema import EnvCheck
from rlplat.util.raised import describe_raised

RANDOM_STEPS = 32  # at least; then on until EPISODES_ENDED episodes ended or MAX_STEPS
EPISODES_ENDED = 2
MAX_STEPS = 256
# An observation past its bound by at most this, relative to the bound (or absolute below 1), is
# float rounding (a clip to [0, 1] computed as 1.0000000000000002): accepted with a note.
ROUNDING = 1e-6

SINGLE_AGENT_STEP = "(observation, reward, terminated, truncated, info)"
MULTI_AGENT_STEP = "(observations, rewards, terminateds, truncateds, infos), each a dict by agent"

_short = reprlib.Repr()
_short.maxstring = 60
_short.maxother = 80
_short.maxlist = _short.maxtuple = _short.maxdict = 4


class ContractBroken(Exception):
    """The env broke its API's contract; ``str()`` says how, in one sentence; ``part`` is the
    ``env.check`` part that refused it (None: a break no part relaxes: training could not go
    on)."""

    def __init__(self, message: str, part: str | None = None):
        super().__init__(message)
        self.part = part  # None: the API itself (tuples, dicts by agent), which no level relaxes


class EnvRaised(ContractBroken):
    """The env raised while being reset or stepped."""


@dataclass
class CheckReport:
    """What the check saw: a multi-agent env's rewards of each step, by agent (nothing for a
    single-agent env), the notes it has for the user (a part that warned, a rounding accepted)
    and the env steps and episode ends it stepped through."""

    rewards: list[dict[str, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    steps: int = 0
    episodes_ended: int = 0


class _Parts:
    """The levels of ``env.check``: a breach of a part that refuses raises, of one that warns
    becomes one note (its first), of one that is off nothing."""

    def __init__(self, levels: EnvCheck, report: CheckReport):
        self.levels = levels
        self.report = report
        self._noted: set[str] = set()
        self.seen: set[str] = set()  # the parts whose promise the env broke, at any level

    def breach(self, part: str, message: str) -> None:
        self.seen.add(part)
        level = getattr(self.levels, part)
        if level == "refuse":
            raise ContractBroken(message, part)
        if level == "warn":
            self.note(part, f"{message} (env.check.{part}: warn; the run goes on)")

    def note(self, part: str, message: str, key: str | None = None) -> None:
        """One note per ``key`` (default: the part), unless the part is off."""
        key = key or part
        if key not in self._noted and getattr(self.levels, part) != "off":
            self._noted.add(key)
            self.report.notes.append(f"env check: {message}")


def check_contract(
    env: Any, *, steps: int = RANDOM_STEPS, levels: EnvCheck | None = None
) -> CheckReport:
    """Reset ``env`` and step it with seeded random actions (at least ``steps``, then on until
    ``EPISODES_ENDED`` episodes have ended or ``max(steps, MAX_STEPS)``); raise
    ``ContractBroken`` at the first value Gymnasium or PettingZoo forbid whose part refuses.
    ``env`` is single-agent (``gym.Env``) or RLlib's ``MultiAgentEnv`` as rlplat's PettingZoo
    adapters build it. The same env gives the same report every time."""
    report = CheckReport()
    parts = _Parts(levels or EnvCheck(), report)
    if is_multi_agent(env):
        api: _SingleAgent | _MultiAgent = _MultiAgent(env, parts)
        _random_episodes(env, steps, api, report)
        report.rewards = api.rewards
        return report
    _random_episodes(env, steps, _SingleAgent(parts), report)
    if parts.levels.determinism != "off":
        _gymnasium_checker(env, parts)
    return report


def _gymnasium_checker(env: gym.Env, parts: _Parts) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gymnasium_check_env(env, skip_render_check=True, skip_close_check=True)
    except Exception as exc:  # noqa: BLE001 - every failure of the checker is the env's
        if "bounds" in parts.seen and "observation space" in str(exc):
            return  # the bounds part has judged the observations already
        parts.breach(
            "determinism",
            f"Gymnasium's env checker failed: {describe_raised(exc, versions=False)}",
        )


def _random_episodes(
    env: Any, steps: int, api: _SingleAgent | _MultiAgent, report: CheckReport
) -> None:
    spaces = env.action_spaces.values() if is_multi_agent(env) else [env.action_space]
    for index, space in enumerate(spaces):
        space.seed(index)  # the same actions, and so the same report, every time
    observations = api.reset(env, seed=0)
    step = 0
    while step < steps or (report.episodes_ended < EPISODES_ENDED and step < max(steps, MAX_STEPS)):
        step += 1
        actions = api.random_actions(env, observations)
        try:
            result = env.step(actions)
        except Exception as exc:  # noqa: BLE001 - the env's own failure, reported as such
            raise EnvRaised(
                f"step() raised {describe_raised(exc)} (random actions, step {step} after reset)"
            ) from None
        observations, done = api.check_step(env, result)
        report.steps = step
        if done:
            report.episodes_ended += 1
            observations = api.reset(env, seed=step)


class _SingleAgent:
    def __init__(self, parts: _Parts):
        self.parts = parts

    def reset(self, env: gym.Env, seed: int) -> Any:
        result = _call(env.reset, "reset", seed=seed)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise ContractBroken(
                f"reset() returned {_returned(result)}; Gymnasium requires (observation, info)."
            )
        observation, info = result
        _check_observation(observation, env.observation_space, "reset()", self.parts)
        _check_info(info, "reset()", self.parts)
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
        _check_observation(observation, env.observation_space, "step()", self.parts)
        _check_reward(reward, "step()", self.parts)
        _check_flag(terminated, "terminated", "step()", self.parts)
        _check_flag(truncated, "truncated", "step()", self.parts)
        _check_info(info, "step()", self.parts)
        return observation, bool(terminated or truncated)


class _MultiAgent:
    def __init__(self, env: Any, parts: _Parts):
        self.parts = parts
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
            _check_reward(reward, f"step() for agent {agent!r}", self.parts)
        self.rewards.append({agent: _number(reward) for agent, reward in rewards.items()})
        for name, flags in (("terminated", terminateds), ("truncated", truncateds)):
            for agent, flag in flags.items():
                _check_flag(flag, name, f"step() for agent {agent!r}", self.parts)
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
            _check_observation(
                observation, self.spaces[agent], f"{where} for agent {agent!r}", self.parts
            )


def _call(method: Any, name: str, **kwargs: Any) -> Any:
    try:
        return method(**kwargs)
    except Exception as exc:  # noqa: BLE001 - the env's own failure, reported as such
        raise EnvRaised(f"{name}() raised {describe_raised(exc)}") from None


def _returned(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} values {_short.repr(value)}"
    return f"{type(value).__name__} {_short.repr(value)}"


def _check_observation(observation: Any, space: gym.Space, where: str, parts: _Parts) -> None:
    if not _all_finite(observation):
        parts.breach(
            "contract",
            f"{where} returned an observation with NaN or infinite values: "
            f"{_short.repr(observation)}.",
        )
        return
    if space.contains(observation):
        return
    part, problem = _observation_problem(observation, space)
    message = (
        f"{where} returned an observation outside the declared observation space {space}: {problem}"
    )
    if part == "rounding":
        parts.seen.add("bounds")
        parts.note("bounds", f"{message}, by float rounding only: accepted", key="rounding")
    else:
        parts.breach(part, f"{message}.")


def _observation_problem(observation: Any, space: gym.Space, at: str = "") -> tuple[str, str]:
    """(the ``env.check`` part, or 'rounding', and how ``observation`` leaves ``space``), the
    first such place in a nested Dict or Tuple space; ``at`` is the path to it."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(observation, dict) or set(observation) != set(space.spaces):
            keys = sorted(observation) if isinstance(observation, dict) else None
            return (
                "contract",
                f"{at or 'the observation'} has keys {keys}, the space's are "
                f"{sorted(space.spaces)}",
            )
        return _first_problem(
            ((observation[key], sub, f"{at}[{key!r}]") for key, sub in space.spaces.items())
        )
    if isinstance(space, gym.spaces.Tuple):
        if isinstance(observation, list):  # as Gymnasium's Tuple.contains takes it
            observation = tuple(observation)
        if not isinstance(observation, tuple) or len(observation) != len(space.spaces):
            return "contract", f"{at or 'the observation'} is {_returned(observation)}"
        return _first_problem(
            (
                (value, sub, f"{at}[{index}]")
                for index, (value, sub) in enumerate(zip(observation, space.spaces, strict=True))
            )
        )
    if isinstance(space, gym.spaces.Box):
        # As Gymnasium's Box.contains reads what is not an array yet: in the space's dtype.
        array = (
            observation if isinstance(observation, np.ndarray) else _as_array(observation, space)
        )
        if array.shape != space.shape:
            return "contract", f"{at}shape {array.shape}, the space's is {space.shape}"
        if not np.can_cast(array.dtype, space.dtype):
            return "contract", f"{at}dtype {array.dtype}, the space's is {space.dtype}"
        return _bounds_problem(array, space, at)
    return "contract", f"{at}got {_returned(observation)}"


def _first_problem(items: Any) -> tuple[str, str]:
    """The first part that breaks its space (before any accepted rounding)."""
    found: tuple[str, str] | None = None
    for value, space, at in items:
        if space.contains(value):
            continue
        part, problem = _observation_problem(value, space, at)
        if part != "rounding":
            return part, problem
        found = found or (part, problem)
    return found or ("contract", "")


def _as_array(observation: Any, space: gym.spaces.Box) -> np.ndarray:
    try:
        return np.asarray(observation, dtype=space.dtype)
    except (TypeError, ValueError):
        return np.asarray(observation)


def _bounds_problem(array: np.ndarray, space: gym.spaces.Box, at: str) -> tuple[str, str]:
    """The values outside [low, high], with the farthest one's exact value and bound;
    'rounding' where the values are floats and each is within ``ROUNDING`` of the bound it
    crossed (relative to that bound, absolute below 1)."""
    values = array.astype(np.float64)
    low, high = space.low.astype(np.float64), space.high.astype(np.float64)
    above, below = values > high, values < low
    outside = np.argwhere(above | below)
    if not len(outside):
        return "contract", f"{at}{_returned(array)}"
    crossed = np.where(above, high, low)
    excess = np.where(above | below, np.abs(values - crossed), 0.0)
    tolerance = ROUNDING * np.maximum(1.0, np.abs(crossed))
    floats = np.issubdtype(array.dtype, np.floating)
    rounding = floats and bool(np.all(excess[above | below] <= tolerance[above | below]))
    index = tuple(int(i) for i in np.unravel_index(int(np.argmax(excess)), excess.shape))
    where = index[0] if len(index) == 1 else index
    value, bound = values[index], crossed[index]
    side = "high" if above[index] else "low"
    return (
        "rounding" if rounding else "bounds",
        f"{len(outside)} value(s) out of bounds, the farthest {at}[{where}] = "
        f"{_exact(value, array.dtype)} past its {side} bound {_exact(bound, space.dtype)} by "
        f"{abs(value - bound):.3g}",
    )


def _exact(value: float, dtype: np.dtype) -> str:
    """The shortest text that reads back as ``value`` in ``dtype`` (float32's 0.41887903, not
    its float64 widening 0.41887903213500977; never rounded into agreeing with a bound)."""
    if np.issubdtype(dtype, np.floating):
        return str(dtype.type(value))
    return repr(int(value)) if np.issubdtype(dtype, np.integer) else repr(float(value))


def _all_finite(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return all(_all_finite(v) for v in value)
    array = np.asarray(value)
    return not np.issubdtype(array.dtype, np.floating) or bool(np.all(np.isfinite(array)))


def _number(reward: Any) -> float:
    """A reward as a float for the record of rewards (0.0 for what is not a number)."""
    try:
        return float(reward)
    except (TypeError, ValueError):
        return 0.0


def _check_reward(reward: Any, where: str, parts: _Parts) -> None:
    if isinstance(reward, (bool, np.bool_)) or not isinstance(reward, (int, float, np.number)):
        parts.breach(
            "contract",
            f"{where} returned reward {_returned(reward)}; a reward must be a real number "
            "(int or float).",
        )
    elif not math.isfinite(float(reward)):
        parts.breach("contract", f"{where} returned reward {reward}; rewards must be finite.")


def _check_flag(flag: Any, name: str, where: str, parts: _Parts) -> None:
    if not isinstance(flag, (bool, np.bool_)):
        parts.breach("contract", f"{where} returned {name} {_returned(flag)}; it must be a bool.")


def _check_info(info: Any, where: str, parts: _Parts) -> None:
    if not isinstance(info, dict):
        parts.breach("contract", f"{where} returned info {_returned(info)}; it must be a dict.")
