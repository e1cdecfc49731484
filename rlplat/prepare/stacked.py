"""What ``stacked: true`` (``--stacked``) can train, checked before Ray: the seeds of ``seeds``
as one stacked PPO, PQN, SAC, TD3, CrossQ or DQN model in the command's process
(``rlplat.algorithms.stacked``).

Each refusal names the key to change. A stacked PPO seed is RLlib's default PPO networks
(separate actor and critic MLPs) acting in a Discrete or Box space, a stacked SAC, TD3 or
CrossQ seed rlplat's networks of that algorithm acting in a Box space, a stacked DQN seed
RLlib's DQN networks and a stacked PQN seed rlplat's PQN network acting in a Discrete space,
all on a flat observation; what a stack does not carry
(searches, several agents, memory, connectors other than ``mean_std_filter`` and PPO's
``reward_scaling``, remote env runners or learners, evaluation but each seed's greedy
episodes in the stack's own process, n-step returns but DQN's, distributional or noisy DQN,
prioritized replay) is refused rather than silently left out.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import gymnasium as gym

from rlplat.cluster.placement import Node
from rlplat.environments.make import EnvInfo
from rlplat.errors import ConfigError
from rlplat.experiment.load import Locator
from rlplat.experiment.schema import Experiment, NamedEntry, entry_parts
from rlplat.experiment.spaces import Space

# The model settings each stacked module builds with (RLlib's DefaultModelConfig names).
STACKED_MODEL_KEYS = {
    "PPO": (
        "fcnet_hiddens",
        "fcnet_activation",
        "fcnet_kernel_initializer",
        "fcnet_kernel_initializer_kwargs",
        "fcnet_bias_initializer",
        "fcnet_bias_initializer_kwargs",
        "free_log_std",
        "vf_share_layers",
        "log_std_clip_param",
    ),
    "SAC": ("fcnet_hiddens", "fcnet_activation", "head_fcnet_hiddens", "head_fcnet_activation"),
    "TD3": (),  # rlplat's own networks: training.actor_hiddens, critic_hiddens, hidden_activation
    "DQN": ("fcnet_hiddens", "fcnet_activation", "head_fcnet_hiddens", "head_fcnet_activation"),
    "PQN": (),  # rlplat's own network: training.hiddens
    "CrossQ": (),  # rlplat's own networks: training.actor_hiddens, critic_hiddens
}
# What each stacked algorithm's seeds act in: Box (a 1-D Box space) or Discrete.
STACKED_ACTIONS = {
    "PPO": ("Discrete", "Box"),
    "SAC": ("Box",),
    "TD3": ("Box",),
    "DQN": ("Discrete",),
    "PQN": ("Discrete",),
    "CrossQ": ("Box",),
}
STACKED_ALGORITHMS = tuple(STACKED_MODEL_KEYS)
ON_POLICY = ("PPO", "PQN")  # learn from each rollout: no replay, any elementwise optimizer


def check_stacked(
    experiment: Experiment, env: EnvInfo, spaces: list[Space], locate: Locator
) -> None:
    """Refuse a ``stacked: true`` experiment the stack cannot train as its seeds apart would
    train; nothing for other experiments."""
    if not experiment.stacked:
        return

    def refuse(message: str, key: str = "stacked") -> None:
        raise ConfigError(message, location=locate(key), key=key)

    if not experiment.seeds:
        refuse("stacked: true trains the seeds of seeds as one model: give seeds: N (or "
               "rlplat train ... --seeds N --stacked).")  # fmt: skip
    if experiment.algorithm not in STACKED_ALGORITHMS:
        refuse(
            f"stacked seeds train {', '.join(STACKED_ALGORITHMS)} so far, not "
            f"{experiment.algorithm}: leave stacked out to train its seeds as separate trials."
        )
    searched = [space.dotted for space in spaces]
    if searched or (experiment.tune is not None and experiment.tune.num_samples > 1):
        refuse(
            "stacked seeds share one configuration; this experiment searches "
            f"({', '.join(searched) or 'tune.num_samples'}): leave stacked out, or search "
            "first and stack the chosen configuration's seeds."
        )
    if env.multi_agent or experiment.multi_agent is not None:
        refuse("stacked seeds train single-agent envs; this one is multi-agent.")
    obs, actions = env.observation_space, env.action_space
    flat = isinstance(obs, gym.spaces.Box) and len(obs.shape) == 1
    if not flat:
        refuse(
            f"stacked seeds read flat observations (a 1-D Box); {experiment.env.label!r} gives "
            f"{obs}: leave stacked out (the MLP stack has no image or nested encoders)."
        )
    kinds = STACKED_ACTIONS[experiment.algorithm]
    box_actions = isinstance(actions, gym.spaces.Box) and len(actions.shape) == 1
    discrete = isinstance(actions, gym.spaces.Discrete)
    if not ((box_actions and "Box" in kinds) or (discrete and "Discrete" in kinds)):
        allowed = " or ".join("a 1-D Box space" if kind == "Box" else "a Discrete space"
                              for kind in kinds)  # fmt: skip
        refuse(f"stacked {experiment.algorithm} seeds act in {allowed}, not {actions}.")
    ppo = experiment.algorithm == "PPO"
    on_policy = experiment.algorithm in ON_POLICY
    model = experiment.rl_module.get("model_config") or {}
    keys = STACKED_MODEL_KEYS[experiment.algorithm]
    other = [key for key in model if key not in keys]
    if other:
        refuse(
            f"the stacked {experiment.algorithm} module builds its MLPs from "
            f"{', '.join(keys)} only; leave {other[0]} out (or stacked).",
            f"rl_module.model_config.{other[0]}",
        )
    if ppo and model.get("vf_share_layers", True):
        refuse(
            "stacked PPO keeps each seed's actor and critic apart: set "
            "rl_module.model_config.vf_share_layers: false (RLlib's default shares them), so "
            "the seeds train stacked as they would apart.",
            "rl_module.model_config.vf_share_layers",
        )
    if set(experiment.rl_module) - {"model_config"}:
        refuse("stacked seeds build their own module: leave rl_module's other keys out.",
               "rl_module")  # fmt: skip
    sections = {
        "connectors": not _stackable_connectors(experiment.connectors, ppo),
        "exploration.rnd": experiment.exploration.rnd is not None,
        "init.checkpoint": bool(experiment.init.checkpoint),
        "offline": experiment.offline is not None,
        "training.learner_class": "learner_class" in experiment.training,
        "training.use_kl_loss": bool(experiment.training.get("use_kl_loss")),
        "replay.her": experiment.replay.her is not None,
    }
    if not on_policy:
        sections["training.optimizer"] = "optimizer" in experiment.training
        n_step = experiment.training.get("n_step", 1)
        if experiment.algorithm == "DQN":  # a fixed n; RLlib's drawn-per-batch range is not
            sections["training.n_step"] = not isinstance(n_step, int | None)
            sections["training.num_atoms"] = experiment.training.get("num_atoms", 1) != 1
            sections["training.noisy"] = bool(experiment.training.get("noisy"))
        else:
            sections["training.n_step"] = n_step not in (1, None)
        buffer = str((experiment.training.get("replay_buffer_config") or {}).get("type", ""))
        sections["training.replay_buffer_config.type"] = "Prioritized" in buffer
    sections["training.grad_clip_by"] = experiment.training.get("grad_clip_by") not in (
        None,
        "global_norm",
    )
    sections["env_runners.explore"] = experiment.env_runners.get("explore") is False
    for key, given in sections.items():
        if given:
            refuse(
                f"stacked seeds do not carry {key} (a stack has its own learner, an "
                "off-policy stack a uniform replay of one-step transitions (n-step for DQN), "
                "and no connectors but each seed's own mean_std_filter (and PPO's "
                "reward_scaling)): leave it out, or leave stacked out.",
                key,
            )
    _check_evaluation(experiment, refuse)
    if not on_policy:
        _check_replay_fits(experiment, obs, actions, refuse)
    resources = experiment.resources
    remote = {
        "resources.env_runners.count": resources.env_runners.count,
        "resources.learners.count": resources.learners.count,
        "resources.learners.gpus": resources.learners.gpus,
    }
    for key, value in remote.items():
        if value:
            refuse(
                f"a stack samples and learns in the command's process: {key} ({value}) would "
                "be unused. Set it to 0 or leave it out.",
                key,
            )
    if resources.driver.process == "actor":
        refuse(
            "a stack trains in the command's process: resources.driver.process is 'actor'.",
            "resources.driver.process",
        )


def _stackable_connectors(connectors: list[NamedEntry], ppo: bool) -> bool:
    """Connectors a stack gives each seed its own of: a ``mean_std_filter`` updating its
    statistics (``rlplat.algorithms.stacked.filters``) and PPO's ``reward_scaling``
    (``rlplat.algorithms.stacked.rewards``), each at most once."""
    parts = dict(entry_parts(entry) for entry in connectors)
    stackable = {"mean_std_filter"} | ({"reward_scaling"} if ppo else set())
    return (
        len(parts) == len(connectors)
        and set(parts) <= stackable
        and "update_stats" not in parts.get("mean_std_filter", {})
    )


# What a stack's evaluation carries: each seed's greedy episodes, every evaluation_interval
# iterations, in the stack's process (its evaluation runner, rlplat.algorithms.stacked.runner).
STACKED_EVALUATION = {
    "evaluation_interval": "an interval of iterations, or null",
    "evaluation_duration": "a number of episodes per seed",
    "evaluation_duration_unit": "episodes",
    "evaluation_num_env_runners": "0",
    "evaluation_config": "explore: false and num_envs_per_env_runner",
}


def _check_evaluation(experiment: Experiment, refuse: Callable[..., None]) -> None:
    """A stack evaluates as a separate seed's run does by default (greedy episodes between
    iterations, in the trial's process), each seed on envs of its own; other evaluation
    settings are refused, naming what it takes."""
    evaluation = experiment.evaluation
    config = evaluation.get("evaluation_config") or {}

    def not_carried(key: str, value: object) -> bool:
        return key != "num_envs_per_env_runner" and not (key == "explore" and value is False)

    checks = {
        **{key: True for key in evaluation if key not in STACKED_EVALUATION},
        "evaluation_duration": not isinstance(evaluation.get("evaluation_duration", 5), int),
        "evaluation_duration_unit": evaluation.get("evaluation_duration_unit", "episodes")
        != "episodes",
        "evaluation_num_env_runners": bool(evaluation.get("evaluation_num_env_runners")),
        **{f"evaluation_config.{key}": not_carried(key, value) for key, value in config.items()},
    }
    wrong = [key for key, given in checks.items() if given]
    if wrong:
        takes = "; ".join(f"{key}: {value}" for key, value in STACKED_EVALUATION.items())
        refuse(
            f"a stack evaluates each seed with greedy episodes in its own process; it does not "
            f"carry evaluation.{wrong[0]} as given. It takes {takes}. Change or leave out "
            f"evaluation.{wrong[0]}, or leave stacked out.",
            f"evaluation.{wrong[0]}",
        )


DEFAULT_CAPACITY = 1_000_000  # RLlib's SAC and rlplat's TD3 replay capacity


def _check_replay_fits(
    experiment: Experiment, obs: gym.Space, actions: gym.Space, refuse: Callable[..., None]
) -> None:
    """An off-policy stack holds every seed's replay in one process (allocated in full at the
    first sample, as float32 columns: observation, next observation, action, reward,
    terminated, truncated): refused where that would take more than half of this machine's
    memory."""
    seeds = len(experiment.seed_list() or [])
    buffer = experiment.training.get("replay_buffer_config") or {}
    capacity = int(buffer.get("capacity", DEFAULT_CAPACITY))
    action_floats = 1 if isinstance(actions, gym.spaces.Discrete) else gym.spaces.flatdim(actions)
    floats = 2 * gym.spaces.flatdim(obs) + action_floats + 3
    needed = seeds * capacity * floats * 4
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > total / 2:
        refuse(
            f"the stack's replay memory holds every seed's transitions in this process: {seeds} "
            f"seeds x {capacity:,} transitions x {floats} floats x 4 bytes = "
            f"{needed / 2**30:.1f} GiB, more than half of this machine's "
            f"{total / 2**30:.1f} GiB. Lower training.replay_buffer_config.capacity, stack fewer "
            "seeds, or leave stacked out (separate trials hold one seed's replay each).",
            "training.replay_buffer_config.capacity",
        )


def stack_processes(experiment: Experiment, nodes: list[Node] | None) -> int:
    """How many processes a stack's seeds are split over (``rlplat.run.stack_parts``):
    ``resources.driver.cpus``, else every CPU of the machine, at most one per seed."""
    cpus = experiment.resources.driver.cpus
    if cpus is None:
        cpus = sum(node.total.get("CPU", 0.0) for node in nodes or [])
    return max(1, min(int(cpus), len(experiment.seeds or [1])))
