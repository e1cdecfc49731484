"""VMAS's batched simulation for RLlib's multi-agent env runners (``env.backend: vmas``).

VMAS simulates many worlds of one scenario in one PyTorch batch: a step of 64 ``balance`` worlds
costs about what a step of one does. RLlib's multi-agent env runner takes a vector of
``MultiAgentEnv``s and steps them one after another; ``VmasWorlds`` is such a vector whose
``num_envs`` envs are the worlds of one VMAS environment, stepped together. RLlib still sees
``num_envs`` separate envs, each with its own episodes, returns and ends, so everything
downstream (metrics, learners, checkpoints, export) is as with one world per env.

Each world behaves as ``rlplat.environments.gymma.vmas_scenario``'s single-world env (the
evaluation and ``rlplat eval`` env): agents ``agent_0``, ``agent_1``, ... in VMAS's order, the
same spaces, each agent's own reward, the scenario's ``done`` a termination and ``max_steps`` a
truncation. A world that ended is reset at the next step (RLlib's "next step" autoreset), its
observations then those of its new episode. The worlds' infos are left empty (VMAS's per-agent
reward parts are not copied out per world).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.env.vector.vector_multi_agent_env import VectorMultiAgentEnv


class WorldView:
    """What RLlib's env runner reads of one env of its vector: its agents and spaces."""

    def __init__(self, worlds: VmasWorlds):
        self.possible_agents = worlds.possible_agents
        self.observation_spaces = worlds.single_observation_spaces
        self.action_spaces = worlds.single_action_spaces
        self.metadata = worlds.metadata
        self.render_mode = None

    @property
    def unwrapped(self) -> WorldView:
        return self

    def get_observation_space(self, agent: str) -> gym.Space:
        return self.observation_spaces[agent]

    def get_action_space(self, agent: str) -> gym.Space:
        return self.action_spaces[agent]


class VmasWorlds(VectorMultiAgentEnv):
    """``num_envs`` worlds of one VMAS scenario on the CPU, stepped as one batch."""

    def __init__(
        self,
        scenario: str,
        num_envs: int,
        max_steps: int,
        continuous_actions: bool = True,
        **kwargs: Any,
    ):
        import vmas  # noqa: PLC0415 - an optional package
        from shimmy.openai_gym_compatibility import _convert_space  # noqa: PLC0415 - VMAS's own

        kwargs.pop("render_mode", None)
        self.world = vmas.make_env(
            scenario,
            num_envs=num_envs,
            device="cpu",
            continuous_actions=continuous_actions,
            max_steps=max_steps,
            terminated_truncated=True,
            **kwargs,
        )
        self.num_envs = num_envs
        observation_spaces = _convert_space(self.world.observation_space)
        action_spaces = _convert_space(self.world.action_space)
        agents = self.possible_agents = [f"agent_{i}" for i in range(len(action_spaces))]
        self.single_observation_spaces = dict(zip(agents, observation_spaces, strict=True))
        self.single_action_spaces = dict(zip(agents, action_spaces, strict=True))
        self.single_observation_space = gym.spaces.Dict(self.single_observation_spaces)
        self.single_action_space = gym.spaces.Dict(self.single_action_spaces)
        self.metadata = {"autoreset_mode": "next_step", "render_modes": []}
        self.envs = [WorldView(self)] * num_envs
        self._dtype = torch.float32 if continuous_actions else torch.long
        self._idle = [
            np.zeros(space.shape, space.dtype) if isinstance(space, gym.spaces.Box) else 0
            for space in action_spaces
        ]
        self._ended = np.zeros(num_envs, dtype=bool)

    def reset(self, *, seed: Any = None, options: dict | None = None):
        if seed is not None:  # one stream for the batch: the first env's seed
            self.world.seed(int(seed[0] if isinstance(seed, list | tuple) else seed))
        self._ended[:] = False
        observations = self._by_world(self.world.reset())
        return observations, [{} for _ in range(self.num_envs)]

    def step(self, actions: list[dict[str, Any]]):
        joint = [
            torch.as_tensor(
                np.stack([np.asarray(a.get(agent, idle)) for a in actions]), dtype=self._dtype
            ).reshape(self.num_envs, -1)
            for agent, idle in zip(self.possible_agents, self._idle, strict=True)
        ]
        observations, rewards, terminated, truncated, _ = self.world.step(joint)
        ended = self._ended.nonzero()[0]
        for index in ended:  # ended at the last step: its new episode starts here
            observations = self.world.reset_at(int(index))
        by_world = self._by_world(observations)
        agent_rewards = torch.stack(rewards, dim=1).numpy()
        terminated = terminated.numpy().copy()
        truncated = truncated.numpy() & ~terminated
        terminated[ended] = truncated[ended] = False
        agent_rewards[ended] = 0.0
        self._ended = terminated | truncated
        agents = self.possible_agents
        return (
            by_world,
            [dict(zip(agents, row.tolist(), strict=True)) for row in agent_rewards],
            [{**dict.fromkeys(agents, bool(t)), "__all__": bool(t)} for t in terminated],
            [{**dict.fromkeys(agents, bool(t)), "__all__": bool(t)} for t in truncated],
            [{} for _ in range(self.num_envs)],
        )

    def _by_world(self, observations: list[torch.Tensor]) -> list[dict[str, np.ndarray]]:
        arrays = [o.numpy() for o in observations]
        return [
            {agent: array[w] for agent, array in zip(self.possible_agents, arrays, strict=True)}
            for w in range(self.num_envs)
        ]

    def render(self) -> None:
        return None  # rlplat eval renders the single-world env
