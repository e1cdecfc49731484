"""The ``multi_agent:`` section: which policy acts for which agent, checked against the real env.

    multi_agent:
      policies: {"adversary_*": adversary, "agent_*": good}   # or shared | independent
      train: [good]            # the others keep their initial weights
      random: [adversary]      # uniform random actions (legal ones when the env masks actions)
      overrides: {good: {lr: 1.0e-4}}

Everything is checked against the env's agents and spaces before Ray starts.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from rlplat.environments.make import EnvInfo
from rlplat.environments.pettingzoo import ACTION_MASK
from rlplat.errors import ConfigError, allowed_list, did_you_mean
from rlplat.experiment.schema import Experiment, MultiAgentSpec

SHARED_POLICY = "shared"


class PolicyMapping:
    """RLlib's ``policy_mapping_fn``: agent id -> policy id, from the ``policies`` setting.

    A class (not a closure) so RLlib can pickle it to env runners, and ``rlplat eval`` rebuilds
    the same mapping from the experiment file.
    """

    def __init__(self, policies: str | dict[str, str]):
        self.policies = policies

    def __call__(self, agent_id: Any, episode: Any = None, **kwargs: Any) -> str | None:
        if self.policies == "shared":
            return SHARED_POLICY
        if self.policies == "independent":
            return str(agent_id)
        for pattern, policy in self.policies.items():
            if fnmatch.fnmatchcase(str(agent_id), pattern):
                return policy
        return None


def mapping_for(experiment: Experiment, env: Any) -> PolicyMapping | None:
    """The experiment's policy mapping when ``env`` (as built for it) is multi-agent."""
    if getattr(env, "possible_agents", None) is None:
        return None
    return PolicyMapping((experiment.multi_agent or MultiAgentSpec()).policies)


@dataclass(frozen=True)
class MultiAgentSetup:
    """The checked policy layout of a multi-agent experiment."""

    mapping: PolicyMapping
    agents_of: dict[str, list[str]]  # policy -> its agents, in the env's agent order
    trained: list[str]
    random: list[str]
    masked: list[str]  # policies whose observations carry an action mask
    observation_spaces: dict[str, gym.Space]
    action_spaces: dict[str, gym.Space]

    @property
    def policies(self) -> list[str]:
        return list(self.agents_of)


def has_action_mask(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Dict) and ACTION_MASK in space.spaces


def check_multi_agent(
    spec: MultiAgentSpec, env: EnvInfo, training_keys: list[str], locate: Callable[[str], str]
) -> MultiAgentSetup:
    """Map every agent to a policy and check spaces, policy names and per-policy overrides."""
    assert env.agents is not None
    mapping = PolicyMapping(spec.policies)
    if isinstance(spec.policies, dict):
        _check_patterns(spec.policies, env.agents, locate)
    agents_of: dict[str, list[str]] = {}
    for agent in env.agents:
        agents_of.setdefault(mapping(agent), []).append(agent)
    policies = list(agents_of)

    observation_spaces: dict[str, gym.Space] = {}
    action_spaces: dict[str, gym.Space] = {}
    for policy, agents in agents_of.items():
        observation_spaces[policy] = _one_space(
            policy, agents, env.observation_spaces, "observation", locate
        )
        action_spaces[policy] = _one_space(policy, agents, env.action_spaces, "action", locate)
    _check_policy_names(spec, policies, training_keys, locate)
    trained = [
        p for p in policies if p not in spec.random and (spec.train == "all" or p in spec.train)
    ]
    if not trained:
        raise ConfigError(
            "no policy is left to train: every policy is random. Let at least one learn.",
            location=locate("multi_agent.random"),
            key="multi_agent.random",
        )
    return MultiAgentSetup(
        mapping=mapping,
        agents_of=agents_of,
        trained=trained,
        random=list(spec.random),
        masked=[p for p in policies if has_action_mask(observation_spaces[p])],
        observation_spaces=observation_spaces,
        action_spaces=action_spaces,
    )


PADDING_WRAPPERS = {"observation": "pad_observations_v0", "action": "pad_action_space_v0"}


def _one_space(
    policy: str,
    agents: list[str],
    spaces: dict[str, gym.Space],
    kind: str,
    locate: Callable[[str], str],
) -> gym.Space:
    """The one ``kind`` space that all of a policy's agents must share."""
    first = spaces[agents[0]]
    for agent in agents[1:]:
        if spaces[agent] != first:
            raise ConfigError(
                f"policy {policy!r} acts for agents with different {kind} spaces: "
                f"{agents[0]} has {first}, {agent} has {spaces[agent]}. One network "
                f"needs one space: add the SuperSuit wrapper '{PADDING_WRAPPERS[kind]}' to "
                "env.wrappers (it pads every agent to the largest space), or give these "
                "agents separate policies (policies: independent, or patterns).",
                location=locate("multi_agent.policies"),
                key="multi_agent.policies",
            )
    return first


def _check_policy_names(
    spec: MultiAgentSpec, policies: list[str], training_keys: list[str], locate: Callable
) -> None:
    """``train``, ``random`` and ``overrides`` name existing policies, none both random and
    trained, and the overrides are training settings of the algorithm."""
    named_train = [] if spec.train == "all" else spec.train
    for key, names in (
        ("train", named_train),
        ("random", spec.random),
        ("overrides", list(spec.overrides)),
    ):
        for name in names:
            if name not in policies:
                raise ConfigError(
                    f"unknown policy {name!r}; this experiment's policies are "
                    f"{allowed_list(policies)}." + did_you_mean(name, policies),
                    location=locate(f"multi_agent.{key}"),
                    key=f"multi_agent.{key}",
                )
    both = set(spec.random) & set(named_train)
    if both:
        raise ConfigError(
            f"{allowed_list(both)} cannot be both random and trained.",
            location=locate("multi_agent.random"),
            key="multi_agent.random",
        )
    for policy, overrides in spec.overrides.items():
        for key in overrides:
            if key not in training_keys:
                raise ConfigError(
                    f"{key!r} is not a 'training' setting of this algorithm."
                    + did_you_mean(key, training_keys)
                    + f" Allowed: {allowed_list(training_keys, limit=40)}.",
                    location=locate(f"multi_agent.overrides.{policy}.{key}"),
                    key=f"multi_agent.overrides.{policy}.{key}",
                )


def _check_patterns(patterns: dict[str, str], agents: list[str], locate: Callable) -> None:
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(agent, pattern) for agent in agents):
            raise ConfigError(
                f"the agent pattern {pattern!r} matches no agent of this environment; its "
                f"agents are {allowed_list(agents, limit=20)}." + did_you_mean(pattern, agents),
                location=locate(f"multi_agent.policies.{pattern}"),
                key=f"multi_agent.policies.{pattern}",
            )
    unmatched = [a for a in agents if PolicyMapping(patterns)(a) is None]
    if unmatched:
        raise ConfigError(
            f"no pattern matches the agents {allowed_list(unmatched, limit=20)}: every agent "
            "needs a policy. Add a pattern for them (e.g. '*': <policy> as the last entry).",
            location=locate("multi_agent.policies"),
            key="multi_agent.policies",
        )
