"""The prepare stage: a loaded experiment becomes the checked, immutable spec of a run.

``prepare`` does, once and in this order: resource preferences resolved against the cluster
(when one is given), the seed drawn, the algorithm's name made canonical, the env built and
checked, the team view's global state resolved (QMIX), the RLlib config built and validated,
``init.checkpoint`` found, every search-space candidate checked, the searcher and scheduler made,
and the trials placed on the cluster's nodes. ``rlplat plan``, ``rlplat train --dry-run`` and
``rlplat train`` all use what it returns.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from rich.console import Console
from rich.table import Table

from rlplat.algorithms.memory import MEMORY
from rlplat.algorithms.registry import (
    algorithm_record,
    canonical_name,
    get_algorithm_class,
    has_central_critic,
    is_joint_algorithm,
    is_team_algorithm,
    names_where,
)
from rlplat.cluster.placement import (
    Node,
    Plan,
    describe_nodes,
    format_bundle,
    local_machine,
    make_plan,
    only_this_machine,
    trial_bundles,
)
from rlplat.cluster.preferences import PREFERENCE_GROUPS, ResourceChoice, resolve_preferences
from rlplat.environments.connectors import check_connectors
from rlplat.environments.contract import RANDOM_STEPS
from rlplat.environments.global_state import GlobalStateError, resolve_source
from rlplat.environments.kinds import is_image
from rlplat.environments.make import EnvInfo, check_env
from rlplat.errors import ConfigError, UserError
from rlplat.experiment.load import (
    LoadedExperiment,
    Locator,
    experiment_from_data,
    merge_into,
    trial_experiment,
    validate,
)
from rlplat.experiment.schema import Experiment, MultiAgentSpec, TuneSpec
from rlplat.experiment.spaces import Space, substitute
from rlplat.experiment.yaml_io import dump_yaml
from rlplat.prepare.init_checkpoint import resolve_init_checkpoint
from rlplat.prepare.metric_paths import check_metric_paths
from rlplat.prepare.observations import with_observation_defaults
from rlplat.prepare.offline import check_offline
from rlplat.prepare.probe import ProbeResult, probe_training
from rlplat.prepare.search import SearchSetup, search_setup
from rlplat.prepare.stacked import check_stacked, stack_processes
from rlplat.rllib.build import (
    IGNORED_BESIDE,
    build_algorithm_config,
    check_rllib_sections,
    effective_settings,
    resource_request,
    team_state_source,
)
from rlplat.rllib.multi_agent import PolicyMapping


@dataclass(frozen=True)
class PreparedRun:
    """Everything a run needs, checked and built once; nothing here changes afterwards.

    ``experiment`` is final: the seed actually used, the algorithm's registered name, the
    absolute ``init.checkpoint``, the resolved team state and the winning ``prefer`` entries.
    """

    experiment: Experiment
    locate: Locator
    spaces: list[Space]
    env: EnvInfo
    algo_config: AlgorithmConfig
    search: SearchSetup
    choices: list[ResourceChoice] = field(default_factory=list)
    plan: Plan | None = None  # None when prepared without a cluster
    probe: ProbeResult | None = None  # None in a trial's own build (the driver probed)
    notes: tuple[str, ...] = ()  # defaults rlplat chose for this env, one line each

    def resolved(self) -> dict[str, Any]:
        """The experiment with every default filled in and its search spaces, as the run's
        ``experiment.yaml`` keeps it (``rlplat train --resume`` reads it back)."""
        return _resolved(self.experiment, self.algo_config, self.spaces)

    def record(self) -> dict[str, Any]:
        """What run.json keeps: the nodes seen at launch, the choices, the bundles."""
        plan = self.plan
        return {
            "nodes": [
                {"node_id": n.node_id, "address": n.address, "head": n.head, "resources": n.total}
                for n in (plan.nodes if plan else [])
            ],
            "resource_choices": [asdict(choice) for choice in self.choices],
            "placement_strategy": plan.strategy if plan else None,
            "trial_bundles": [asdict(bundle) for bundle in plan.bundles] if plan else [],
            "sampling_loop": self.probe.sampling if self.probe and self.probe.sampling else None,
            "learner_class": self.learner_class(),
        }

    def learner_class(self) -> str:
        """``module:Class`` of the learner the trials train with (the one the check built)."""
        learner = self.algo_config.learner_class
        return f"{learner.__module__}:{learner.__qualname__}"

    def learner_line(self) -> str:
        return f"Learning: {self.learner_class()}"

    def sampling_line(self) -> str | None:
        """The loop the trial's env runners sample with, as the probe's env runner chose it."""
        if self.probe is None or not self.probe.sampling:
            return None
        return f"Sampling: {self.probe.sampling}"


def prepare(
    loaded: LoadedExperiment,
    nodes: list[Node] | None = None,
    *,
    step_env: bool = True,
    probe: bool | None = None,
) -> PreparedRun:
    """Check and build a loaded experiment once, stage by stage in this order; with the
    cluster's ``nodes``, also resolve its ``prefer`` lists (first) and place its trials (last).
    ``step_env=False`` builds the env without stepping it through its contract check and
    without the probe (a trial's own build: the driver checked); ``probe`` (default:
    ``step_env``) builds the module and computes one update."""
    draft = _Draft(loaded, loaded.locate, loaded.experiment, nodes)
    _resolve_preferences(draft)
    _settle_name_and_seed(draft)
    _resolve_env(draft, contract=step_env)
    _check_env_against_algorithm(draft)
    _resolve_global_state(draft)
    _untold_self_play(draft)
    _machine_defaults(draft)
    _check_stacked(draft)
    _sequence_length(draft)
    _build_rllib_config(draft)
    if step_env if probe is None else probe:
        _probe(draft)
    _check_metric_paths(draft)
    _resolve_init_checkpoint(draft)
    _check_search(draft)
    _check_process(draft)
    _place(draft)
    return draft.freeze()


@dataclass
class _Draft:
    """The run as the stages fill it in; ``freeze`` makes the ``PreparedRun``."""

    loaded: LoadedExperiment
    locate: Locator
    experiment: Experiment
    nodes: list[Node] | None
    choices: list[ResourceChoice] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    env: EnvInfo | None = None
    algo_config: AlgorithmConfig | None = None
    probe: ProbeResult | None = None
    search: SearchSetup | None = None
    plan: Plan | None = None

    def freeze(self) -> PreparedRun:
        assert self.env and self.algo_config and self.search
        return PreparedRun(
            self.experiment,
            self.locate,
            self.loaded.spaces,
            self.env,
            self.algo_config,
            self.search,
            self.choices,
            self.plan,
            self.probe,
            tuple(self.notes),
        )


def _resolve_preferences(draft: _Draft) -> None:
    """Resource ``prefer`` lists resolved against the cluster's nodes (before anything is
    built from the resources)."""
    if draft.nodes is not None and _has_preferences(draft.experiment):
        draft.loaded, draft.choices = _with_preferences(draft.loaded, draft.nodes)
        draft.experiment = draft.loaded.experiment


def _settle_name_and_seed(draft: _Draft) -> None:
    """The algorithm's registered name, the seed actually used (so the run can be repeated) and
    the seeds themselves, as the run's experiment.yaml keeps them."""
    experiment = _named(draft.experiment, draft.locate)
    if experiment.seed is None:
        experiment = experiment.model_copy(update={"seed": random.randrange(2**31)})
    if experiment.seeds is not None:
        experiment = experiment.model_copy(update={"seeds": experiment.seed_list()})
    draft.experiment = experiment


def _resolve_env(draft: _Draft, *, contract: bool) -> None:
    """The env built (and stepped through its contract), then the defaults that depend on it:
    observations RLlib cannot encode, env runners that fit the CPUs."""
    experiment, locate = draft.experiment, draft.locate
    checked = {
        "needs_frames": experiment.video.every > 0,
        "contract": contract,
        # Self-play's check that the game is competitive reads the sides' rewards in these
        # steps: board games rarely end within the usual 32.
        "random_steps": SELF_PLAY_CHECK_STEPS if _self_play(experiment) else RANDOM_STEPS,
    }
    env = check_env(experiment.env, locate, **checked)
    defaults = with_observation_defaults(experiment, env)
    experiment, fitted = _fit_env_runners(defaults.experiment, draft.nodes)
    experiment, threaded = _fit_driver_cpus(experiment, env, draft.nodes, draft.loaded.spaces)
    fitted = (*fitted, *threaded)
    if defaults.wrapped:  # the env as training will see it, checked again
        env = check_env(experiment.env, locate, **checked)
    draft.experiment, draft.env = experiment, env
    draft.notes += [*env.check_notes, *defaults.notes, *fitted]


def _check_env_against_algorithm(draft: _Draft) -> None:
    """The env's kind and spaces fit the algorithm and the sections that depend on them; the
    offline dataset matches the env."""
    assert draft.env is not None
    _check_env_fits(draft.experiment, draft.env, draft.locate)
    draft.experiment = check_offline(draft.experiment, draft.env, draft.locate)


def _resolve_global_state(draft: _Draft) -> None:
    """The global state a team algorithm's mixer or a centralised critic reads, named in
    ``training.global_state``."""
    experiment, env, locate = draft.experiment, draft.env, draft.locate
    assert env is not None
    if is_team_algorithm(experiment.algorithm):
        training = {**experiment.training, "global_state": team_state_source(experiment, locate)}
        experiment = experiment.model_copy(update={"training": training})
    if has_central_critic(experiment.algorithm):
        training = {**experiment.training, "global_state": _central_state(experiment, env, locate)}
        experiment = experiment.model_copy(update={"training": training})
    draft.experiment = experiment


def _self_play(experiment: Experiment) -> bool:
    return experiment.multi_agent is not None and experiment.multi_agent.self_play is not None


def _untold_self_play(draft: _Draft) -> None:
    """A note where self-play's check that the game is competitive (the sides' rewards in the
    env check's random steps) had nothing to go on: no random step rewarded anyone."""
    env = draft.env
    if not _self_play(draft.experiment) or env is None:
        return
    if any(reward for step in env.random_rewards for reward in step.values()):
        return
    seen = (
        f"no agent was rewarded in the env check's {len(env.random_rewards)} random steps"
        if env.random_rewards
        else "the env check did not step the env (env.check: false)"
    )
    draft.notes.append(
        f"multi_agent.self_play: {seen}, so whether the two sides play against each other "
        "could not be told (self-play needs a competitive game); the run goes on as written"
    )


def _machine_defaults(draft: _Draft) -> None:
    """The algorithm's settings for one machine that a single-agent experiment leaves out
    (``AlgorithmRecord.machine_defaults``): filled in, named with their source under
    ``defaults`` and in one note."""
    experiment, env = draft.experiment, draft.env
    assert env is not None
    wanted = algorithm_record(experiment.algorithm).machine_defaults
    if env.multi_agent or experiment.offline is not None or not wanted:
        return
    applied: dict[str, str] = {}
    images = is_image(env.observation_space)
    gpu = bool(experiment.resources.learners.gpus)
    # A default never overrides what the file says another way: RLlib would ignore the key the
    # file gives (train_batch_size) beside the default's (train_batch_size_per_learner).
    written_instead = {
        f"{section}.{used}": ignored
        for (section, ignored), used in IGNORED_BESIDE.items()
        if ignored in (experiment.rllib_sections().get(section) or {})
    }
    for default in wanted:
        if (default.mlp_only and images) or (default.cpu_only and gpu):
            continue
        if default.path in written_instead:
            continue
        filled = _fill_default(experiment, default.path.split("."), default.value)
        if filled is not None:
            experiment = filled
            applied[default.path] = default.source
    if applied:
        values = [f"{d.path}={d.value}" for d in wanted if d.path in applied]
        draft.experiment = experiment.model_copy(
            update={"defaults": {**experiment.defaults, **applied}}
        )
        draft.notes.append(
            f"{experiment.algorithm} settings for one machine, where the file leaves them out "
            f"({', '.join(values)}; their sources: defaults in experiment.yaml, "
            "docs/algorithms.md)"
        )


def _sequence_length(draft: _Draft) -> None:
    """A memory (RLlib's LSTM, rlplat's GRU or attention) without ``max_seq_len`` trains on
    sequences of RLlib's default length, written into the experiment and said in a note."""
    experiment = draft.experiment
    model_config = experiment.rl_module.get("model_config") or {}
    if not isinstance(model_config, dict):
        return
    remembers = model_config.get("use_lstm") is True or MEMORY in model_config
    if not remembers or "max_seq_len" in model_config:
        return
    length = DefaultModelConfig.max_seq_len
    rl_module = {**experiment.rl_module, "model_config": {**model_config, "max_seq_len": length}}
    draft.experiment = experiment.model_copy(update={"rl_module": rl_module})
    draft.notes.append(
        f"rl_module.model_config.max_seq_len: {length} (the memory trains on sequences of "
        "this many steps: RLlib's DefaultModelConfig default; set it to choose)"
    )


def _fill_default(experiment: Any, keys: list[str], value: Any) -> Any:
    """``experiment`` (a section model or a dict) with ``value`` at the key path ``keys``, or
    None where the experiment gives that key (or a value that is not a section above it)."""
    key, rest = keys[0], keys[1:]
    if isinstance(experiment, dict):
        current = experiment.get(key)
    else:
        current = getattr(experiment, key)
    if not rest:
        if current is not None or (isinstance(experiment, dict) and key in experiment):
            return None
        filled = copy.deepcopy(value)
    else:
        if current is None and isinstance(experiment, dict):
            current = {}
        if current is None or isinstance(current, (str, int, float, list)):
            return None
        filled = _fill_default(current, rest, value)
        if filled is None:
            return None
    if isinstance(experiment, dict):
        return {**experiment, key: filled}
    return experiment.model_copy(update={key: filled})


def _check_stacked(draft: _Draft) -> None:
    """``stacked: true``: what one stacked model of the seeds cannot train is refused."""
    assert draft.env is not None
    check_stacked(draft.experiment, draft.env, draft.loaded.spaces, draft.locate)


def _build_rllib_config(draft: _Draft) -> None:
    assert draft.env is not None
    draft.algo_config = build_algorithm_config(draft.experiment, draft.locate, draft.env)


def _probe(draft: _Draft) -> None:
    """The module built on the env's spaces, a few env steps sampled, one update computed."""
    assert draft.env is not None and draft.algo_config is not None
    experiment = draft.experiment
    if not experiment.stacked:
        draft.probe = probe_training(experiment, draft.algo_config, draft.env, draft.locate)
        return
    # One seed's PPO: the networks, spaces and losses each seed of the stack has.
    apart = experiment.model_copy(update={"stacked": False, "seeds": None})
    config = build_algorithm_config(apart, draft.locate, draft.env)
    probe = probe_training(apart, config, draft.env, draft.locate)
    seeds, envs = len(experiment.seeds or []), draft.algo_config.num_envs_per_env_runner
    processes = stack_processes(experiment, draft.nodes or local_machine())
    sampling = (
        f"rlplat's stacked env runner ({seeds} seeds x {envs} envs in {processes} "
        f"processes: this one and {processes - 1} Ray actor(s) on this machine)"
        if processes > 1
        else f"rlplat's stacked env runner ({seeds} seeds x {envs} envs in this process)"
    )
    draft.probe = replace(probe, sampling=sampling)


def _check_metric_paths(draft: _Draft) -> None:
    assert draft.env is not None and draft.algo_config is not None
    check_metric_paths(draft.experiment, draft.algo_config, draft.env, draft.probe, draft.locate)


def _resolve_init_checkpoint(draft: _Draft) -> None:
    """``init.checkpoint`` as the absolute checkpoint directory whose weights fit the modules."""
    experiment = draft.experiment
    if experiment.init.checkpoint:
        path = resolve_init_checkpoint(experiment.init.checkpoint, draft.algo_config, draft.locate)
        init = experiment.init.model_copy(update={"checkpoint": path})
        draft.experiment = experiment.model_copy(update={"init": init})


def _check_search(draft: _Draft) -> None:
    """Every search-space candidate's RLlib keys checked; the searcher and scheduler made."""
    loaded, locate = draft.loaded, draft.locate
    assert draft.algo_config is not None
    for space in loaded.spaces:
        for value in space.candidates():
            candidate = validate(loaded.concrete({space.path: value}), locate)
            check_rllib_sections(candidate, type(draft.algo_config), locate)
    resolved = _resolved(draft.experiment, draft.algo_config, loaded.spaces)
    draft.search = search_setup(draft.experiment, resolved, loaded.spaces, locate)


def _check_process(draft: _Draft) -> None:
    """``resources.driver.process: command`` with several trials or custom resources is refused
    here, before Ray starts; whether the cluster is this one machine is known only after."""
    experiment = draft.experiment
    obstacles = _in_command_obstacles(experiment, draft.loaded.spaces)
    if obstacles and experiment.resources.driver.process == "command":
        raise _not_in_command(draft.locate, obstacles)


def _place(draft: _Draft) -> None:
    """With the cluster's nodes: one trial's bundles and where the trials go."""
    if draft.nodes is None:
        return
    experiment = draft.experiment
    tune_spec = experiment.tune or TuneSpec()
    algo_cls = get_algorithm_class(experiment.algorithm)
    bundles, strategy = trial_bundles(draft.algo_config, algo_cls)
    trials = 1 if experiment.stacked else trial_count(experiment, draft.loaded.spaces)
    draft.plan = make_plan(bundles, strategy, draft.nodes, trials, tune_spec.max_concurrent)


SELF_PLAY_CHECK_STEPS = 1000  # random steps of a self-play env's check (see _resolve_env)


def _fit_env_runners(
    experiment: Experiment, nodes: list[Node] | None
) -> tuple[Experiment, tuple[str, ...]]:
    """With no ``resources.env_runners.count``, as many remote env runners as the algorithm's
    default that fit beside the driver on the cluster's CPUs (this machine's without one), so
    a first file runs where it is run. The count chosen is written into the experiment."""
    runners = experiment.resources.env_runners
    offline = algorithm_record(experiment.algorithm).offline
    if runners.count is not None or offline or experiment.stacked:  # a stack samples itself
        return experiment, ()
    default = get_algorithm_class(experiment.algorithm).get_default_config().num_env_runners
    per_runner = runners.cpus if runners.cpus is not None else 1.0
    driver = experiment.resources.driver.cpus
    driver = 1.0 if driver is None else driver
    cpus = sum(n.total.get("CPU", 0.0) for n in nodes or local_machine())
    count = default
    while count > 0 and driver + count * per_runner > cpus:
        count -= 1
    if count == default:
        return experiment, ()
    sampler = ""
    if count == 1 and algorithm_record(experiment.algorithm).synchronous_learner:
        count = 0
        sampler = (
            "; the driver samples: one remote env runner of a learner that waits for it is no "
            "faster and adds a round trip per call"
        )
    fitted = runners.model_copy(update={"count": count})
    resources = experiment.resources.model_copy(update={"env_runners": fitted})
    where = "the cluster has" if nodes and len(nodes) > 1 else "this machine has"
    note = (
        f"resources.env_runners.count: {count} ({experiment.algorithm}'s default of {default} "
        f"env runners and the driver need {driver + default * per_runner:g} CPUs, {where} "
        f"{cpus:g}{sampler}; set the count to choose)"
    )
    return experiment.model_copy(update={"resources": resources}), (note,)


def _fit_driver_cpus(
    experiment: Experiment, env: EnvInfo, nodes: list[Node] | None, spaces: list[Space]
) -> tuple[Experiment, tuple[str, ...]]:
    """With no ``resources.driver.cpus``, one trial that samples in its own process on one
    machine and has threads to use them (EnvPool's envs, a CNN's passes) takes the machine's
    free CPUs: torch and EnvPool get as many threads. An MLP's updates are no faster with two
    torch threads than with one (docs/performance.md), and searches and seeds keep one CPU per
    trial. The count chosen is written into the experiment."""
    resources = experiment.resources
    driver = resources.driver
    threaded = experiment.env.backend == "envpool" or (
        env.agents is None and is_image(env.observation_space)
    )
    if (
        not nodes
        or not threaded
        or driver.cpus is not None
        or driver.custom
        or driver.process == "actor"
        or resources.env_runners.count != 0
        or experiment.evaluation.get("evaluation_num_env_runners")  # those need CPUs too
        or trial_count(experiment, spaces) != 1
        or not only_this_machine(nodes)
    ):
        return experiment, ()
    cpus = int(nodes[0].available.get("CPU", 0.0))
    if cpus <= 1:
        return experiment, ()
    chosen = driver.model_copy(update={"cpus": float(cpus)})
    users = (
        "torch and EnvPool get" if experiment.env.backend == "envpool" else "torch (the CNN) gets"
    )
    note = (
        f"resources.driver.cpus: {cpus} (one trial sampling in its own process takes this "
        f"machine's {cpus} free CPUs: {users} {cpus} threads; set it to choose)"
    )
    return experiment.model_copy(
        update={"resources": resources.model_copy(update={"driver": chosen})}
    ), (note,)


def _has_preferences(experiment: Experiment) -> bool:
    return any(getattr(experiment.resources, group).prefer for group in PREFERENCE_GROUPS)


def _with_preferences(
    loaded: LoadedExperiment, nodes: list[Node]
) -> tuple[LoadedExperiment, list[ResourceChoice]]:
    """The experiment with its ``prefer`` lists resolved on ``nodes``. A group's unset fields
    are RLlib's defaults for the algorithm (what the build would give them)."""
    algo_cls = get_algorithm_class(_named(loaded.experiment, loaded.locate).algorithm)
    defaults = effective_settings(algo_cls.get_default_config())["resources"]
    data = copy.deepcopy(loaded.data)
    resources = data.setdefault("resources", {})
    for group in PREFERENCE_GROUPS:
        given = getattr(loaded.experiment.resources, group).model_dump(mode="json")
        resources[group] = {**defaults[group], **{k: v for k, v in given.items() if v is not None}}
    data, choices = resolve_preferences(data, nodes)
    return experiment_from_data(data, loaded.locate), choices


def _named(experiment: Experiment, locate: Locator) -> Experiment:
    """The experiment with its algorithm under the registered spelling."""
    try:
        name = canonical_name(experiment.algorithm)
    except UserError as exc:
        raise ConfigError(str(exc), location=locate("algorithm"), key="algorithm") from None
    return experiment.model_copy(update={"algorithm": name})


def _check_env_fits(experiment: Experiment, env: EnvInfo, locate: Locator) -> None:
    """The sections that depend on the env's kind (single- or multi-agent) fit it."""
    _check_action_spaces(experiment, env, locate)
    if is_joint_algorithm(experiment.algorithm):
        _check_joint_experiment(experiment, env, locate)
    if is_team_algorithm(experiment.algorithm):
        _check_team_experiment(experiment, env.multi_agent, locate)
    if has_central_critic(experiment.algorithm):
        _check_central_experiment(experiment, env, locate)
    if env.multi_agent:
        if experiment.connectors:
            raise ConfigError(
                "connectors are for single-agent envs; for PettingZoo envs use the SuperSuit "
                "wrappers in env.wrappers instead (normalize_obs_v0, frame_stack_v1).",
                location=locate("connectors"),
                key="connectors",
            )
        return
    if experiment.multi_agent is not None:
        raise ConfigError(
            f"{experiment.env.label!r} is a single-agent environment; multi_agent applies "
            "to PettingZoo environments (env.pettingzoo, or a factory returning one).",
            location=locate("multi_agent"),
            key="multi_agent",
        )
    check_connectors(
        experiment.connectors,
        env.observation_space,
        env.action_space,
        experiment.algorithm,
        locate,
        names_where,
    )


def _check_action_spaces(experiment: Experiment, env: EnvInfo, locate: Locator) -> None:
    """An algorithm that acts in Box spaces only gets Box actions; one that acts in Discrete
    spaces only gets Discrete actions."""
    record = algorithm_record(experiment.algorithm)
    spaces = env.action_spaces if env.multi_agent else {None: env.action_space}
    for agent, space in spaces.items():
        whose = f"agent {agent!r} of " if agent is not None else ""
        if record.discrete_alternative and not isinstance(space, gym.spaces.Box):
            needed, other, alternative = (
                "a continuous (Box)",
                "discrete",
                record.discrete_alternative,
            )
        elif record.box_alternative and not isinstance(space, gym.spaces.Discrete):
            needed, other, alternative = "a Discrete", "continuous", record.box_alternative
        else:
            continue
        raise ConfigError(
            f"{experiment.algorithm} needs {needed} action space; {whose}"
            f"{experiment.env.label!r} has {space}. For {other} actions use {alternative}.",
            location=locate("algorithm"),
            key="algorithm",
        )


def _check_joint_experiment(experiment: Experiment, env: EnvInfo, locate: Locator) -> None:
    """A joint algorithm (MADDPG) needs a parallel multi-agent env of Box observations, Box or
    Discrete actions, and one kind of action per policy."""
    name = experiment.algorithm
    problem = _simultaneous_agents_problem(
        experiment,
        env,
        "critics that see all of them",
        "critics need every agent's action at every step",
        "a single-agent algorithm (TD3 or SAC, DQN or PPO)",
    )
    if problem is None:
        mapping = PolicyMapping((experiment.multi_agent or MultiAgentSpec()).policies)
        kinds: dict[str, dict[bool, str]] = {}
        for agent in env.agents or []:
            observation, action = env.observation_spaces[agent], env.action_spaces[agent]
            if not isinstance(observation, gym.spaces.Box):
                problem = (
                    f"{name}'s actors read Box observations; agent {agent!r} has {observation}."
                )
            elif not isinstance(action, (gym.spaces.Box, gym.spaces.Discrete)):
                problem = f"{name} acts in Box or Discrete spaces; {agent!r} has {action}."
            else:
                discrete = isinstance(action, gym.spaces.Discrete)
                kinds.setdefault(str(mapping(agent)), {}).setdefault(discrete, agent)
            if problem:
                break
        mixed = next((p for p, k in kinds.items() if len(k) == 2), None)
        if problem is None and mixed is not None:
            problem = (
                f"policy {mixed!r} would act for agents with discrete actions "
                f"({kinds[mixed][True]}) and continuous ones ({kinds[mixed][False]}); one actor "
                "has one kind of output. Give them separate policies (policies: independent, "
                "or patterns)."
            )
    if problem:
        raise ConfigError(problem, location=locate("algorithm"), key="algorithm")


def _check_central_experiment(experiment: Experiment, env: EnvInfo, locate: Locator) -> None:
    """An algorithm with centralised critics (MAPPO) needs a multi-agent env whose agents all
    act at every step (the global state is the team's at one step)."""
    problem = _simultaneous_agents_problem(
        experiment,
        env,
        "a critic on their global state",
        "critic reads the whole team's state at each step",
        "PPO for a single agent",
    )
    if problem:
        raise ConfigError(problem, location=locate("algorithm"), key="algorithm")


def _simultaneous_agents_problem(
    experiment: Experiment, env: EnvInfo, critics: str, needs: str, single_agent: str
) -> str | None:
    """Why an algorithm whose ``critics`` see several agents cannot train on ``env``: it is
    single-agent, or turn-based where the critic ``needs`` every agent's step; None if it can."""
    name, label = experiment.algorithm, experiment.env.label
    if not env.multi_agent:
        return (
            f"{name} trains several agents with {critics}, but {label!r} is a single-agent "
            "environment. Use a PettingZoo environment (env.pettingzoo, env.gymma, or a factory "
            f"returning one), or {single_agent}."
        )
    if env.turn_based:
        return (
            f"{name}'s {needs}, but {label!r} is turn-based (PettingZoo's AEC API: one agent "
            "acts per step). Use a parallel env, or PPO for turn-based games."
        )
    return None


def _central_state(experiment: Experiment, env: EnvInfo, locate: Locator) -> str:
    """``training.global_state`` resolved: ``env`` or ``observations``."""
    wanted = experiment.training.get("global_state", "auto")
    try:
        return resolve_source(wanted, env.state_space)
    except GlobalStateError as exc:
        key = "training.global_state"
        raise ConfigError(
            f"{experiment.algorithm}'s critic input for {experiment.env.label!r}: {exc}.",
            location=locate(key),
            key=key,
        ) from None


def _check_team_experiment(experiment: Experiment, multi_agent: bool, locate: Locator) -> None:
    """A team algorithm (QMIX) needs a multi-agent env and maps every agent to its one network."""
    name = experiment.algorithm
    if not multi_agent:
        raise ConfigError(
            f"{name} learns for a team of agents, but {experiment.env.label!r} is a single-agent "
            "environment. Use a PettingZoo environment (env.pettingzoo, or a factory returning "
            "one), or DQN for a single agent.",
            location=locate("algorithm"),
            key="algorithm",
        )
    if experiment.multi_agent is not None:
        raise ConfigError(
            f"{name} shares one agent network among all agents (each agent's input carries its "
            "one-hot id), so multi_agent policy mappings do not apply: remove the section. "
            "training.mixer chooses qmix, vdn or none (independent Q-learning).",
            location=locate("multi_agent"),
            key="multi_agent",
        )


def _resolved(
    experiment: Experiment, algo_config: AlgorithmConfig, spaces: list[Space]
) -> dict[str, Any]:
    resolved = experiment.model_dump(mode="json")
    # absent: one trial, one seed, no defaults, seeds trained apart
    for optional in ("tune", "seeds", "defaults", "stacked"):
        if resolved.get(optional) in (None, {}, False):
            resolved.pop(optional, None)
    merge_into(resolved, effective_settings(algo_config))
    return substitute(resolved, {s.path: s.to_yaml() for s in spaces})


# The key of a trial's config that holds the driver's env (``trial_config``); Tune's "__" keys
# are no part of the experiment (``trial_experiment`` leaves them out).
DRIVER_ENV = "__driver_env__"


def trial_algorithm_config(config: dict[str, Any]) -> AlgorithmConfig:
    """The RLlib config for one trial's experiment (Tune's ``config``: the resolved experiment
    with concrete values where the file had search spaces), built in the trial's own process.

    Where the config carries what the driver's env check found (``trial_config`` puts it there
    for every trial whose parameters leave ``env`` alone), the config is built from the
    experiment alone: the settings that follow from the trial's parameters, then RLlib's config;
    no env is built, reset or checked, nothing is probed and no dataset or checkpoint is read.
    Without it the trial builds its env, unstepped, through the driver's stages.
    """
    data = trial_experiment(config)
    loaded = experiment_from_data(data, Locator(f"trial experiment ({data.get('name')})"))
    env = config.get(DRIVER_ENV)
    if env is None:
        return prepare(loaded, step_env=False).algo_config
    draft = _Draft(loaded, loaded.locate, loaded.experiment, None, env=env)
    _settle_name_and_seed(draft)
    _resolve_global_state(draft)
    _machine_defaults(draft)
    _sequence_length(draft)
    _build_rllib_config(draft)
    assert draft.algo_config is not None
    return draft.algo_config


def trial_env(run: PreparedRun) -> EnvInfo | None:
    """The driver's env for the trials to build from, unless a search space changes ``env``
    (then each trial's env may differ, and the trial builds its own)."""
    if any(space.path[0] == "env" for space in run.spaces):
        return None
    return run.env


def trial_config(run: PreparedRun) -> dict[str, Any]:
    """What every trial is constructed with, by Tune (its ``param_space``) or by rlplat's loop:
    the experiment with its search spaces, and the driver's env where all trials share it
    (``trial_env``). Tune builds a trial actor from its config alone, so the env travels there,
    pickled with the config, and no trial builds or checks it again."""
    env = trial_env(run)
    space = run.search.param_space
    return space if env is None else {**space, DRIVER_ENV: env}


# Search spaces under these keys can change a trial's resource request: each trial's is then
# built from its own config instead of taken from the prepared run.
RESOURCE_SECTIONS = ("algorithm", "resources", "evaluation", "offline", "offline_data", "learners")


def trial_resources(run: PreparedRun) -> Any:
    """What Tune reserves for each trial: the prepared config's request (with an offline run's
    data pipeline), or, where a search space can change it, a function of the trial's config."""
    algo_cls = get_algorithm_class(run.experiment.algorithm)
    if any(space.path[0] in RESOURCE_SECTIONS for space in run.spaces):
        return lambda config: resource_request(trial_algorithm_config(config), algo_cls)
    return resource_request(run.algo_config, algo_cls)


def trial_count(experiment: Experiment, spaces: list[Space]) -> int:
    """Trials the experiment runs in all: num_samples for each point of its grid, each on every
    seed of ``seeds``."""
    tune_spec = experiment.tune or TuneSpec()
    grid = math.prod(len(space.args) for space in spaces if space.kind == "grid")
    return tune_spec.num_samples * grid * len(experiment.seed_list() or [None])


def runs_in_command(run: PreparedRun) -> bool:
    """Whether the trial's algorithm runs inside the command's own process
    (``resources.driver.process``): only one trial on one machine (an embedded Ray, or a cluster
    of one node that this process runs on), with no custom resources for the algorithm's
    process; elsewhere ``command`` is a UserError, ``auto`` a trial actor."""
    experiment = run.experiment
    if experiment.resources.driver.process == "actor":
        return False
    nodes = run.plan.nodes if run.plan else []
    obstacles = _in_command_obstacles(experiment, run.spaces)
    if not only_this_machine(nodes):
        obstacles.append("its Ray cluster is not one node on this machine")
    if obstacles and experiment.stacked:
        raise UserError(
            f"{run.locate('stacked')}: stacked seeds train in the rlplat command's own process "
            f"on one machine, but {'; '.join(obstacles)}. Leave stacked out to train the seeds "
            "as separate trials."
        )
    if obstacles and experiment.resources.driver.process == "command":
        raise _not_in_command(run.locate, obstacles)
    return not obstacles


def _in_command_obstacles(experiment: Experiment, spaces: list[Space]) -> list[str]:
    """What keeps the experiment's trial out of the command's process, known before Ray."""
    trials = 1 if experiment.stacked else trial_count(experiment, spaces)  # a stack is one
    custom = experiment.resources.driver.custom
    obstacles = [
        f"it runs {trials} trials (a search or several seeds)" if trials > 1 else "",
        "it has search spaces or seeds, whose values Tune draws"
        if trials == 1 and not experiment.stacked and (spaces or experiment.seeds)
        else "",
        f"resources.driver.custom asks for {custom}" if custom else "",
    ]
    return [reason for reason in obstacles if reason]


def _not_in_command(locate: Locator, obstacles: list[str]) -> UserError:
    return UserError(
        f"{locate('resources.driver.process')}: 'command' runs one trial inside the "
        f"rlplat command's own process on one machine, but {'; '.join(obstacles)}. Use "
        "'auto' (a Tune trial actor wherever one is needed) or 'actor'."
    )


def storage_note(run: PreparedRun) -> str | None:
    """On several nodes, trials write checkpoints from wherever they run: say where that must be."""
    if len(run.plan.nodes) < 2:
        return None
    return (
        f"{len(run.plan.nodes)} nodes: output_dir ({run.experiment.output_dir}) must be a "
        "directory every node mounts at the same path (NFS, a shared volume); Tune cannot "
        "checkpoint trials on other nodes into a path only this machine has."
    )


def refuse_if_impossible(run: PreparedRun) -> None:
    """A run that would stay PENDING forever is a user error, said before anything starts."""
    plan = run.plan
    if plan.fits:
        return
    nodes = describe_nodes(plan.nodes)
    raise UserError(
        f"{run.locate('resources')}: no trial can start on this Ray cluster: "
        + "; ".join(plan.problems)
        + f". The cluster's nodes: {nodes}. Lower the demand under resources (count, cpus, gpus, "
        "custom; count 0 samples in the algorithm's own process), add a prefer list that falls "
        "back to what the nodes have, or join a cluster that has it with --address (see "
        "docs/cluster.md)."
    )


def print_dry_run(
    loaded: LoadedExperiment,
    experiment_file: Path,
    console: Console,
    nodes: list[Node] | None = None,
) -> None:
    """``rlplat train --dry-run``: the resolved experiment as YAML, and what was checked; with
    ``nodes`` (the machine an embedded Ray would have), also whether a trial fits there."""
    run = prepare(loaded, nodes)
    if nodes is not None:
        refuse_if_impossible(run)
    console.print(dump_yaml(run.resolved()), highlight=False, end="")
    for note in run.notes:
        console.print(f"# default: {note}", highlight=False)
    for line in (run.sampling_line(), run.learner_line()):
        if line:
            console.print(f"# {line}", highlight=False)
    stepped = "built and stepped" if loaded.experiment.env.check.any_on() else "built"
    probed = f", {run.probe.describe()}" if run.probe is not None else ""
    console.print(
        f"# {experiment_file} is valid: every key checked, the env {stepped}, the RLlib "
        f"config built{probed}. Nothing was run with Ray.",
        highlight=False,
    )


def print_plan(run: PreparedRun, console: Console) -> None:
    """The bundles of one trial, the nodes, where the trial goes and how many run at once."""
    plan = run.plan
    for choice in run.choices:
        console.print(choice.describe(), highlight=False)
    for note in run.notes:
        console.print(f"Default: {note}", highlight=False)
    bundles = Table(title=f"Bundles of one trial (placement {plan.strategy})", title_justify="left")
    for column in ("#", "role", "set by", "resources", "node"):
        bundles.add_column(column)
    for index, bundle in enumerate(plan.bundles):
        node = plan.nodes[plan.placement[index]].label if plan.placement else "-"
        bundles.add_row(str(index), bundle.role, bundle.key, format_bundle(bundle.resources), node)
    console.print(bundles)
    nodes = Table(title=f"Cluster: {len(plan.nodes)} node(s)", title_justify="left")
    for column in ("node", "resources", "free now"):
        nodes.add_column(column)
    for node in plan.nodes:
        nodes.add_row(node.label, format_bundle(node.total), format_bundle(node.available))
    console.print(nodes)
    note = storage_note(run)
    if note:
        console.print(f"[yellow]{note}[/yellow]", highlight=False)
    if not plan.fits:
        return
    if plan.undecided:
        console.print(
            "Fit: undecided (too many bundle/node combinations to check); Ray may still place it.",
            highlight=False,
        )
        return
    limit = (
        f", tune.max_concurrent {plan.max_concurrent}"
        if plan.max_concurrent and plan.max_concurrent < plan.trials
        else ""
    )
    console.print(
        f"Fits: yes. Trials: {plan.trials}; at once: {plan.concurrent} on this cluster{limit}; "
        f"{plan.startable_now} could start on the resources free now.",
        highlight=False,
    )
