"""The parity certificate: does the ONNX export act like the checkpoint?

Seeded episodes are played twice: once with the checkpoint acting (through the same restore and
connectors as ``rlplat eval``) and once with the export acting (onnxruntime). In both, the other
one follows the same episode as a shadow and is asked for its action on every observation
visited, so every visited observation yields a comparison: discrete actions must be equal,
continuous ones within ``tolerance``. Two different discrete actions still agree where the
checkpoint scores them alike, its logits or Q-values for them within ``tolerance`` (relative to
their size beyond 1): a near-tie that float rounding in another runtime may break either way
(a trained Q-network often values CartPole's two pushes within 1e-5 of each other). Random
policies (``multi_agent.random``) are left out of the comparison: their draws come from
different generators by design.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlplat.policy.rollout import Actor, Stats, run_episode


@dataclass
class Agreement:
    """Counts of compared actions and the largest difference seen."""

    tolerance: float
    compared: int = 0
    agreed: int = 0
    near_ties: int = 0  # different discrete actions the checkpoint scores alike
    max_abs_diff: float = 0.0
    first_disagreement: dict[str, Any] | None = None

    def add(
        self, reference: Any, exported: Any, where: dict[str, Any], scores: Any = None
    ) -> None:
        """Discrete actions agree when equal or a near-tie of the checkpoint's ``scores`` (its
        action distribution inputs for this observation, when known); continuous ones within
        the tolerance."""
        a, b = np.asarray(reference), np.asarray(exported)
        self.compared += 1
        if a.shape != b.shape:
            agree = False
        elif np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
            agree = bool(np.array_equal(a, b))
            self.max_abs_diff = max(self.max_abs_diff, float(np.max(np.abs(a - b), initial=0)))
            if not agree and self._near_tie(a, b, scores):
                agree = True
                self.near_ties += 1
        else:
            diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0))
            self.max_abs_diff = max(self.max_abs_diff, diff)
            agree = diff <= self.tolerance
        if agree:
            self.agreed += 1
        elif self.first_disagreement is None:
            self.first_disagreement = {
                **where,
                "checkpoint_action": a.tolist(),
                "onnx_action": b.tolist(),
            }

    def _near_tie(self, a: np.ndarray, b: np.ndarray, scores: Any) -> bool:
        if scores is None or a.ndim != 0:
            return False
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        if not (0 <= a < len(scores) and 0 <= b < len(scores)):
            return False
        x, y = scores[int(a)], scores[int(b)]
        return abs(x - y) <= self.tolerance * max(1.0, abs(x), abs(y))

    @property
    def fraction(self) -> float:
        return self.agreed / self.compared if self.compared else 0.0


@dataclass
class Certificate:
    passed: bool
    agreement: float
    compared_actions: int
    near_ties: int
    max_abs_diff: float
    tolerance: float
    min_agreement: float
    episodes: int
    seeds: list[int]
    checkpoint_returns: list[float]
    onnx_returns: list[float]
    not_compared: list[str] = field(default_factory=list)
    first_disagreement: dict[str, Any] | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "verified": True,
            "passed": self.passed,
            "agreement": self.agreement,
            "compared_actions": self.compared_actions,
            "near_ties": self.near_ties,
            "max_abs_diff": self.max_abs_diff,
            "tolerance": self.tolerance,
            "min_agreement": self.min_agreement,
            "episodes": self.episodes,
            "seeds": self.seeds,
            "checkpoint": {"returns": self.checkpoint_returns,
                           **vars(Stats.of(self.checkpoint_returns))},
            "onnx": {"returns": self.onnx_returns, **vars(Stats.of(self.onnx_returns))},
            "not_compared": self.not_compared,
            "first_disagreement": self.first_disagreement,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class _Watcher:
    """Asks the shadow for its action on each observation the driver acts on, and compares."""

    agreement: Agreement
    shadow: Actor
    checkpoint: Actor  # the driver or the shadow: its scores decide near-ties
    driver: str
    seed: int
    skip_agents: set[str]
    step: int = 0

    def __call__(self, observation: Any, action: Any) -> None:
        other = self.shadow.act(observation, False)
        where = {"driver": self.driver, "seed": self.seed, "step": self.step}
        self.step += 1
        reference, exported = (action, other) if self.driver == "checkpoint" else (other, action)
        if not isinstance(action, dict):
            scores = getattr(self.checkpoint, "last_scores", lambda: None)()
            self.agreement.add(reference, exported, where, scores)
            return
        for agent in action:
            if agent not in self.skip_agents:
                self.agreement.add(reference[agent], exported[agent], {**where, "agent": agent})


def certify(
    checkpoint_actor: Actor,
    export_actor: Actor,
    env: Any,
    *,
    episodes: int,
    seed: int,
    tolerance: float,
    min_agreement: float,
    skip_agents: set[str] = frozenset(),
    not_compared: list[str] = (),
) -> Certificate:
    """Play ``episodes`` seeded episodes with each actor driving and the other as its shadow."""
    start = time.perf_counter()
    agreement = Agreement(tolerance)
    returns: dict[str, list[float]] = {"checkpoint": [], "onnx": []}
    for driver_name, driver, shadow in (
        ("checkpoint", checkpoint_actor, export_actor),
        ("onnx", export_actor, checkpoint_actor),
    ):
        for episode_seed in range(seed, seed + episodes):
            watcher = _Watcher(
                agreement, shadow, checkpoint_actor, driver_name, episode_seed, set(skip_agents)
            )
            result = run_episode(
                driver, env, seed=episode_seed, explore=False, shadows=[shadow], watch=watcher
            )
            returns[driver_name].append(result.episode_return)
    fraction = agreement.fraction
    return Certificate(
        passed=agreement.compared > 0 and fraction >= min_agreement,
        agreement=fraction,
        compared_actions=agreement.compared,
        near_ties=agreement.near_ties,
        max_abs_diff=agreement.max_abs_diff,
        tolerance=tolerance,
        min_agreement=min_agreement,
        episodes=episodes,
        seeds=list(range(seed, seed + episodes)),
        checkpoint_returns=returns["checkpoint"],
        onnx_returns=returns["onnx"],
        not_compared=list(not_compared),
        first_disagreement=agreement.first_disagreement,
        seconds=time.perf_counter() - start,
    )
