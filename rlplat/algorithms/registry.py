"""Every algorithm ``algorithm:`` accepts, each with the one record of what the stages need to know.

An algorithm joins with one ``register_algorithm(...)`` call at the bottom of this file: its name,
where its class lives (RLlib's own are found in RLlib's registry) and its traits. Validation,
refusals, the RLlib config build, checkpoints, export and the docs' algorithm table ask the
record; no stage matches algorithm names. The class is imported only when the algorithm is used.

A *team* algorithm learns one policy for all agents of a cooperative multi-agent env together
(value factorisation): it sees the env as one team agent (``rlplat.environments.team.TeamEnv``),
and exports its agent network (``rlplat.export.team``).

A *central* algorithm keeps one policy per ``multi_agent.policies`` entry, acting on its agents'
observations, with a critic that reads the env's global state
(``rlplat.environments.global_state``).

A *joint* algorithm keeps one policy per ``multi_agent.policies`` entry, but its critics see every
agent's observation and action at the same step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ray.rllib.algorithms.registry import ALGORITHMS

from rlplat.errors import UserError, allowed_list, did_you_mean
from rlplat.util.imports import import_object

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm import Algorithm

AgentView = Literal["agents", "team", "central", "joint"]


@dataclass(frozen=True)
class MachineDefault:
    """A setting rlplat gives a single-agent run that leaves it out: ``path`` is its dotted key
    in the experiment (under ``training``, ``env_runners`` or ``rl_module``), ``source`` where
    the value comes from (a reference implementation's default, in words)."""

    path: str
    value: Any
    source: str
    # Given only where RLlib's default encoder is its MLP (not for images), the one it sets.
    mlp_only: bool = False
    # Given only where the learner has no GPU (resources.learners.gpus unset or 0): a size the
    # reference runs on a GPU, cut to one a CPU trains at a useful speed.
    cpu_only: bool = False


@dataclass(frozen=True)
class AlgorithmRecord:
    """What rlplat knows about one algorithm, given once at registration."""

    name: str
    # ``module.path:Class`` of an algorithm rlplat writes; None: RLlib's registry has it.
    import_path: str | None = None
    # Learns from datasets (``offline:``) and never samples for training.
    offline: bool = False
    # Acts in Box spaces only: what to use for discrete actions instead.
    discrete_alternative: str | None = None
    # Acts in Discrete spaces only: what to use for continuous (Box) actions instead.
    box_alternative: str | None = None
    # The action spaces it acts in, for the docs (None: those its RLlib module supports).
    actions: str | None = None
    # ``module.path:Class`` of the RL module that stands in for the default one for policies
    # whose observations carry an action mask; None: action masks are refused.
    masked_module: str | None = None
    # ``multi_agent.random`` policies can stand beside its trained ones.
    random_policies: bool = False
    # The training keys of its own optimizers' learning rates (``training.optimizer`` is refused
    # with these); None: RLlib's one optimizer per module, which ``training.optimizer`` sets.
    own_rates: str | None = None
    # The attribute of the built algorithm that holds its replay memory; None: it keeps none.
    replay_memory: str | None = None
    # How it sees a multi-agent env: each policy its own agents, the team as one agent, each
    # policy its own agents with critics on the global state, or every agent's step at once
    # (joint critics).
    view: AgentView = "agents"
    # Learns from each batch's rewards on policy (reward scaling applies to it).
    on_policy_rewards: bool = False
    # Its single-agent module can start from ``rl_module.model_config.log_std_init``.
    initial_log_std: bool = False
    # Its learner updates only between sampling calls (never on a thread of its own): where its
    # env runner and learner share a process, the env runner acts with the learner's weights.
    synchronous_learner: bool = False
    # Its single-agent modules take SimBa's residual encoders (``rl_module.model_config.simba``).
    simba: bool = False
    # Its single-agent modules take rlplat's GRU and attention memories
    # (``rl_module.model_config.memory``) beside RLlib's LSTM.
    memory: bool = False
    # Its single-agent runs take Random Network Distillation (``exploration.rnd``): PPO's
    # module and learner with RND's (``rlplat.algorithms.rnd``).
    rnd: bool = False
    # It replays one-step transitions from rlplat's transition memory, which hindsight
    # relabelling (``replay.her``) draws from (``rlplat.algorithms.hindsight``).
    hindsight: bool = False
    # Its networks: RLlib's default ones, built by RLlib's catalog from the keys of RLlib's
    # DefaultModelConfig under ``rl_module.model_config``; or its own, sized by training settings
    # (under ``rl_module.model_config`` they read only ``simba`` where it takes SimBa's).
    networks: Literal["catalog", "own"] = "catalog"
    # What ``rlplat export`` computes from one of its policy modules: "distribution" (the
    # greedy action of the module's inference action distribution) or "q_values" (the greedy
    # action over the Q-values, which the graph computes: RLlib's DQN module gives only the
    # action). A team algorithm (``view: team``) exports its agent network instead.
    export_acting: Literal["distribution", "q_values"] = "distribution"
    # Explores epsilon-greedily, which an exported graph's outputs cannot do: its export acts
    # greedily only (no ``explore``).
    epsilon_greedy: bool = False
    # ``module.path:Class`` of the learner an algorithm RLlib ships trains with (RLlib's torch
    # learner on rlplat's ``RlplatLearner``); None: its config's default (rlplat's algorithms
    # name their own).
    learner: str | None = None
    # ``module.path:Class`` of the class its trials run (``rlplat.run.trainable.ExperimentTrial``
    # before its algorithm class); None: the one of its name in ``rlplat.run.trials``.
    trial: str | None = None
    # The per-module learner metrics that are its Q-value estimates (the training-health rule
    # q_divergence reads the largest of them); empty: it logs none.
    q_metrics: tuple[str, ...] = ()
    # Settings for one machine that a single-agent experiment gets where it leaves them out
    # (RLlib's own defaults are made for many env runners on a cluster); the run's
    # experiment.yaml names each under ``defaults``.
    machine_defaults: tuple[MachineDefault, ...] = ()

    @property
    def rllib(self) -> bool:
        """Whether RLlib ships it (else rlplat's ``rlplat/algorithms/``)."""
        return self.import_path is None


_RECORDS: dict[str, AlgorithmRecord] = {}


def register_algorithm(name: str, import_path: str | None = None, **traits: Any) -> None:
    """Make ``algorithm: NAME`` resolve to the class at ``module.path:ClassName`` (or RLlib's
    algorithm of that name), with the traits of ``AlgorithmRecord``."""
    if import_path is None and name not in ALGORITHMS:
        raise ValueError(f"RLlib has no algorithm {name!r}: give its import path")
    _RECORDS[name] = AlgorithmRecord(name, import_path, **traits)


def unregister_algorithm(name: str) -> None:
    """Forget a registration (an algorithm a test or a plugin registered for a while)."""
    _RECORDS.pop(name, None)


def algorithm_names() -> list[str]:
    """Every name ``algorithm:`` accepts."""
    return sorted({*ALGORITHMS, *_RECORDS})


def canonical_name(name: str) -> str:
    """The registered spelling of ``name`` (matched case-insensitively), or a UserError."""
    names = algorithm_names()
    by_lower = {n.lower(): n for n in names}
    if name.lower() in by_lower:
        return by_lower[name.lower()]
    raise UserError(
        f"unknown algorithm {name!r}; allowed: {allowed_list(names, limit=30)}."
        + did_you_mean(name, names)
    )


def algorithm_record(name: str) -> AlgorithmRecord:
    """The record of a canonical algorithm name (RLlib's unregistered ones get the defaults)."""
    return _RECORDS.get(name) or AlgorithmRecord(name)


def algorithm_records() -> list[AlgorithmRecord]:
    """Every registered record, in registration order (RLlib's first)."""
    return list(_RECORDS.values())


def names_where(trait: str) -> list[str]:
    """The registered algorithms whose ``trait`` is set (truthy), in registration order."""
    return [r.name for r in _RECORDS.values() if getattr(r, trait)]


def get_algorithm_class(name: str) -> type[Algorithm]:
    """The Algorithm class for a name; imports it on first use."""
    found = algorithm_record(canonical_name(name))
    if found.import_path is not None:
        return import_object(found.import_path)
    return ALGORITHMS[found.name]()[0]


def default_settings(name: str) -> dict[str, Any]:
    """The settings an experiment of ``name`` gets where it leaves them out: its config class's
    defaults (empty for a name no longer registered)."""
    try:
        algorithm = get_algorithm_class(name)
    except UserError:
        return {}
    return algorithm.get_default_config().to_dict()


def q_metrics_of(name: str) -> tuple[str, ...]:
    """The learner metrics ``name``'s learner logs as Q-value estimates (none for a name no
    longer registered)."""
    try:
        return algorithm_record(canonical_name(name)).q_metrics
    except UserError:
        return ()


def takes_rnd(name: str) -> bool:
    """Whether ``name`` trains with Random Network Distillation (``exploration.rnd``)."""
    try:
        return algorithm_record(canonical_name(name)).rnd
    except UserError:
        return False


def is_team_algorithm(name: str) -> bool:
    """Whether ``name`` (a canonical name) learns over a multi-agent env seen as one team."""
    return algorithm_record(name).view == "team"


def has_central_critic(name: str) -> bool:
    """Whether ``name`` (a canonical name) trains critics on the env's global state."""
    return algorithm_record(name).view == "central"


def is_joint_algorithm(name: str) -> bool:
    """Whether ``name`` learns from every agent's step at once (centralised critics): it needs
    a multi-agent env whose agents all act at every step, and the joint layout of its agents."""
    return algorithm_record(name).view == "joint"


_SAC_RATES = "actor_lr, critic_lr and alpha_lr"
_ACTOR_CRITIC_RATES = "actor_lr and critic_lr"
_REPLAY_BUFFER = "local_replay_buffer"  # RLlib's off-policy algorithms keep it here
_OWN_REPLAY_MEMORY = "replay_memory"  # rlplat.algorithms.base.ReplayLoopAlgorithm keeps it here

# RLlib's DQN and SAC sample one env step per training step ("auto" fragments) and run their
# whole iteration around it (73 and 24 env steps/s here, against SB3's defaults' 2,846 and 70).
# The defaults keep SB3's replay ratio (transitions replayed per env step sampled: DQN 32 per 4,
# SAC 256 per 1) in fewer, larger sampling calls: RLlib's fixed cost per call and per update is
# what bounds a small env's speed on one machine. The networks stay RLlib's ([256, 256]; DQN
# with SB3's [64, 64] learned nothing in 50k CartPole steps).
_TRANSITIONS = MachineDefault(
    "training.replay_buffer_config.type",
    "TransitionEpisodeReplayBuffer",
    "rlplat's transition replay: n-step transitions drawn from arrays, without episode copies",
)
_DQN_DEFAULTS = (
    _TRANSITIONS,
    MachineDefault("resources.env_runners.envs", 4, "4 envs stepped together per call"),
    MachineDefault(
        "env_runners.rollout_fragment_length", 4, "16 env steps per sampling call (4 envs x 4)"
    ),
    MachineDefault(
        "training.train_batch_size_per_learner",
        128,
        "one update of 128 per 16 env steps: SB3's DQN replay ratio (batch_size=32, "
        "train_freq=4) in updates 4x larger (8x larger ones learned nothing on CartPole)",
    ),
    MachineDefault(
        "training.training_intensity", 8, "SB3's DQN: 8 transitions replayed per env step"
    ),
)
# SAC, TD3 and CrossQ sample one env step per sampling call by default: the same replay ratio in
# calls of 4 env steps, learning from the 100th env step as SB3 does (RLlib's SAC waits 1,500;
# the TD3 and CrossQ authors' 25,000 and 5,000 random steps are made for MuJoCo's budgets).
_REPLAY_LOOP_DEFAULTS = (
    _TRANSITIONS,
    MachineDefault("env_runners.rollout_fragment_length", 4, "4 env steps per sampling call"),
    MachineDefault(
        "training.training_intensity",
        256,
        "{name}: one update of 256 per env step (batch_size=256, train_freq=1, "
        "gradient_steps=1), done 4 at a time",
    ),
    MachineDefault(
        "training.num_steps_sampled_before_learning_starts",
        100,
        "{name}: learning_starts=100 (random actions before)",
    ),
)


def _replay_loop_defaults(name: str) -> tuple[MachineDefault, ...]:
    return tuple(
        MachineDefault(d.path, d.value, d.source.format(name=name)) for d in _REPLAY_LOOP_DEFAULTS
    )


_SAC_DEFAULTS = (
    *_replay_loop_defaults("SB3's SAC"),
    MachineDefault(
        "training.actor_lr", 3e-4, "SB3's SAC: learning_rate=3e-4, the actor's too (RLlib's: 3e-5)"
    ),
)
# RLlib's PPO (lr 5e-5, 4,000 env steps of 30 epochs per update, lambda 1.0, an adaptive KL
# penalty, value losses clipped at 10) is tuned for many env runners; SB3's defaults are the ones
# single-machine users know and learn CartPole in about 50k env steps.
_PPO_DEFAULTS = tuple(
    MachineDefault(f"training.{key}", value, f"SB3's PPO: {sb3}")
    for key, value, sb3 in [
        ("lr", 3e-4, "learning_rate=3e-4"),
        ("train_batch_size_per_learner", 2048, "n_steps=2048 per update"),
        ("minibatch_size", 64, "batch_size=64"),
        ("num_epochs", 10, "n_epochs=10"),
        ("lambda_", 0.95, "gae_lambda=0.95"),
        ("clip_param", 0.2, "clip_range=0.2"),
        ("use_kl_loss", False, "no KL penalty"),
        ("vf_clip_param", 1e9, "no value loss clipping (clip_range_vf=None)"),
        ("vf_loss_coeff", 0.5, "vf_coef=0.5"),
        ("grad_clip", 0.5, "max_grad_norm=0.5"),
    ]
) + (
    MachineDefault(
        "rl_module.model_config.fcnet_hiddens",
        [64, 64],
        "SB3's PPO: net_arch [64, 64] (tanh); not for images",
        mlp_only=True,
    ),
    MachineDefault(
        "resources.env_runners.envs",
        4,
        "4 envs stepped together (SB3's default steps 1): the same 2,048 env steps per update, "
        "sampled 2x faster",
    ),
)
_MASKED_PPO = "rlplat.rllib.modules:MaskedPPOModule"
_QF_ESTIMATES = ("qf_max", "qf_min", "qf_mean")  # RLlib's DQN and SAC learners log them
_LEARNERS = "rlplat.algorithms.rllib_learners"  # RLlib's learners on rlplat's

register_algorithm(
    "PPO",
    learner=f"{_LEARNERS}:PPOLearner",
    masked_module=_MASKED_PPO,
    simba=True,
    memory=True,
    rnd=True,
    random_policies=True,
    on_policy_rewards=True,
    initial_log_std=True,
    synchronous_learner=True,
    machine_defaults=_PPO_DEFAULTS,
)
register_algorithm(
    "MAPPO",
    "rlplat.algorithms.mappo:MAPPO",
    view="central",
    synchronous_learner=True,
)
register_algorithm(
    "APPO", learner=f"{_LEARNERS}:APPOLearner", on_policy_rewards=True, memory=True
)
register_algorithm(
    "IMPALA", learner=f"{_LEARNERS}:IMPALALearner", on_policy_rewards=True, memory=True
)
register_algorithm(
    "DQN",
    "rlplat.algorithms.transition_loop:DQN",
    hindsight=True,
    replay_memory=_REPLAY_BUFFER,
    export_acting="q_values",
    epsilon_greedy=True,
    box_alternative="SAC or TD3 (PPO acts in both)",
    synchronous_learner=True,
    machine_defaults=_DQN_DEFAULTS,
    q_metrics=_QF_ESTIMATES,
)
register_algorithm(
    "SAC",
    "rlplat.algorithms.sac:SAC",
    hindsight=True,
    simba=True,
    own_rates=_SAC_RATES,
    replay_memory=_REPLAY_BUFFER,
    synchronous_learner=True,
    machine_defaults=_SAC_DEFAULTS,
    q_metrics=_QF_ESTIMATES,
)
register_algorithm(
    "DreamerV3",
    learner="rlplat.algorithms.dreamerv3:DreamerV3Learner",
    replay_memory=_REPLAY_BUFFER,
    networks="own",
)
register_algorithm("BC", learner=f"{_LEARNERS}:MARWILLearner", offline=True)
register_algorithm("MARWIL", learner=f"{_LEARNERS}:MARWILLearner", offline=True)
register_algorithm(
    "CQL",
    "rlplat.algorithms.cql:CQL",
    offline=True,
    discrete_alternative="BC or MARWIL",
    own_rates=_SAC_RATES,
    q_metrics=_QF_ESTIMATES,
)
register_algorithm(
    "IQL",
    learner=f"{_LEARNERS}:IQLLearner",
    offline=True,
    discrete_alternative="BC or MARWIL",
    own_rates="actor_lr, critic_lr and value_lr",
)
register_algorithm(
    "QMIX",
    "rlplat.algorithms.qmix:QMIX",
    networks="own",
    view="team",
    actions="Discrete",
    replay_memory=_OWN_REPLAY_MEMORY,
    synchronous_learner=True,
    q_metrics=("q_taken_mean",),
)
register_algorithm(
    "TD3",
    "rlplat.algorithms.td3:TD3",
    hindsight=True,
    networks="own",
    simba=True,
    discrete_alternative="SAC or DQN",
    own_rates=_ACTOR_CRITIC_RATES,
    replay_memory=_REPLAY_BUFFER,
    synchronous_learner=True,
    machine_defaults=_replay_loop_defaults("SB3's TD3"),
    q_metrics=("q_mean",),
)
register_algorithm(
    "DDPG",
    "rlplat.algorithms.td3:DDPG",
    hindsight=True,
    networks="own",
    simba=True,
    discrete_alternative="SAC or DQN",
    own_rates=_ACTOR_CRITIC_RATES,
    replay_memory=_REPLAY_BUFFER,
    synchronous_learner=True,
    q_metrics=("q_mean",),
)
register_algorithm(
    "CrossQ",
    "rlplat.algorithms.crossq:CrossQ",
    hindsight=True,
    networks="own",
    simba=True,
    discrete_alternative="SAC or DQN",
    own_rates=_SAC_RATES,
    replay_memory=_REPLAY_BUFFER,
    synchronous_learner=True,
    machine_defaults=(
        *_replay_loop_defaults("sb3-contrib's CrossQ"),
        MachineDefault(
            "training.critic_hiddens",
            [256, 256],
            "no GPU: critics of 256x256, SAC's (the paper's and sb3-contrib's 2048x2048 sample "
            "~2 env steps/s on 2 CPU cores: training.critic_hiddens: [2048, 2048] on a GPU)",
            cpu_only=True,
        ),
    ),
    q_metrics=("qf_mean",),
)
register_algorithm(
    "PQN",
    "rlplat.algorithms.pqn:PQN",
    networks="own",
    epsilon_greedy=True,
    actions="Discrete",
    box_alternative="SAC, TD3 or CrossQ (PPO acts in both)",
    synchronous_learner=True,
    q_metrics=("q_mean",),
)
register_algorithm(
    "MASAC",
    "rlplat.algorithms.masac:MASAC",
    networks="own",
    view="joint",
    discrete_alternative="MADDPG (Gumbel-softmax), MAPPO or QMIX",
    random_policies=True,
    own_rates=_SAC_RATES,
    replay_memory=_OWN_REPLAY_MEMORY,
    q_metrics=("q_mean",),
)
register_algorithm(
    "MADDPG",
    "rlplat.algorithms.maddpg:MADDPG",
    networks="own",
    view="joint",
    actions="Box or Discrete",
    random_policies=True,
    own_rates=_ACTOR_CRITIC_RATES,
    replay_memory=_OWN_REPLAY_MEMORY,
    q_metrics=("q_mean",),
)
