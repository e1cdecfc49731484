"""Act with a policy exported by ``rlplat export``: numpy and onnxruntime, nothing else.

This module imports no other part of rlplat, no torch and no Ray, so it can be copied into any
Python environment that has ``numpy`` and ``onnxruntime``::

    from rlplat.runtime import load
    policy = load("exported/cartpole")
    action = policy.act(observation)            # the greedy action, in the env's action space

A multi-agent export acts per agent: ``policy.agents``, ``policy.policy_for(agent).act(obs)``, or
``policy.act({agent: obs, ...})`` for the agents whose turn it is. Recurrent policies (QMIX's GRU
agents, RLlib's use_lstm modules) and frame stacking carry their state between calls; ``reset()``
at every episode start. Passing ``state=`` explicitly instead returns ``(action, next_state)``
and keeps nothing.
Servers that act for many episodes at once keep one :class:`Memory` per episode and agent and
call ``step`` with a batch of observations and their memories.

The export directory's ``policy.json`` says what each ONNX graph takes and returns; see
docs/export.md for the contract.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MANIFEST = "policy.json"
PARITY = "parity.json"  # the certificate next to the manifest
FORMAT = "rlplat-export/1"
ACTION = "action"
ACTION_DIST_INPUTS = "action_dist_inputs"
ACTION_MASK = "action_mask"
STATE_IN = "state_in"
STATE_OUT = "state_out"


class ExportError(ValueError):
    """The directory is not an rlplat export, or an input does not fit the policy."""


def _without_none(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if value is not None}


@dataclass
class TensorInfo:
    """A graph output as the ONNX model declares it (``shape`` starts with ``"batch"``)."""

    name: str
    shape: list[int | str]
    dtype: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "shape": self.shape, "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TensorInfo:
        return cls(data["name"], list(data["shape"]), data["dtype"])


@dataclass
class GraphInput(TensorInfo):
    """A graph input: where it comes from in the env's observation (``path``; None: given apart,
    such as ``state_in`` or a mask the env does not provide), the env's dtype for it and, for a
    Discrete part, its first and last value."""

    path: list[str | int] | None = None
    observation_dtype: str = "float32"
    observation_range: list[int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **super().to_json(),
            "path": self.path,
            "observation_dtype": self.observation_dtype,
            "observation_range": self.observation_range,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GraphInput:
        # Older manifests and hand-written ones may leave out what the checks of a request use.
        rng = data.get("observation_range")
        return cls(
            data["name"],
            list(data["shape"]),
            data.get("dtype", "float32"),
            data["path"],
            data.get("observation_dtype", "float32"),
            None if rng is None else list(rng),
        )

    def part_shape(self, frames: int) -> tuple[int, ...]:
        """The shape of this part of one observation as the env gives it (without the batch
        axis; with ``frames`` stacked frames, one frame)."""
        shape = [int(d) for d in self.shape[1:]]
        if frames:
            shape[-1] //= frames
        return tuple(shape)


@dataclass
class ActionSpec:
    """The env's action space: ``Discrete`` (``n``, ``start``), ``MultiDiscrete`` (``nvec``) or
    ``Box`` (``shape``, ``low``, ``high``); ``dtype`` is int64 or float32."""

    type: str
    dtype: str
    n: int | None = None
    start: int | None = None
    nvec: list[int] | None = None
    shape: list[int] | None = None
    low: Any = None
    high: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, **_without_none({
            "n": self.n, "start": self.start, "nvec": self.nvec, "shape": self.shape,
            "low": self.low, "high": self.high}), "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ActionSpec:
        return cls(**data)


@dataclass
class StatePart:
    """A slice of ``state_in``/``state_out``: QMIX's ``hidden``, ``previous_action`` or
    ``agent_id`` (then with the agents in the order of their one-hot ids); an RLlib module's
    state leaf by its path (``actor.h``)."""

    name: str
    start: int
    size: int
    agents: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        return _without_none({"name": self.name, "start": self.start, "size": self.size,
                              "agents": self.agents})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StatePart:
        return cls(**data)


@dataclass
class StateSpec:
    """The recurrent state a graph takes as ``state_in`` and gives back as ``state_out``."""

    size: int
    layout: list[StatePart]

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "layout": [part.to_json() for part in self.layout]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StateSpec:
        return cls(int(data["size"]), [StatePart.from_json(part) for part in data["layout"]])


@dataclass
class PolicySpec:
    """One policy of an export: an ONNX graph (``kind`` "onnx": its file, inputs, outputs,
    recurrent state, stacked frames, how ``explore`` samples) or a uniformly random policy
    (``kind`` "random": no network; the observation's keys tell where its action mask is)."""

    kind: str
    action: ActionSpec
    file: str | None = None
    opset: int | None = None
    inputs: list[GraphInput] = field(default_factory=list)
    outputs: list[TensorInfo] = field(default_factory=list)
    state: StateSpec | None = None
    frame_stack: int = 0  # frames the runtime stacks (0: none)
    exploration: str | None = None  # "categorical": explore samples from action_dist_inputs
    observation_keys: list[str] = field(default_factory=list)
    note: str | None = None

    @property
    def state_size(self) -> int:
        return self.state.size if self.state else 0

    @property
    def carries_memory(self) -> bool:
        """A policy that remembers between steps: recurrent state or stacked frames."""
        return bool(self.state) or bool(self.frame_stack)

    @property
    def can_sample(self) -> bool:
        """``explore`` can sample: a random policy, or a graph whose ``action_dist_inputs`` are a
        categorical distribution's logits (PPO and its kin on discrete actions)."""
        return self.kind == "random" or self.exploration == "categorical"

    @property
    def observation_inputs(self) -> list[GraphInput]:
        """The inputs read from the env's observation (not ``state_in``, not a mask given apart)."""
        return [entry for entry in self.inputs if entry.path is not None]

    def input(self, name: str) -> GraphInput | None:
        return next((entry for entry in self.inputs if entry.name == name), None)

    def to_json(self) -> dict[str, Any]:
        if self.kind == "random":
            return {"kind": self.kind, "action": self.action.to_json(),
                    "observation_keys": self.observation_keys, "note": self.note}
        return {
            "kind": self.kind,
            "file": self.file,
            "opset": self.opset,
            "inputs": [entry.to_json() for entry in self.inputs],
            "outputs": [entry.to_json() for entry in self.outputs],
            "action": self.action.to_json(),
            "state": self.state.to_json() if self.state else None,
            "frame_stack": {"num_frames": self.frame_stack} if self.frame_stack else None,
            "exploration": self.exploration,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PolicySpec:
        state = data.get("state")
        return cls(
            kind=data["kind"],
            action=ActionSpec.from_json(data["action"]),
            file=data.get("file"),
            opset=data.get("opset"),
            inputs=[GraphInput.from_json(entry) for entry in data.get("inputs", [])],
            outputs=[TensorInfo.from_json(entry) for entry in data.get("outputs", [])],
            state=StateSpec.from_json(state) if state else None,
            frame_stack=int((data.get("frame_stack") or {}).get("num_frames", 0)),
            exploration=data.get("exploration"),
            observation_keys=list(data.get("observation_keys") or []),
            note=data.get("note"),
        )


@dataclass
class ExperimentRef:
    """The experiment the policy was trained by; ``file`` is its copy in the export."""

    name: str
    algorithm: str
    seed: int | None
    file: str


@dataclass
class EnvRecord:
    """The env the policy acts in: its label, its recipe (rlplat's ``env`` section), the team
    view's settings (QMIX and its kin) and the spaces, as text."""

    label: str
    recipe: dict[str, Any]
    team: dict[str, Any] | None
    observation_space: Any
    action_space: Any


@dataclass
class CheckpointRef:
    """The checkpoint exported and why it was the one picked."""

    path: str
    picked: str


@dataclass
class Manifest:
    """``policy.json``: what an export holds, which agent each policy plays, and where it came
    from. ``to_json`` writes the keys in the order rlplat has always written them."""

    policies: dict[str, PolicySpec]
    multi_agent: bool = False
    agents: dict[str, str] | None = None  # agent -> policy id (multi-agent)
    team: bool = False  # QMIX and its kin: trained in the team view, acting per agent
    format: str = FORMAT
    created: str | None = None
    experiment: ExperimentRef | None = None
    env: EnvRecord | None = None
    checkpoint: CheckpointRef | None = None
    training: dict[str, Any] | None = None  # the checkpoint's training metrics
    versions: dict[str, str] = field(default_factory=dict)
    verified: bool = False  # the parity certificate passed

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "created": self.created,
            "experiment": asdict(self.experiment) if self.experiment else None,
            "env": asdict(self.env) if self.env else None,
            "multi_agent": self.multi_agent,
            "team": self.team,
            "agents": self.agents,
            "policies": {pid: spec.to_json() for pid, spec in self.policies.items()},
            "checkpoint": asdict(self.checkpoint) if self.checkpoint else None,
            "training": self.training,
            "versions": self.versions,
            "verified": self.verified,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        """The manifest of ``policy.json``'s content (every rlplat-export/1 file reads)."""
        experiment, env, checkpoint = (data.get(key) for key in ("experiment", "env", "checkpoint"))
        return cls(
            policies={pid: PolicySpec.from_json(spec) for pid, spec in data["policies"].items()},
            multi_agent=bool(data.get("multi_agent", False)),
            agents=data.get("agents"),
            team=bool(data.get("team", False)),
            format=data.get("format", FORMAT),
            created=data.get("created"),
            experiment=ExperimentRef(**experiment) if experiment else None,
            env=EnvRecord(**env) if env else None,
            checkpoint=CheckpointRef(**checkpoint) if checkpoint else None,
            training=data.get("training"),
            versions=dict(data.get("versions") or {}),
            verified=bool(data.get("verified", False)),
        )

    @classmethod
    def of(cls, manifest: Manifest | dict[str, Any]) -> Manifest:
        """A manifest, given as one or as its JSON."""
        return manifest if isinstance(manifest, Manifest) else cls.from_json(manifest)

    def policy_of(self, agent: str) -> PolicySpec:
        """The policy an agent plays (multi-agent)."""
        return self.policies[(self.agents or {})[agent]]

    @property
    def random_agents(self) -> set[str]:
        """The agents a random policy plays (left out of parity comparisons)."""
        return {agent for agent, pid in (self.agents or {}).items()
                if self.policies[pid].kind == "random"}


def read_manifest(path: str | Path) -> Manifest:
    """The ``policy.json`` of an export directory."""
    manifest_file = Path(path) / MANIFEST
    try:
        data = json.loads(manifest_file.read_text())
    except FileNotFoundError:
        raise ExportError(f"{path} is not an rlplat export: it has no {MANIFEST}") from None
    except (OSError, ValueError) as exc:
        raise ExportError(f"cannot read {manifest_file}: {exc}") from None
    found = data.get("format") if isinstance(data, dict) else None
    if found != FORMAT:
        raise ExportError(f"{manifest_file} has format {found!r}; this runtime reads {FORMAT!r}")
    try:
        return Manifest.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ExportError(f"cannot read {manifest_file}: {type(exc).__name__}: {exc}") from None


class Network:
    """One ONNX graph and what its inputs are made of (shared by the agents of a policy).

    ``runner`` runs the graph: anything with onnxruntime's ``run(output_names, feed)``; by
    default an onnxruntime session on the graph's file.
    """

    def __init__(
        self,
        directory: Path | None,
        spec: PolicySpec,
        providers: list[str] | None,
        runner: Any = None,
    ):
        self.spec = spec
        self.runner = runner if runner is not None else _onnx_runner(directory, spec, providers)
        self.inputs = spec.inputs
        self.output_names = [output.name for output in spec.outputs]
        self.state_size = spec.state_size
        self.integer_action = spec.action.dtype.startswith("int")
        self.has_mask = spec.input(ACTION_MASK) is not None

    def run(
        self,
        observations: list[Any],
        action_masks: list[Any] | None,
        states: np.ndarray | None,
    ) -> dict[str, np.ndarray]:
        """Outputs by name for a batch of observations (each as the env returns it)."""
        feed: dict[str, np.ndarray] = {}
        for entry in self.inputs:
            name = entry.name
            if name == STATE_IN:
                feed[name] = np.asarray(states, dtype=np.float32)
            elif name == ACTION_MASK and action_masks is not None:
                feed[name] = np.asarray(action_masks, dtype=np.float32)
            elif entry.path is None:  # an action mask the env does not provide: all legal
                shape = [len(observations), *entry.shape[1:]]
                feed[name] = np.ones(shape, dtype=np.float32)
            else:
                feed[name] = np.stack(
                    [_leaf(obs, entry.path, name) for obs in observations]
                ).astype(np.float32, copy=False)
        return dict(zip(self.output_names, self.runner.run(self.output_names, feed), strict=True))


def _onnx_runner(directory: Path | None, spec: PolicySpec, providers: list[str] | None) -> Any:
    if directory is None:
        raise ExportError(f"no directory to read {spec.file} from, and no runner given")
    try:
        # Imported here: this module also serves rlplat itself, where onnxruntime is the
        # optional export extra.
        import onnxruntime as ort  # noqa: PLC0415
    except ModuleNotFoundError:
        raise ExportError(
            "acting with an exported policy needs onnxruntime: pip install onnxruntime"
        ) from None
    file = directory / spec.file
    if not file.is_file():
        raise ExportError(f"the export {directory} is incomplete: {spec.file} is missing")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(
        str(file), sess_options=options, providers=providers or ["CPUExecutionProvider"]
    )


def _leaf(observation: Any, path: list[str | int], name: str) -> Any:
    for key in path:
        try:
            observation = observation[key]
        except (KeyError, IndexError, TypeError):
            raise ExportError(
                f"the observation has no entry {key!r} for the input {name!r}"
            ) from None
    return observation


class Memory:
    """What a stateful policy carries from one step of an episode to the next: the recurrent
    state (QMIX's GRU, an LSTM's h and c) and the last frames (frame stacking). Stateless
    policies carry nothing."""

    def __init__(self, state: np.ndarray | None, num_frames: int):
        self.state = state
        self.num_frames = num_frames
        self.frames: deque[np.ndarray] = deque(maxlen=max(1, num_frames))
        self.steps = 0

    def stack(self, obs: Any) -> Any:
        """The observation with the frames before it, as the graph takes it."""
        if not self.num_frames:
            return obs
        frame = np.asarray(obs)  # in the env's dtype: a session keeps uint8 frames as uint8
        if not self.frames:  # RLlib fills the frames before the first with zeros
            for _ in range(self.num_frames - 1):
                self.frames.append(np.zeros_like(frame))
        self.frames.append(frame)
        return np.concatenate(list(self.frames), axis=2)


class ExportedPolicy:
    """One agent's (or a single-agent env's) exported policy.

    ``act(obs)`` returns the greedy action in the env's action space (int for Discrete, an int64
    array for MultiDiscrete, a float32 array inside the Box bounds); ``last_outputs`` then holds
    every output of the graph for it (``action_dist_inputs``: logits or Q-values). State
    (recurrent memory, stacked frames) is kept between calls until ``reset()``.
    """

    def __init__(self, network: Network, spec: PolicySpec, initial_state: np.ndarray | None):
        self.network = network
        self.spec = spec
        self.kind = spec.kind
        self._initial = initial_state
        self.num_frames = spec.frame_stack
        self._rng = np.random.default_rng()
        self.last_outputs: dict[str, np.ndarray] = {}
        self.reset()

    @property
    def stateless(self) -> bool:
        """A graph with no recurrent state and no stacked frames (batches across agents)."""
        return self.kind == "onnx" and not self.spec.carries_memory

    @property
    def needs_memory(self) -> bool:
        """Each observation needs its episode's :class:`Memory`."""
        return self.kind == "onnx" and self.spec.carries_memory

    def seed(self, seed: int | None) -> None:
        """Seed the random choices (``random`` policies, explored actions)."""
        self._rng = np.random.default_rng(seed)

    def initial_state(self) -> np.ndarray | None:
        """The recurrent state at an episode's start (None for a stateless policy)."""
        return None if self._initial is None else self._initial.copy()

    def new_memory(self) -> Memory:
        """The memory of an episode that starts now."""
        return Memory(self.initial_state(), self.num_frames)

    def reset(self) -> None:
        """Forget the episode: recurrent state and stacked frames start again."""
        self.memory = self.new_memory()

    def act(
        self, obs: Any, action_mask: Any = None, state: Any = None, explore: bool = False
    ) -> Any:
        """The greedy action for one observation (``explore``: a sampled one).

        With ``state`` given (recurrent policies), returns ``(action, next_state)`` and leaves
        the policy's own recurrent state alone; otherwise the policy carries it itself. Frames
        are stacked by the policy in either case.
        """
        explicit = state is not None
        if explicit and not self.network.state_size:
            raise ExportError("this policy has no recurrent state; call act(obs) without state=")
        memory = self.memory
        if explicit:
            memory = Memory(np.asarray(state, np.float32), self.num_frames)
            memory.frames = self.memory.frames  # frames are the policy's own in either case
        action = self.step(
            [obs], None if action_mask is None else [action_mask], [memory], [explore]
        )[0]
        if explicit:
            return action, memory.state
        return action

    def step(
        self,
        observations: list[Any],
        action_masks: list[Any] | None = None,
        memories: list[Memory] | None = None,
        explore: list[bool] | None = None,
    ) -> list[Any]:
        """Actions for a batch of observations, each with its episode's memory (advanced in
        place; stateless policies need none). ``last_outputs`` holds the graph's outputs for the
        last observation of the batch."""
        return self.step_with_outputs(observations, action_masks, memories, explore)[0]

    def step_with_outputs(
        self,
        observations: list[Any],
        action_masks: list[Any] | None,
        memories: list[Memory] | None,
        explore: list[bool] | None,
    ) -> tuple[list[Any], dict[str, np.ndarray]]:
        """``step``'s actions, with the graph's outputs for the whole batch."""
        if action_masks is not None and not self.network.has_mask:
            raise ExportError("this policy takes no action mask (its graph has no such input)")
        if memories is None:
            if self.needs_memory:
                raise ExportError("a stateful policy needs a memory per observation")
            memories = [Memory(None, 0) for _ in observations]
        if any(explore or []) and not self.spec.can_sample:
            raise ExportError(
                "this policy's graph gives its greedy action only: explore samples from "
                "categorical action distributions (PPO-like policies on discrete actions)"
            )
        stacked = [memory.stack(obs) for obs, memory in zip(observations, memories, strict=True)]
        states = (
            np.stack([memory.state for memory in memories]) if self.network.state_size else None
        )
        outputs = self.forward(stacked, action_masks, states)
        chosen = outputs[ACTION]
        for index, memory in enumerate(memories):
            memory.steps += 1
            if states is not None:
                memory.state = outputs[STATE_OUT][index]
            if explore and explore[index] and self.kind == "onnx":
                chosen[index] = self._sample(outputs[ACTION_DIST_INPUTS][index])
        self.last_outputs = {name: value[-1] for name, value in outputs.items()}
        return [self._single(action) for action in chosen], outputs

    def forward(
        self,
        observations: list[Any],
        action_masks: list[Any] | None = None,
        states: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """Every output of the graph for a batch (``action``, ``action_dist_inputs``, ...).

        Observations go to the graph as given (a policy that stacks frames expects them stacked
        already). Without ``states`` a stateful policy uses (and advances) its own state; batches
        of more than one observation then need explicit states.
        """
        if self.kind == "random":
            return {ACTION: np.stack([self._random_action(o, m) for o, m in _pairs(
                observations, action_masks)])}
        own_state = states is None and self.network.state_size > 0
        if own_state:
            if len(observations) != 1:
                raise ExportError("a batch of observations needs explicit states=")
            states = self.memory.state[None]
        outputs = self.network.run(observations, action_masks, states)
        if own_state:
            self.memory.state = outputs[STATE_OUT][0]
        return outputs

    def _sample(self, logits: np.ndarray) -> np.int64:
        shifted = np.exp(logits.astype(np.float64) - np.max(logits))
        return np.int64(self._rng.choice(len(logits), p=shifted / shifted.sum()))

    def _single(self, action: np.ndarray) -> Any:
        if self.network.integer_action and action.ndim == 0:
            return int(action)
        return action

    def _random_action(self, obs: Any, action_mask: Any) -> np.ndarray:
        space = self.spec.action
        if action_mask is None and ACTION_MASK in self.spec.observation_keys:
            action_mask = obs[ACTION_MASK]
        if action_mask is not None:
            legal = np.flatnonzero(np.asarray(action_mask))
            return np.int64(self._rng.choice(legal))
        if space.type == "Discrete":
            return np.int64(space.start + self._rng.integers(space.n))
        raise ExportError(f"a random policy for a {space.type} action space is not supported")


def _pairs(observations: list[Any], masks: list[Any] | None):
    return zip(observations, masks if masks is not None else [None] * len(observations),
               strict=True)


class _RandomNetwork:
    """Stands in for a graph: ``random`` policies have none."""

    state_size = 0
    integer_action = True
    has_mask = True


class MultiAgentPolicy:
    """The policies of a multi-agent export and which agent each one plays."""

    def __init__(self, agents: dict[str, ExportedPolicy], mapping: dict[str, str]):
        self._agents = agents
        self.mapping = mapping

    @property
    def agents(self) -> list[str]:
        return list(self._agents)

    def policy_for(self, agent: str) -> ExportedPolicy:
        try:
            return self._agents[agent]
        except KeyError:
            raise ExportError(
                f"no agent {agent!r} in this export; its agents: {', '.join(self._agents)}"
            ) from None

    def reset(self) -> None:
        for policy in self._agents.values():
            policy.reset()

    def seed(self, seed: int | None) -> None:
        for index, policy in enumerate(self._agents.values()):
            policy.seed(None if seed is None else seed + index)

    def act(self, observations: dict[str, Any], explore: bool = False) -> dict[str, Any]:
        """Actions of the agents present in ``observations`` (those whose turn it is).

        Agents that share a stateless graph go through it in one batch."""
        queries = [
            Query(obs, agent, memory=self.policy_for(agent).memory, explore=explore)
            for agent, obs in observations.items()
        ]
        return dict(zip(observations, act_batch(self, queries), strict=True))


@dataclass
class Query:
    """One observation to act on: whose it is, its action mask if given apart from it, the
    memory of its episode (stateful policies) and whether to sample."""

    observation: Any
    agent: str | None = None
    action_mask: Any = None
    memory: Memory | None = None
    explore: bool = False


def act_batch(policy: ExportedPolicy | MultiAgentPolicy, queries: list[Query]) -> list[Any]:
    """The actions for queries from any number of episodes and agents, in order. Queries whose
    agents share a graph go through it in one batch; memories advance in place (a query of a
    stateful policy without one gets a new episode's), and each agent's policy keeps its own row
    of the graph's outputs in ``last_outputs``."""
    def acting(query: Query) -> ExportedPolicy:
        return policy.policy_for(query.agent) if isinstance(policy, MultiAgentPolicy) else policy

    groups: dict[tuple[int, bool], list[int]] = {}
    for index, query in enumerate(queries):
        own = acting(query)
        shared = own.network if own.kind == "onnx" else own
        groups.setdefault((id(shared), query.action_mask is not None), []).append(index)
    actions: list[Any] = [None] * len(queries)
    for (_, masked), indices in groups.items():
        group = [queries[index] for index in indices]
        first = acting(group[0])
        if first.needs_memory:
            for query in group:
                if query.memory is None:
                    query.memory = acting(query).new_memory()
        chosen, outputs = first.step_with_outputs(
            [query.observation for query in group],
            [query.action_mask for query in group] if masked else None,
            [query.memory for query in group] if first.needs_memory else None,
            [query.explore for query in group],
        )
        for row, (index, action) in enumerate(zip(indices, chosen, strict=True)):
            actions[index] = action
            acting(queries[index]).last_outputs = {n: v[row] for n, v in outputs.items()}
    return actions


def load(
    path: str | Path, providers: list[str] | None = None, runners: dict[str, Any] | None = None
) -> ExportedPolicy | MultiAgentPolicy:
    """The policy exported into ``path`` (a directory with ``policy.json``).

    ``providers``: onnxruntime execution providers, CPU by default. ``runners``: what runs each
    policy's graph instead of onnxruntime (by policy id; see :class:`Network`).
    """
    directory = Path(path)
    return from_manifest(read_manifest(directory), directory, providers, runners)


def from_manifest(
    manifest: Manifest | dict[str, Any],
    directory: Path | None = None,
    providers: list[str] | None = None,
    runners: dict[str, Any] | None = None,
) -> ExportedPolicy | MultiAgentPolicy:
    """The policy a manifest (or its JSON) describes; its graphs are read from ``directory``
    unless ``runners`` gives every graph's runner."""
    manifest = Manifest.of(manifest)
    networks: dict[str, Any] = {
        policy_id: Network(directory, spec, providers, (runners or {}).get(policy_id))
        if spec.kind == "onnx"
        else _RandomNetwork()
        for policy_id, spec in manifest.policies.items()
    }
    if not manifest.multi_agent:
        (policy_id, spec), = manifest.policies.items()
        return ExportedPolicy(networks[policy_id], spec, _initial_state(spec, None))
    agents = {
        agent: ExportedPolicy(
            networks[policy_id],
            manifest.policies[policy_id],
            _initial_state(manifest.policies[policy_id], agent),
        )
        for agent, policy_id in (manifest.agents or {}).items()
    }
    return MultiAgentPolicy(agents, dict(manifest.agents or {}))


def _initial_state(spec: PolicySpec, agent: str | None) -> np.ndarray | None:
    """Zeros, with the agent's one-hot id where the state layout has one (QMIX agents)."""
    if not spec.state:
        return None
    initial = np.zeros(spec.state.size, np.float32)
    for part in spec.state.layout:
        if part.name == "agent_id" and agent is not None:
            initial[part.start + part.agents.index(agent)] = 1.0
    return initial
