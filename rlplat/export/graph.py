"""A policy's whole acting path as one torch module, ready for ``torch.onnx.export``.

An exported graph takes the observation exactly as the environment (after the experiment's
wrappers) returns it and gives the action the env runners would have sent to the env:

    env observation ─> pure env-to-module connector pieces ─> RLModule.forward_inference
                    ─> greedy action of the module's action distribution ─> unsquash / clip

RLlib's pipelines are read piece by piece: structural pieces (batching, tensors, agent mapping)
need nothing, pure functions (``MeanStdFilter`` with its frozen statistics) become graph ops,
RLlib's frame stacking is left to the runtime (it needs the previous observations), and any other
piece is refused: a graph that silently skipped a piece would act differently from the
checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.dqn.default_dqn_rl_module import QF_PREDS
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.torch.heads import TorchFreeLogStdMLPHead
from ray.rllib.models.torch.torch_distributions import TorchCategorical
from ray.rllib.utils.filter import SMALL_NUMBER, RunningStat
from torch import nn
from torch.nn import functional as F

from rlplat.environments.kinds import ACTION_MASK, masked_observation_key
from rlplat.errors import UserError
from rlplat.runtime import ActionSpec, StatePart, StateSpec

# Pieces that only move data around (batch, time rank, tensors, agents <-> modules).
STRUCTURAL_ENV_TO_MODULE = {
    "AddObservationsFromEpisodesToBatch",
    "AddTimeDimToBatchAndZeroPad",
    "AddStatesFromEpisodesToBatch",
    "AgentToModuleMapping",
    "BatchIndividualItems",
    "NumpyToTensor",
}
STRUCTURAL_MODULE_TO_ENV = {
    "GetActions",  # the greedy action: done in the graph from the module's distribution
    "TensorToNumpy",
    "UnBatchToIndividualItems",
    "ModuleToAgentUnmapping",
    "RemoveSingleTsTimeRankFromBatch",
    "ListifyDataForVectorEnv",
}
FRAME_STACK = "FrameStacking"  # RLlib names its env-to-module variant FrameStackingEnvToModule


class Unsupported(UserError):
    """The policy has a part the ONNX export cannot reproduce exactly."""


@dataclass
class Input:
    """One graph input: its name, where it comes from in the env's observation, its shape."""

    name: str
    path: list[str | int] | None  # None: not part of the observation (an argument of act)
    shape: tuple[int, ...]
    observation_dtype: str = "float32"  # the env's dtype for this part of the observation
    observation_range: tuple[int, int] | None = None  # Discrete parts: their first and last value


@dataclass
class GraphParts:
    """What ``build_graph`` found; ``graph`` maps the inputs, in order, to the outputs."""

    graph: nn.Module
    inputs: list[Input]
    outputs: list[str]
    action: ActionSpec
    frame_stack: int = 0
    state: StateSpec | None = None
    exploration: str | None = None  # "categorical": explore samples from action_dist_inputs


def observation_inputs(space: gym.Space) -> list[Input]:
    """The graph inputs of an observation space: ``obs``, or one per leaf of a Dict/Tuple
    (``obs.<key>``); an ``action_mask`` entry next to one observation becomes ``action_mask``."""
    key = masked_observation_key(space)
    if key is not None:
        return [
            Input(name, [part], _shape(space[part]), _dtype(space[part]))
            for name, part in (("obs", key), (ACTION_MASK, ACTION_MASK))
        ]
    leaves: list[Input] = []

    def walk(sub: gym.Space, path: list[str | int]) -> None:
        if isinstance(sub, gym.spaces.Dict):
            for key, child in sub.spaces.items():
                walk(child, [*path, key])
        elif isinstance(sub, gym.spaces.Tuple):
            for index, child in enumerate(sub.spaces):
                walk(child, [*path, index])
        else:
            name = ".".join(["obs", *map(str, path)])
            leaves.append(Input(name, path, _shape(sub), _dtype(sub), _range(sub)))

    walk(space, [])
    return leaves


def _shape(space: gym.Space) -> tuple[int, ...]:
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary, gym.spaces.MultiDiscrete)):
        return tuple(int(d) for d in space.shape)
    if isinstance(space, gym.spaces.Discrete):
        return ()
    raise Unsupported(f"observations of type {type(space).__name__} cannot be graph inputs")


def _dtype(space: gym.Space) -> str:
    return np.dtype(space.dtype).name


def _range(space: gym.Space) -> tuple[int, int] | None:
    if isinstance(space, gym.spaces.Discrete):
        return int(space.start), int(space.start + space.n - 1)
    return None


def rebuild_observation(space: gym.Space, leaves: list[torch.Tensor], inputs: list[Input]) -> Any:
    """The observation structure RLlib gives the module, from the graph's leaf inputs."""
    if len(inputs) == 1 and not inputs[0].path:
        return leaves[0]
    nested: dict[Any, Any] = {}
    for tensor, entry in zip(leaves, inputs, strict=True):
        target = nested
        for key in entry.path[:-1]:
            target = target.setdefault(key, {})
        target[entry.path[-1]] = tensor
    return _as_space_structure(space, nested)


def _as_space_structure(space: gym.Space, nested: Any) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {key: _as_space_structure(space[key], nested[key]) for key in space.spaces}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_as_space_structure(s, nested[i]) for i, s in enumerate(space.spaces))
    return nested


def flatten_tensor(space: gym.Space, value: Any) -> torch.Tensor:
    """``gymnasium.spaces.flatten`` on a batch, in torch (one-hot for Discrete)."""
    if isinstance(space, gym.spaces.Box | gym.spaces.MultiBinary):
        return value.reshape(value.shape[0], -1).float()
    if isinstance(space, gym.spaces.Discrete):
        return F.one_hot(value.long() - int(space.start), int(space.n)).float()
    if isinstance(space, gym.spaces.MultiDiscrete):
        columns = value.reshape(value.shape[0], -1).long()
        return torch.cat(
            [F.one_hot(columns[:, i], int(n)).float() for i, n in enumerate(space.nvec.flat)],
            dim=-1,
        )
    if isinstance(space, gym.spaces.Dict):
        return torch.cat([flatten_tensor(space[k], value[k]) for k in space.spaces], dim=-1)
    if isinstance(space, gym.spaces.Tuple):
        return torch.cat([flatten_tensor(s, value[i]) for i, s in enumerate(space.spaces)], -1)
    raise Unsupported(f"cannot flatten observations of type {type(space).__name__}")


class Normalize(nn.Module):
    """RLlib's ``MeanStdFilter`` with frozen statistics: (x - mean) / (std + 1e-8), clipped."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, demean: bool, destd: bool, clip: Any):
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean * demean, dtype=torch.float32))
        self.register_buffer(
            "scale",
            torch.as_tensor(
                std + SMALL_NUMBER if destd else np.ones_like(std), dtype=torch.float32
            ),
        )
        self.clip = float(clip) if clip else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - self.mean) / self.scale
        return x.clamp(-self.clip, self.clip) if self.clip is not None else x


def observation_steps(env_to_module: Any, agent: Any) -> tuple[list[nn.Module], int]:
    """The graph ops for the pipeline's pure pieces, and the number of frames the runtime
    stacks (0: none). ``agent``: the key of per-agent filter statistics (None: single-agent)."""
    steps: list[nn.Module] = []
    frames = 0
    for position, piece in enumerate(env_to_module.connectors):
        name = type(piece).__name__
        if name in STRUCTURAL_ENV_TO_MODULE:
            continue
        if name == FRAME_STACK:
            if steps:
                raise Unsupported(
                    "frame stacking after another observation connector cannot be exported: "
                    "the runtime stacks the env's own observations"
                )
            frames = int(piece.num_frames)
        elif name == "MeanStdFilter":
            if frames:
                raise Unsupported(
                    "a mean_std_filter after frame_stack cannot be exported: RLlib filters the "
                    "env's observations before they are stacked"
                )
            steps.append(_frozen_filter(piece, agent))
        else:
            raise Unsupported(
                f"the env-to-module connector {name} (position {position} of the pipeline) has "
                "no ONNX equivalent in rlplat export; supported: mean_std_filter, frame_stack "
                "and RLlib's default pieces"
            )
    return steps, frames


def _frozen_filter(piece: Any, agent: Any) -> Normalize:
    """The ``MeanStdFilter`` piece's normalisation for ``agent``, from its public state."""
    filters = piece.get_state()
    if agent not in filters:
        raise Unsupported(
            f"the mean_std_filter has no statistics for agent {agent!r} (it keeps them per "
            "agent, so a policy shared by several agents has no single normalisation)"
        )
    state = filters[agent]
    space = piece.input_observation_space
    if agent is not None:
        space = space[agent]
    if not np.issubdtype(getattr(space, "dtype", None) or np.float32, np.floating):
        raise Unsupported(
            f"a mean_std_filter on {space.dtype} observations cannot be exported: RLlib casts "
            "the normalised values back to that type"
        )
    if not isinstance(state["shape"], np.ndarray):
        raise Unsupported("a mean_std_filter over Dict or Tuple observations cannot be exported")
    (stats,) = (RunningStat.from_state(each) for each in state["running_stats"])
    return Normalize(
        np.asarray(stats.mean, np.float64),
        np.asarray(stats.std, np.float64),
        bool(state["de_mean_to_zero"]),
        bool(state["de_std_to_one"]),
        state["clip_by_value"],
    )


def action_step(module_to_env: Any, action_space: gym.Space) -> tuple[nn.Module, ActionSpec]:
    """The graph op for ``NormalizeAndClipActions`` (and a description of the action)."""
    normalize = clip = False
    for position, piece in enumerate(module_to_env.connectors):
        name = type(piece).__name__
        if name == "NormalizeAndClipActions":
            normalize, clip = bool(piece.normalize_actions), bool(piece.clip_actions)
        elif name not in STRUCTURAL_MODULE_TO_ENV:
            raise Unsupported(
                f"the module-to-env connector {name} (position {position} of the pipeline) has "
                "no ONNX equivalent in rlplat export"
            )
    return ToEnvAction(action_space, normalize, clip), describe_action(action_space)


def describe_action(space: gym.Space) -> ActionSpec:
    if isinstance(space, gym.spaces.Discrete):
        return ActionSpec("Discrete", "int64", n=int(space.n), start=int(space.start))
    if isinstance(space, gym.spaces.MultiDiscrete):
        return ActionSpec("MultiDiscrete", "int64", nvec=space.nvec.tolist())
    if isinstance(space, gym.spaces.Box):
        return ActionSpec(
            "Box",
            "float32" if np.issubdtype(space.dtype, np.floating) else "int64",
            shape=list(space.shape),
            low=space.low.tolist(),
            high=space.high.tolist(),
        )
    raise Unsupported(f"actions of type {type(space).__name__} cannot be exported")


class ToEnvAction(nn.Module):
    """What ``NormalizeAndClipActions`` does to a Box action; integer actions become int64."""

    def __init__(self, space: gym.Space, normalize: bool, clip: bool):
        super().__init__()
        self.kind = "discrete"
        if isinstance(space, gym.spaces.Box):
            self.register_buffer("low", torch.as_tensor(space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(space.high, dtype=torch.float32))
            floating = np.issubdtype(space.dtype, np.floating)
            bounded = bool(np.all(space.bounded_below) and np.all(space.bounded_above))
            if normalize:
                if floating and bounded:
                    self.kind = "unsquash"
                elif not floating:
                    self.kind = "shift"
                else:
                    self.kind = "none"
            else:
                self.kind = "clip" if clip else "none"
            self.floating = floating

    def forward(self, action: torch.Tensor) -> torch.Tensor:
        if self.kind == "discrete":
            return action.long()
        action = action.float()
        if self.kind == "unsquash":
            action = self.low + (action + 1.0) * (self.high - self.low) / 2.0
            action = torch.max(torch.min(action, self.high), self.low)
        elif self.kind == "shift":
            action = self.low + action
        elif self.kind == "clip":
            action = torch.max(torch.min(action, self.high), self.low)
        return action if self.floating else action.long()


class PolicyGraph(nn.Module):
    """env observation leaves -> greedy env action (+ the module's action distribution inputs)."""

    def __init__(
        self,
        module: nn.Module,
        observation_space: gym.Space,
        inputs: list[Input],
        steps: list[nn.Module],
        to_env: nn.Module,
        q_values: bool = False,
    ):
        super().__init__()
        self.module = module
        self.observation_space = observation_space
        self.inputs = inputs
        self.steps = nn.ModuleList(steps)
        self.to_env = to_env
        self.q_values = q_values

    def observation(self, leaves: Sequence[torch.Tensor]) -> torch.Tensor:
        """The observation as the module takes it: rebuilt from its leaves, then filtered."""
        obs = rebuild_observation(self.observation_space, list(leaves), self.inputs)
        for step in self.steps:
            obs = step(obs)
        return obs

    def forward(self, *leaves: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch = {Columns.OBS: self.observation(leaves)}
        if self.q_values:
            # DQN's forward_inference returns only the action, the greedy one of this
            # distribution over the Q-values; computed here once, the graph gives both.
            dist_inputs = self.module.compute_q_values(batch)[QF_PREDS]
            dist_class = self.module.get_exploration_action_dist_cls()
        else:
            dist_inputs = self.module.forward_inference(batch)[Columns.ACTION_DIST_INPUTS]
            dist_class = self.module.get_inference_action_dist_cls()
        action = dist_class.from_logits(dist_inputs).to_deterministic().sample()
        return self.to_env(action), dist_inputs


class RecurrentPolicyGraph(PolicyGraph):
    """A recurrent module's step (``use_lstm``): env observation leaves and ``state_in`` ->
    greedy env action, action distribution inputs and ``state_out``. The module's state tree
    (``h`` and ``c`` of its LSTM, per encoder where the critic has its own) travels flat, its
    leaves in ``layout``'s order; the module sees a time axis of one step."""

    def __init__(self, *args: Any, layout: list[StatePart], shapes: dict[str, tuple[int, ...]]):
        super().__init__(*args)
        self.layout = layout
        self.shapes = shapes

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        *leaves, state = inputs
        tree: dict[str, Any] = {}
        for part in self.layout:
            *parents, leaf = part.name.split(".")
            node = tree
            for key in parents:
                node = node.setdefault(key, {})
            flat = state[:, part.start : part.start + part.size]
            node[leaf] = flat.reshape(-1, *self.shapes[part.name])
        batch = {Columns.OBS: self.observation(leaves).unsqueeze(1), Columns.STATE_IN: tree}
        out = self.module.forward_inference(batch)
        dist_inputs = out[Columns.ACTION_DIST_INPUTS][:, 0]
        dist_class = self.module.get_inference_action_dist_cls()
        action = dist_class.from_logits(dist_inputs).to_deterministic().sample()
        state_out = out[Columns.STATE_OUT]
        flat_out = []
        for part in self.layout:
            node = state_out
            for key in part.name.split("."):
                node = node[key]
            flat_out.append(node.flatten(1))
        return self.to_env(action), dist_inputs, torch.cat(flat_out, dim=-1)


def state_layout(module: Any) -> tuple[StateSpec, dict[str, tuple[int, ...]]]:
    """The module's recurrent state as one flat vector: each leaf of its initial state (``h``,
    ``c``; ``actor.h`` ... where the critic has its own encoder) a slice, named by its path;
    and each leaf's shape without the batch axis. The runtime starts every episode from zeros,
    so a module whose initial state is not zeros is refused."""
    shapes: dict[str, tuple[int, ...]] = {}

    def walk(node: Any, path: list[str]) -> None:
        if isinstance(node, dict):
            for key in sorted(node):
                walk(node[key], [*path, key])
            return
        value = torch.as_tensor(node)
        if bool(torch.any(value != 0)):
            raise Unsupported(
                f"the recurrent state {'.'.join(path)} of {type(module).__name__} does not "
                "start at zeros; rlplat's runtime starts every episode's state at zeros"
            )
        shapes[".".join(path)] = tuple(value.shape)

    walk(module.get_initial_state(), [])
    layout, position = [], 0
    for name, shape in shapes.items():
        size = int(np.prod(shape))
        layout.append(StatePart(name, position, size))
        position += size
    return StateSpec(position, layout), shapes


def build_graph(
    module: Any,
    observation_space: gym.Space,
    action_space: gym.Space,
    env_to_module: Any,
    module_to_env: Any,
    agent: Any = None,
    *,
    q_values: bool = False,
    epsilon_greedy: bool = False,
) -> GraphParts:
    """The acting graph of an RLlib module (PPO, DQN, SAC, masked PPO, ...). ``q_values``: the
    module's greedy action is over the Q-values it computes (RLlib's DQN module);
    ``epsilon_greedy``: it explores so, which the graph cannot (its registration says both)."""
    name = type(module).__name__
    if module.is_stateful() and q_values:
        raise Unsupported(
            f"the module {name} is a recurrent Q-network; rlplat export supports recurrent "
            "state for policy modules (use_lstm PPO, APPO, IMPALA) and QMIX's agent networks"
        )
    steps, frames = observation_steps(env_to_module, agent)
    to_env, action = action_step(module_to_env, action_space)
    if frames:
        stacked = gym.spaces.Box(-np.inf, np.inf, _stacked_shape(observation_space, frames))
        inputs = [Input("obs", [], stacked.shape, _dtype(observation_space))]
        graph_space: gym.Space = stacked
    else:
        inputs = observation_inputs(observation_space)
        graph_space = observation_space
    _traceable_log_std(module)
    state = None
    if module.is_stateful():
        state, shapes = state_layout(module)
        inputs = [*inputs, Input("state_in", None, (state.size,))]
        graph: PolicyGraph = RecurrentPolicyGraph(
            module, graph_space, inputs[:-1], steps, to_env, layout=state.layout, shapes=shapes
        )
    else:
        graph = PolicyGraph(module, graph_space, inputs, steps, to_env, q_values)
    return GraphParts(
        graph=graph.eval(),
        inputs=inputs,
        outputs=["action", "action_dist_inputs", *(["state_out"] if state else [])],
        action=action,
        frame_stack=frames,
        state=state,
        exploration=None if epsilon_greedy else _exploration(module),
    )


def _traceable_log_std(module: nn.Module) -> None:
    """Free log std heads (``free_log_std: true``) repeat their log std ``len(mean)`` times,
    which a trace records as the example's batch size; broadcasting it to the mean's shape
    keeps the exported graph's batch dimension free."""

    def forward(head: TorchFreeLogStdMLPHead, inputs: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        mean = head.net(inputs)
        log_std = head.log_std
        if head.clip_log_std:
            limit = head.log_std_clip_param_const
            log_std = torch.clamp(log_std, -limit, limit)
        return torch.cat([mean, log_std.expand_as(mean)], dim=-1)

    for part in module.modules():
        if isinstance(part, TorchFreeLogStdMLPHead):
            part._forward = forward.__get__(part)


def _exploration(module: Any) -> str | None:
    """How ``explore`` acts with this graph: sampling its logits (categorical policies), or not
    at all (Gaussian policies need more than the graph's outputs)."""
    if issubclass(module.get_exploration_action_dist_cls(), TorchCategorical):
        return "categorical"
    return None


def _stacked_shape(space: gym.Space, frames: int) -> tuple[int, ...]:
    height, width, channels = space.shape
    return (height, width, channels * frames)
