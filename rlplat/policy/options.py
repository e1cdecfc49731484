"""``rlplat eval``'s options: what it plays and writes (light: read when the CLI starts)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlplat.checkpoints import last_option
from rlplat.util.options import option


@dataclass
class EvalOptions:
    """How a policy is evaluated; each field is an option of ``rlplat eval``."""

    episodes: int = option(10, flags=("--episodes", "-n"), help="Episodes to play.")
    seed: int = option(0, help="Seed of the first episode (episode i: seed + i).")
    explore: bool = option(False, help="Sample actions instead of taking the greedy one.")
    render: str | None = option(  # gif, mp4, ansi, human
        None, help="gif or mp4: write videos; ansi: print frames; human: open a window."
    )
    out: Path = option(Path("videos"), help="Directory for --render gif/mp4 files.")
    one_file: bool = option(False, help="One video with all episodes instead of one each.")
    last: bool = last_option()
    max_steps: int | None = option(None, help="Cut episodes after this many steps.")
    record: Path | None = option(
        None,
        help="Write the episodes to this new directory as a dataset for offline training "
        "(RLlib's Parquet columns plus dataset.json).",
    )
    random: list[str] = option(
        factory=list,
        help="Multi-agent: this policy acts uniformly at random instead of as trained "
        "(repeat for several), to score the others against a random side.",
    )
    against: str | None = option(
        None,
        help="Self-play runs: the learner plays this opponent, seats swapped every other game, "
        "and wins, draws and losses are counted: 'random' (random legal moves) or another "
        "run's policy, PATH or PATH:POLICY.",
    )


@dataclass
class DatasetOptions:
    """Where ``rlplat dataset`` writes and from what; each field is one of its options."""

    out: Path = option(help="New dataset directory (never overwritten).")
    from_replay: bool = option(
        False,
        help="Write the run's replay memory (DQN, SAC): every transition it kept. To record a "
        "policy's episodes use rlplat eval --record.",
    )
    best: bool = option(False, help="The best checkpoint of a trial instead of the newest.")
