"""A dataset directory: recorded env steps in RLlib's offline format, and what they are.

Layout::

    <dir>/dataset.json            what the data is (written last: it marks a whole dataset)
    <dir>/data/part-00000.parquet one row per env step

The rows are RLlib's new-stack column format, as RLlib's own recorder writes it with
``output_write_episodes: false``: ``eps_id``, ``t``, ``obs``, ``actions``, ``rewards``,
``new_obs``, ``terminateds``, ``truncateds`` (``ray.rllib.core.columns.Columns`` names).
Observations are packed as RLlib packs them by default (LZ4-compressed pickles, base64 text),
which keeps any observation shape and is what RLlib's reader unpacks by default, so
``config.offline_data(input_=[<dir>/data])`` reads a dataset without conversion. Ray Data reads
the Parquet files as they are (``ray.data.read_parquet``).

A dataset is written into a hidden sibling directory and renamed into place when it is complete:
a killed recording leaves no directory that looks like a dataset, and nothing that exists is
overwritten.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from rlplat.errors import UserError, did_you_mean
from rlplat.util.paths import publish_dir

DATASET_FILE = "dataset.json"
DATA_DIR = "data"
FORMAT = "rlplat-dataset/1 (RLlib offline columns)"


@dataclass
class Step:
    """One env step of an episode: what the agent saw, did and got."""

    obs: Any
    action: Any
    reward: float
    next_obs: Any
    terminated: bool
    truncated: bool


@dataclass
class DatasetInfo:
    """dataset.json: where the data came from and what it holds."""

    env: dict[str, Any]  # the experiment's env section, as experiment.yaml writes it
    observation_space: dict[str, Any]  # ray.rllib.utils.serialization.gym_space_to_dict
    action_space: dict[str, Any]
    source: dict[str, Any]  # {kind: policy|replay, checkpoint, ...}
    episodes: int = 0
    env_steps: int = 0
    returns: dict[str, float] = field(default_factory=dict)  # complete episodes' returns
    # Box actions as the policy's module produced them, in [-1, 1] (RLlib's normalize_actions),
    # rather than in the env's own range.
    actions_normalized: bool = False
    format: str = FORMAT
    created: str = ""

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        from ray.rllib.utils.serialization import gym_space_from_dict  # noqa: PLC0415

        return gym_space_from_dict(self.observation_space), gym_space_from_dict(self.action_space)


class DatasetWriter:
    """Collects episodes and writes them as one dataset directory when closed."""

    def __init__(self, out: Path, info: DatasetInfo):
        self.out = out
        self.info = info
        self._columns: dict[str, list] = {
            name: []
            for name in (
                "eps_id",
                "t",
                "obs",
                "actions",
                "rewards",
                "new_obs",
                "terminateds",
                "truncateds",
            )
        }
        self._returns: list[float] = []

    def add_episode(
        self, episode_id: str, steps: Iterable[Step], *, from_reset: bool = True
    ) -> None:
        """Add one episode's steps; ``from_reset=False`` for one whose first steps are missing
        (evicted from a replay memory): its return then counts in no statistic."""
        from ray.rllib.utils.compression import pack  # noqa: PLC0415

        total = 0.0
        last: Step | None = None
        for t, step in enumerate(steps):
            columns = self._columns
            columns["eps_id"].append(episode_id)
            columns["t"].append(t)
            columns["obs"].append(pack(np.asarray(step.obs)))
            columns["actions"].append(_plain(step.action))
            columns["rewards"].append(float(step.reward))
            columns["new_obs"].append(pack(np.asarray(step.next_obs)))
            columns["terminateds"].append(bool(step.terminated))
            columns["truncateds"].append(bool(step.truncated))
            total += float(step.reward)
            last = step
        if last is None:
            return
        self.info.episodes += 1
        self.info.env_steps += t + 1
        if from_reset and (last.terminated or last.truncated):
            self._returns.append(total)

    def write(self) -> Path:
        """Write the dataset to ``out`` (which must not exist); returns ``out``."""
        import pyarrow as pa  # noqa: PLC0415
        import pyarrow.parquet as pq  # noqa: PLC0415

        if self.out.exists():
            raise UserError(f"{self.out} already exists; rlplat never overwrites a dataset.")
        if self.info.env_steps == 0:
            raise UserError(f"no env steps were recorded, so no dataset was written to {self.out}.")
        returns = np.asarray(self._returns, dtype=float)
        if returns.size:
            self.info.returns = {
                "mean": float(returns.mean()),
                "std": float(returns.std()),
                "min": float(returns.min()),
                "max": float(returns.max()),
                "episodes": int(returns.size),
            }
        self.info.created = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        with publish_dir(self.out, next_free=False) as draft:
            (draft.path / DATA_DIR).mkdir()
            pq.write_table(pa.table(self._columns), draft.path / DATA_DIR / "part-00000.parquet")
            (draft.path / DATASET_FILE).write_text(json.dumps(self.info.__dict__, indent=2) + "\n")
        return self.out


def check_recordable(observation_space: gym.Space, action_space: gym.Space) -> None:
    """Datasets hold Box or Discrete observations and Discrete or one-dimensional Box actions:
    what RLlib's offline algorithms learn from single-agent data."""
    flat_box = isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1
    if not isinstance(observation_space, (gym.spaces.Box, gym.spaces.Discrete)) or not (
        flat_box or isinstance(action_space, gym.spaces.Discrete)
    ):
        raise UserError(
            f"datasets hold Box or Discrete observations and Discrete or one-dimensional Box "
            f"actions; this env has observations {observation_space} and actions "
            f"{action_space}. Nothing was written."
        )


def actions_normalized(experiment: Any, action_space: gym.Space) -> bool:
    """Whether a policy trained by ``experiment`` acts in [-1, 1] for a Box ``action_space``
    (RLlib's ``env_runners.normalize_actions``, on by default), which its env runners rescale."""
    runners = experiment.model_dump()["env_runners"]
    return isinstance(action_space, gym.spaces.Box) and runners.get("normalize_actions", True)


def episode_steps(episode: Any) -> list[Step]:
    """The steps of a finished single-agent RLlib episode, actions as the module chose them."""
    observations = episode.get_observations()
    actions, rewards = episode.get_actions(), episode.get_rewards()
    last = len(episode) - 1
    return [
        Step(
            obs=observations[t],
            action=actions[t],
            reward=rewards[t],
            next_obs=observations[t + 1],
            terminated=episode.is_terminated and t == last,
            truncated=episode.is_truncated and t == last,
        )
        for t in range(len(episode))
    ]


def _plain(action: Any) -> Any:
    """An action as a Parquet cell: an int for Discrete, a float32 list for Box."""
    array = np.asarray(action)
    if array.ndim == 0:
        return array.item()
    return array.astype(np.float32).ravel().tolist()


def read_info(path: Path) -> DatasetInfo:
    """The dataset.json of the dataset directory ``path``; UserError if it is not one."""
    if not path.is_dir():
        parent = path.parent
        siblings = [str(p) for p in parent.iterdir() if p.is_dir()] if parent.is_dir() else []
        hint = did_you_mean(str(path), siblings)
        raise UserError(f"{path} does not exist or is not a directory.{hint}")
    file = path / DATASET_FILE
    if not file.is_file():
        raise UserError(
            f"{path} is not an rlplat dataset: it has no {DATASET_FILE} (an unfinished "
            "recording leaves none). Record one with `rlplat eval <checkpoint> --record DIR`."
        )
    try:
        return DatasetInfo(**json.loads(file.read_text()))
    except (json.JSONDecodeError, TypeError) as exc:
        raise UserError(f"{file} is not a dataset description: {exc}.") from None


def data_path(path: Path) -> Path:
    """The Parquet directory RLlib reads for the dataset ``path``."""
    return path.resolve() / DATA_DIR


def first_rows(path: Path, count: int) -> dict[str, np.ndarray]:
    """Up to ``count`` rows of the dataset ``path``'s first Parquet file, by column, as Ray Data
    hands them to RLlib's offline pipeline."""
    import pyarrow.parquet as pq  # noqa: PLC0415

    first = min(data_path(path).glob("*.parquet"))
    table = pq.ParquetFile(first).read_row_group(0).slice(0, count)
    return {column: np.asarray(values) for column, values in table.to_pydict().items()}
