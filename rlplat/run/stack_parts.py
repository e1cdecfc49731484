"""A stack of seeds over the machine's CPUs: the seeds split into parts, each part one stacked
algorithm in its own process (the first in the command's, the others in Ray actors pinned to this
machine), stepped together once per iteration.

One stacked algorithm uses one core: at 16 CartPole seeds its update is bound by that core's
arithmetic (docs/performance.md), while separate trials run on every core. A part per core gives
the stack the machine without changing what any seed computes: a seed's envs, networks,
optimizer state and stop condition stay its own, whichever part holds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


def split_seeds(count: int, processes: int) -> list[list[int]]:
    """Seed indices 0..count-1 in ``processes`` contiguous parts as even as can be (the first
    parts one larger), no part empty."""
    parts = max(1, min(processes, count))
    size, extra = divmod(count, parts)
    bounds, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        bounds.append(list(range(start, end)))
        start = end
    return bounds


@dataclass
class StackPart:
    """Some of the stack's seeds (``indices`` into the run's seeds) in one algorithm: ``algo``
    in this process, or the handle of a Ray actor holding it (``remote``)."""

    indices: list[int]
    algo: Any
    remote: bool

    @classmethod
    def start(cls, trainable: type, config: dict[str, Any], indices: list[int], remote: bool):
        """The part's algorithm built from ``config`` (its seeds), here or in an actor on this
        machine's node (no CPUs reserved: the command's process reserves none either; Ray
        gives it one torch thread, as the command's stack has)."""
        if not remote:
            return cls(indices, trainable(config=config), False)
        actor = ray.remote(trainable).options(
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(
                ray.get_runtime_context().get_node_id(), soft=False
            ),
        )
        return cls(indices, actor.remote(config=config), True)

    def call(self, method: str, *args: Any) -> Any:
        """``algo.<method>(*args)``: its value here, a reference to it for an actor."""
        if self.remote:
            return getattr(self.algo, method).remote(*args)
        return getattr(self.algo, method)(*args)

    def save(self, checkpoint: Path, seeds: list[tuple[int, Path]]) -> Any:
        """The part's algorithm into ``checkpoint``, and each (index, path) of ``seeds`` as its
        policy (``save_seed``); what to wait for, for an actor."""
        return self.call("save_part", str(checkpoint), [(i, str(p)) for i, p in seeds])

    def stop(self) -> None:
        if self.remote:
            try:
                ray.get(self.algo.stop.remote(), timeout=60)
            finally:
                ray.kill(self.algo)
        else:
            self.algo.stop()


def gather(values: list[Any]) -> list[Any]:
    """The parts' values, an actor's references waited for."""
    return [ray.get(value) if isinstance(value, ray.ObjectRef) else value for value in values]
