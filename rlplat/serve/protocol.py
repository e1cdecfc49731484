"""The HTTP contract of ``rlplat serve``: requests checked against the policy, answers shaped.

Everything a request carries is JSON: numbers and lists become numpy arrays after their shape,
type and finiteness are checked against the export's manifest; nothing is unpickled or imported.
This module needs numpy and ``rlplat.runtime`` only, so the HTTP-facing replicas load no torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlplat.errors import did_you_mean
from rlplat.runtime import ACTION_MASK, Manifest, PolicySpec, Query

ONE, MANY, AGENTS = "one", "many", "agents"  # the three forms of an act request
REQUEST_KEYS = ("observation", "observations", "action_mask", "explore", "session", "reset")
MAX_SESSION_ID = 128
SINGLE_AGENT = ""  # the key of a single-agent policy's memory in a session


class HttpError(Exception):
    """A request the server answers with ``status`` and ``{"error": message}``."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


@dataclass
class ActRequest:
    """A checked ``POST /v1/act``: the observations to act on, in the request's order."""

    form: str  # ONE, MANY or AGENTS
    queries: list[Query]
    session: str | None
    reset: bool


@dataclass
class PolicyView:
    """What checking a request needs from the export's manifest: per agent (single-agent: the
    key ``SINGLE_AGENT``) the policy spec, its inputs and whether it carries memory."""

    multi_agent: bool
    specs: dict[str, PolicySpec]

    @classmethod
    def of(cls, manifest: Manifest | dict[str, Any]) -> PolicyView:
        """The view of a manifest (or of its JSON, as ``policy.json`` holds it)."""
        manifest = Manifest.of(manifest)
        if manifest.multi_agent:
            specs = {agent: manifest.policy_of(agent) for agent in manifest.agents or {}}
        else:
            (spec,) = manifest.policies.values()
            specs = {SINGLE_AGENT: spec}
        return cls(manifest.multi_agent, specs)

    @property
    def stateful(self) -> bool:
        return any(spec.carries_memory for spec in self.specs.values())

    def example(self) -> dict[str, Any]:
        """A request body that fits the policy (zeros, and every action legal in an action
        mask), for the printed curl line; a recurrent policy's names a session and starts it."""
        if not self.multi_agent:
            body = {"observation": _zeros(self.specs[SINGLE_AGENT])}
        else:
            body = {"observations": {agent: _zeros(spec) for agent, spec in self.specs.items()}}
        if self.stateful:
            body.update(session="episode-1", reset=True)
        return body


def _zeros(spec: PolicySpec) -> Any:
    if spec.kind != "onnx":  # a random policy reads the action mask only, where there is one
        masked = ACTION_MASK in spec.observation_keys
        return {ACTION_MASK: [1] * int(spec.action.n)} if masked else None
    observation: Any = None
    for entry in spec.observation_inputs:
        fill = np.ones if entry.name == ACTION_MASK else np.zeros
        zeros = fill(entry.part_shape(spec.frame_stack), dtype=int).tolist()
        if not entry.path:
            return zeros
        observation = observation if isinstance(observation, dict) else {}
        _put(observation, entry.path, zeros)
    return observation


def parse_body(body: bytes) -> dict[str, Any]:
    """The JSON object of a request body (400 when it is not one)."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HttpError(400, f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise HttpError(400, "the body is JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise HttpError(400, f"the body must be a JSON object, got {type(data).__name__}")
    return data


def parse_act(data: dict[str, Any], view: PolicyView) -> ActRequest:
    """Check an act request against the policy; 422 naming the field that does not fit."""
    for key in data:
        if key not in REQUEST_KEYS:
            raise HttpError(422, f"unknown field {key!r}.{did_you_mean(key, REQUEST_KEYS)} "
                                 f"Fields: {', '.join(REQUEST_KEYS)}.")
    explore = _flag(data, "explore")
    reset = _flag(data, "reset")
    session = _session(data)
    form, pairs = _observations(data, view)
    queries = _checked_together(view, data, explore) if form == MANY else None
    if queries is None:
        queries = [
            _query(view, agent, obs, mask, field, mask_field, explore)
            for agent, obs, mask, field, mask_field in pairs
        ]
    if any(view.specs[q.agent or SINGLE_AGENT].carries_memory for q in queries):
        if form == MANY:
            raise HttpError(422, "this policy carries memory between steps (recurrent state or "
                                 "stacked frames): send one 'observation' per request with a "
                                 "'session'")
        if session is None:
            raise HttpError(422, "'session' is required: this policy carries memory between "
                                 "steps (recurrent state or stacked frames); send the same "
                                 "'session' id with every step of an episode and 'reset': true "
                                 "with its first")
    return ActRequest(form, queries, session, reset)


def _checked_together(view: PolicyView, data: dict[str, Any], explore: bool) -> list[Query] | None:
    """A list of plain array observations checked as one array: the same checks, once per
    request instead of once per observation. None where that does not apply (masks, dict
    observations, value ranges, explore on a greedy graph) or where the list fails the checks:
    then each observation is checked on its own, and the error names the one that failed."""
    spec = view.specs[SINGLE_AGENT]
    entries = spec.observation_inputs
    if (
        spec.kind != "onnx"
        or data.get("action_mask") is not None
        or (explore and not spec.can_sample)
        or len(entries) != 1
        or entries[0].path
        or entries[0].observation_range is not None
        or entries[0].name == ACTION_MASK
    ):
        return None
    entry, observations = entries[0], data["observations"]
    shape = (len(observations), *entry.part_shape(spec.frame_stack))
    try:
        array = _array(observations, "observations", shape, entry.observation_dtype)
    except HttpError:
        return None
    return [Query(row, None, None, None, explore) for row in array]


def _session(data: dict[str, Any]) -> str | None:
    session = data.get("session")
    if session is not None and not (
        isinstance(session, str) and 0 < len(session) <= MAX_SESSION_ID
    ):
        raise HttpError(422, f"'session' must be a string of 1 to {MAX_SESSION_ID} characters")
    return session


def _observations(data: dict[str, Any], view: PolicyView) -> tuple[str, list[tuple]]:
    """The request's form and its (agent, observation, mask, field, mask field) in order."""
    if ("observation" in data) == ("observations" in data):
        raise HttpError(422, "give exactly one of 'observation' (one) and 'observations' (a list, "
                             "or a mapping by agent for a multi-agent policy)")
    masks = data.get("action_mask")
    if view.multi_agent:
        if "observation" in data:
            raise HttpError(422, "this policy is multi-agent (agents: "
                                 f"{', '.join(view.specs)}): send 'observations' as a mapping "
                                 "by agent, such as {\"observations\": {\"agent_0\": ...}}")
        return AGENTS, _by_agent(data["observations"], masks, view)
    if "observation" in data:
        return ONE, [(SINGLE_AGENT, data["observation"], masks, "observation", "action_mask")]
    return MANY, _listed(data["observations"], masks)


def _flag(data: dict[str, Any], key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise HttpError(422, f"{key!r} must be true or false, got {json.dumps(value)}")
    return value


def _by_agent(observations: Any, masks: Any, view: PolicyView) -> list[tuple]:
    if not isinstance(observations, dict) or not observations:
        raise HttpError(422, "'observations' must map agents to observations, such as "
                             f"{{\"{next(iter(view.specs))}\": ...}}")
    if masks is not None and not isinstance(masks, dict):
        raise HttpError(422, "'action_mask' must map agents to masks, like 'observations'")
    pairs = []
    for agent, obs in observations.items():
        if agent not in view.specs:
            raise HttpError(422, f"'observations' has no agent {agent!r} in this policy."
                                 f"{did_you_mean(agent, view.specs)} Its agents: "
                                 f"{', '.join(view.specs)}.")
        mask = None if masks is None else masks.get(agent)
        pairs.append((agent, obs, mask, f"observations.{agent}", f"action_mask.{agent}"))
    for agent in masks or {}:
        if agent not in observations:
            raise HttpError(422, f"'action_mask' has agent {agent!r}, which has no observation")
    return pairs


def _listed(observations: Any, masks: Any) -> list[tuple]:
    if not isinstance(observations, list) or not observations:
        raise HttpError(422, "'observations' must be a non-empty list of observations")
    if masks is not None and not (isinstance(masks, list) and len(masks) == len(observations)):
        raise HttpError(422, "'action_mask' must be a list with one mask per observation")
    return [
        (SINGLE_AGENT, obs, None if masks is None else masks[i], f"observations[{i}]",
         f"action_mask[{i}]")
        for i, obs in enumerate(observations)
    ]


def _query(
    view: PolicyView, agent: str, obs: Any, mask: Any, field: str, mask_field: str, explore: bool
) -> Query:
    spec = view.specs[agent]
    if explore and not spec.can_sample:
        raise HttpError(422, f"'explore' is not available for {field}: its policy's graph gives "
                             "the greedy action only (explore samples categorical action "
                             "distributions: PPO-like policies on discrete actions)")
    if mask is not None:
        mask = _checked_mask(spec, mask, mask_field)
    if spec.kind == "onnx":
        observation = _checked_observation(spec, obs, field, skip_mask=mask is not None)
    elif mask is None and ACTION_MASK in spec.observation_keys:
        # A random policy draws among the legal actions the observation lists.
        if not isinstance(obs, dict) or ACTION_MASK not in obs:
            raise HttpError(422, f"{field} must be an object with an {ACTION_MASK!r} (the random "
                                 f"policy draws among its legal actions), or give {mask_field}")
        observation = {ACTION_MASK: _checked_mask(spec, obs[ACTION_MASK],
                                                  f"{field}.{ACTION_MASK}")}
    else:
        observation = obs
    return Query(observation, agent or None, mask, None, explore)


def _checked_observation(spec: PolicySpec, obs: Any, field: str, skip_mask: bool) -> Any:
    """The observation with every part the graph reads as a checked numpy array (its mask
    left out when the request gives one apart)."""
    checked: Any = None
    for entry in spec.observation_inputs:
        if skip_mask and entry.name == ACTION_MASK:
            continue
        leaf, where = obs, field
        for key in entry.path:
            try:
                leaf = leaf[key]
            except (KeyError, IndexError, TypeError):
                raise HttpError(422, f"{where} has no entry {key!r} (the policy reads "
                                     f"{field}.{'.'.join(map(str, entry.path))})") from None
            where = f"{where}.{key}"
        array = _array(leaf, where, entry.part_shape(spec.frame_stack), entry.observation_dtype)
        if entry.name == ACTION_MASK:
            _legal_mask(array, where)
        if entry.observation_range is not None:
            low, high = entry.observation_range
            if np.any(array < low) or np.any(array > high):
                raise HttpError(422, f"{where}: outside {low}..{high}, the values of its space")
        if not entry.path:
            return array
        checked = checked if isinstance(checked, dict) else {}
        _put(checked, entry.path, array)
    return checked


def _checked_mask(spec: PolicySpec, mask: Any, field: str) -> np.ndarray:
    entry = spec.input(ACTION_MASK)
    if entry is None and spec.kind == "onnx":
        raise HttpError(422, f"{field}: this policy takes no action mask")
    shape = entry.part_shape(0) if entry else (int(spec.action.n),)
    return _legal_mask(_array(mask, field, shape, "int8"), field)


def _legal_mask(mask: np.ndarray, field: str) -> np.ndarray:
    if not np.all((mask == 0) | (mask == 1)):
        raise HttpError(422, f"{field}: a mask holds 1 (legal) and 0 (illegal) only")
    if not mask.any():
        raise HttpError(422, f"{field}: no legal action (the mask is all 0)")
    return mask


def _array(value: Any, field: str, shape: tuple[int, ...], dtype: str | None) -> np.ndarray:
    expected = f"expected shape {list(shape)} of {dtype or 'numbers'}"
    try:
        array = np.asarray(value)
    except ValueError:  # ragged lists
        raise HttpError(422, f"{field}: not a regular array of numbers; {expected}") from None
    integer = dtype is not None and np.issubdtype(np.dtype(dtype), np.integer)
    if array.dtype.kind not in "iuf" and not (array.dtype.kind == "b" and integer):
        got = "a list holding non-numbers" if isinstance(value, list) else type(value).__name__
        raise HttpError(422, f"{field}: not numbers (got {got}); {expected}")
    if array.shape != shape:
        several = field == "observation" and array.shape[1:] == shape
        hint = "; several observations go in 'observations', a list of them" if several else ""
        raise HttpError(422, f"{field}: got shape {list(array.shape)}, {expected}{hint}")
    with np.errstate(over="ignore"):
        as_float = array.astype(np.float32)  # what the graph computes with
    if not np.all(np.isfinite(as_float)):
        raise HttpError(422, f"{field}: holds NaN, infinite or too large values; {expected}")
    if not integer:
        return as_float
    if not np.all(array == np.round(array)):
        raise HttpError(422, f"{field}: holds fractions; {expected}")
    limits = np.iinfo(np.dtype(dtype))
    if np.any(array < limits.min) or np.any(array > limits.max):
        raise HttpError(422, f"{field}: outside the range of {dtype}; {expected}")
    return array.astype(dtype)  # the env's own type: stacked frames stay small


def _put(target: dict, path: list, value: Any) -> None:
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value


def to_json(action: Any) -> Any:
    """An action as JSON: an int, or a (nested) list of numbers."""
    if isinstance(action, np.ndarray):
        return action.tolist()
    if isinstance(action, np.generic):
        return action.item()
    return action


def response_body(
    request: ActRequest, actions: list[Any], session: str | None, step: int | None
) -> dict[str, Any]:
    """The response body, in the request's form; ``session`` and its ``step`` for policies
    that keep memories (None: stateless, the request's session is ignored)."""
    if request.form == ONE:
        body: dict[str, Any] = {"action": to_json(actions[0])}
    elif request.form == MANY:
        body = {"actions": [to_json(a) for a in actions]}
    else:
        body = {"actions": {q.agent: to_json(a) for q, a in zip(request.queries, actions,
                                                               strict=True)}}
    if session is not None:
        body["session"] = session
        body["step"] = step
    return body
