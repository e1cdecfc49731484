"""``rlplat dataset CHECKPOINT --from-replay --out DIR``: a run's replay memory as a dataset.

An off-policy run (DQN, SAC) keeps every transition it sampled, up to the buffer's capacity, in
its replay memory, and rlplat stores that memory in each checkpoint (``checkpoint.replay_buffer``,
on by default). Written out as a dataset, it is the classic offline-RL benchmark data: everything
an agent saw while it learned, mostly poor early episodes.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from rlplat.checkpoints import ALGORITHM_STATE, REPLAY_STATE, find_checkpoint
from rlplat.datasets.dataset import (
    DatasetInfo,
    DatasetWriter,
    Step,
    actions_normalized,
    check_recordable,
    episode_steps,
)
from rlplat.errors import UserError
from rlplat.experiment.load import load_experiment


def export_replay(path: Path, out: Path, *, best: bool = False) -> DatasetWriter:
    """Write the replay memory of the checkpoint ``path`` designates (a trial's newest, which
    holds the most, unless ``best``) to the new dataset directory ``out``."""
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode  # noqa: PLC0415
    from ray.rllib.utils.serialization import gym_space_to_dict  # noqa: PLC0415

    if out.exists():
        raise UserError(f"--out {out} already exists; rlplat never overwrites a dataset.")
    picked = find_checkpoint(path, last=not best)
    if picked.experiment_file is None:
        raise UserError(f"no experiment.yaml next to {picked.path} or in its run directory.")
    experiment = load_experiment(picked.experiment_file).experiment
    if experiment.connectors:
        raise UserError(
            f"{picked.path}: its experiment's connectors change observations inside the policy, "
            "and a dataset holds what the env returned. Nothing was written."
        )
    memory = _replay_state(picked.path)
    if "rows" in memory:  # rlplat's TransitionMemory
        episodes, spaces = _memory_episodes(memory)
    else:  # RLlib's episode buffer
        try:
            stored = [SingleAgentEpisode.from_state(state) for state in memory.get("episodes", [])]
        except (KeyError, TypeError, AttributeError):
            raise UserError(
                f"{picked.path} holds a multi-agent replay memory, and {_SINGLE_AGENT} "
                "Nothing was written."
            ) from None
        episodes = [(e.id_, episode_steps(e), e.t_started == 0) for e in stored]
        spaces = (stored[0].observation_space, stored[0].action_space) if stored else None
    if not episodes or spaces is None:
        raise UserError(
            f"the replay memory in {picked.path} is empty: the run stopped before it sampled. "
            "Nothing was written."
        )
    observation_space, action_space = spaces
    check_recordable(observation_space, action_space)
    info = DatasetInfo(
        env=experiment.model_dump(mode="json")["env"],
        observation_space=gym_space_to_dict(observation_space),
        action_space=gym_space_to_dict(action_space),
        actions_normalized=actions_normalized(experiment, action_space),
        source={
            "kind": "replay",
            "checkpoint": str(picked.path),
            "algorithm": experiment.algorithm,
            "picked": picked.why,
        },
    )
    writer = DatasetWriter(out, info)
    for episode_id, steps, from_reset in episodes:
        writer.add_episode(episode_id, steps, from_reset=from_reset)
    writer.write()
    return writer


def _memory_episodes(state: dict[str, Any]) -> tuple[list[tuple[str, list[Step], bool]], Any]:
    """The episodes a ``TransitionMemory``'s state holds, as (id, steps, whether they start at
    the reset), and its (observation, action) spaces."""
    from rlplat.algorithms.transition_memory import TransitionMemory  # noqa: PLC0415

    memory = TransitionMemory(state["capacity"])
    memory.set_state(state)
    rows = memory.rows
    episodes = []
    for episode_id, first, chain in memory.episodes():
        steps = [
            Step(
                obs=rows["obs"][row],
                action=rows["actions"][row],
                reward=float(rows["rewards"][row]),
                next_obs=rows["new_obs"][row],
                terminated=bool(rows["terminated"][row]),
                truncated=bool(rows["ends"][row] and not rows["terminated"][row]),
            )
            for row in chain
        ]
        episodes.append((episode_id, steps, first == 0))
    return episodes, memory.spaces


_SINGLE_AGENT = (
    "a dataset holds one agent's env steps as the env returned them (RLlib's offline algorithms "
    "learn single-agent policies)."
)


def _replay_state(checkpoint: Path) -> dict[str, Any]:
    state_file = checkpoint / ALGORITHM_STATE
    try:
        with open(state_file, "rb") as handle:
            state = pickle.load(handle)
    except (OSError, pickle.UnpicklingError, EOFError) as exc:
        raise UserError(f"cannot read {state_file}: {exc}.") from None
    memory = state.get(REPLAY_STATE) if isinstance(state, dict) else None
    if memory is None:
        raise UserError(
            f"{checkpoint} has no replay memory: only off-policy runs (DQN, SAC) keep one, and "
            "only with checkpoint.replay_buffer: true (the default). Nothing was written."
        )
    return memory


def print_dataset(writer: DatasetWriter, console: Any) -> None:
    """What ``rlplat dataset`` wrote: where, how much, from which checkpoint, and the returns of
    the complete episodes it holds."""
    info = writer.info
    returns = info.returns
    console.print(
        f"Dataset: {writer.out} ({info.episodes} episode(s), {info.env_steps:,} env steps) from "
        f"{info.source['checkpoint']}",
        highlight=False,
    )
    if returns:
        console.print(
            f"  returns of its {returns['episodes']} complete episode(s): mean "
            f"{returns['mean']:.2f}, min {returns['min']:.2f}, max {returns['max']:.2f}",
            highlight=False,
        )
