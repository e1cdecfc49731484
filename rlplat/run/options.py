"""``rlplat train``'s options (light: read when the CLI starts, without Ray Tune)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlplat.util.options import option


@dataclass
class TrainOptions:
    """How an experiment is run, resumed or only checked; each field is an option of
    ``rlplat train`` (the experiment file and its overrides are its arguments)."""

    resume: Path | None = option(
        None,
        help="Continue an interrupted run in its directory: finished trials are kept, "
        "unfinished ones continue from their last checkpoint.",
    )
    from_checkpoint: Path | None = option(
        None,
        flags=("--from",),
        help="Start a new run from this checkpoint's policy (or a trial/run directory's "
        "best): sets init.checkpoint. init.optimizer=true also takes the optimizer state.",
    )
    seed: int | None = option(
        None, help="The run's seed, as SB3's and CleanRL's --seed: the override seed=N."
    )
    seeds: int | None = option(
        None, help="Run each configuration on N seeds (seed, seed+1, ...): the override seeds=N."
    )
    stacked: bool = option(
        False,
        help="Train the seeds of --seeds as stacked models over this machine's CPUs, each seed "
        "still its own trial (PPO, PQN, SAC, TD3, CrossQ, DQN): the override stacked=true.",
    )
    retry_errored: bool = option(False, help="With --resume: also continue trials that failed.")
    address: str | None = option(
        None, help="Join a running Ray cluster (auto or host:port) instead of starting one."
    )
    dry_run: bool = option(False, help="Validate and print the resolved experiment only.")
    timings: bool = option(
        False,
        help="Print the seconds of each stage (imports, validation, Ray's start, the trial's "
        "start, training, shutdown) at the end; run.json records them either way.",
    )

    def with_overrides(self, overrides: list[str]) -> list[str]:
        """The command line's overrides and those ``--from``, ``--seed``, ``--seeds`` and
        ``--stacked`` stand for."""
        extra = []
        if self.from_checkpoint is not None:
            extra.append(f"init.checkpoint={self.from_checkpoint}")
        if self.seed is not None:
            extra.append(f"seed={self.seed}")
        if self.seeds is not None:
            extra.append(f"seeds={self.seeds}")
        if self.stacked:
            extra.append("stacked=true")
        return [*overrides, *extra]
