"""The process's global random generators (Python's ``random``, numpy's legacy generator,
torch's CPU generator) and torch's deterministic-algorithms switch, captured and swapped as one:
code that seeds and draws from them (RLlib's seeding, its samplers) keeps its own streams while it
shares a process with other code that draws too."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass
class GeneratorStates:
    """Where each generator stands. torch's CUDA generators are not included: only the code of
    one side of a swap uses the GPU."""

    python: Any
    numpy: Any
    torch: torch.Tensor
    deterministic: tuple[bool, bool]  # torch.use_deterministic_algorithms(mode, warn_only)

    @classmethod
    def capture(cls) -> GeneratorStates:
        return cls(
            random.getstate(),
            np.random.get_state(),
            torch.get_rng_state(),
            (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
        )

    @classmethod
    def seeded(cls, seed: int | None) -> GeneratorStates:
        """The states ``seed`` gives (None: the process's current ones)."""
        with swapped(cls.capture()) as states:
            if seed is not None:
                random.seed(seed)
                np.random.seed(seed % 2**32)
                torch.manual_seed(seed)
        return states

    def restore(self) -> None:
        random.setstate(self.python)
        np.random.set_state(self.numpy)
        torch.set_rng_state(self.torch)
        mode, warn_only = self.deterministic
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)


@contextmanager
def swapped(states: GeneratorStates) -> Iterator[GeneratorStates]:
    """Run with ``states`` as the process's generators; afterwards ``states`` holds where they
    ended, and the process's own are back as they were."""
    own = GeneratorStates.capture()
    states.restore()
    try:
        yield states
    finally:
        ended = GeneratorStates.capture()
        states.python, states.numpy, states.torch = ended.python, ended.numpy, ended.torch
        states.deterministic = ended.deterministic
        own.restore()
