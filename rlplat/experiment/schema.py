"""The experiment file as typed models: one class per YAML section, mirroring the file.

Our own sections are strict (unknown keys and wrong types fail here). The RLlib sections
(``training``, ``env_runners``, ...) are free-form mappings whose keys are checked against the
real ``AlgorithmConfig`` builder methods in :mod:`rlplat.rllib.build`.
"""

from __future__ import annotations

import importlib.util
import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from rlplat.errors import did_you_mean
from rlplat.experiment.connectors import CONNECTORS, connector_options
from rlplat.experiment.tuning import SCHEDULERS, SEARCHERS
from rlplat.health import RULE_NAMES
from rlplat.metrics import (
    EVAL_SCORE,
    METRIC_ALIASES,
    SELF_PLAY_SCORE,
    WINDOW_SCORE,
    is_known_metric,
)

# Bounds that no cluster reaches (a count beyond is a slip: the plan lists every actor's bundle,
# and 2**63 of them fill the memory); VMAS batches tens of thousands of worlds per runner.
MAX_ACTORS = 10_000
MAX_ENVS = 1 << 20


class Section(BaseModel):
    """Base of every section: unknown keys are errors, types are not coerced, numbers are finite,
    values never change once validated (a changed experiment is a new one:
    ``model_copy(update=...)``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


def _whole(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


Count = Annotated[int, BeforeValidator(_whole)]
# Upper bounds of counts, so that a slip (2**63) is refused before it fills the memory or the
# run's time: each is far beyond what a run on any cluster reaches.
MAX_ENV_STEPS = 10**12
MAX_ITERATIONS = 10**9
MAX_STEPS = 10**9  # steps of one episode
MAX_EPISODES = 10**4  # greedy episodes one check or re-scoring plays
MAX_COUNT = 10**4  # checkpoints kept
MAX_POOL = 1000  # self-play snapshots held in memory at once
# fault_tolerance.trial_restarts, rlplat's key in RLlib's section: restarts of a trial whose
# process or node was lost (a spot machine reclaimed), each from the trial's last checkpoint.
TRIAL_RESTARTS = "trial_restarts"
DEFAULT_TRIAL_RESTARTS = 3
MAX_TRIAL_RESTARTS = 100
OWN_FAULT_TOLERANCE = (TRIAL_RESTARTS,)
MAX_SEED = 2**31 - 1
MAX_SEEDS = 1000  # trials of one run: a count beyond is a slip (2**63 would fill the memory)
"""An int that may also be written as a float without a fraction (``1e5``, as big step counts
are written); any other value is checked strictly."""


NamedEntry = str | dict[str, dict[str, Any]]
"""A list entry that is a name, or ``{name: {option: value}}`` (connectors, wrappers)."""


def entry_parts(entry: NamedEntry) -> tuple[str, dict[str, Any]]:
    """``"name"`` or ``{name: {option: value}}`` -> (name, options)."""
    if isinstance(entry, str):
        return entry, {}
    [(name, options)] = entry.items()
    return name, dict(options or {})


def _one_key_entries(entries: list[NamedEntry], what: str) -> None:
    for entry in entries:
        if isinstance(entry, dict) and len(entry) != 1:
            raise ValueError(
                f"each {what} is a name or {{name: {{option: value}}}}, got {len(entry)} keys "
                f"in one entry ({', '.join(map(str, entry))})"
            )


ENV_SOURCES = ("id", "factory", "pettingzoo", "gymma")
ATARI_NAMESPACE = "ALE/"
VMAS_FACTORY = "rlplat.environments.gymma:vmas_scenario"  # env.backend vmas batches its scenarios


CheckLevel = Literal["refuse", "warn", "off"]


class EnvCheck(Section):
    """What the env check before Ray refuses (the run does not start), warns about (said once,
    the run goes on) or skips, one part at a time."""

    contract: CheckLevel = Field(
        "refuse",
        description="reset() and step() return what Gymnasium's or PettingZoo's API promises: "
        "tuples of the right length, observations of the space's shape and type, real finite "
        "rewards, bool flags, info dicts.",
    )
    bounds: CheckLevel = Field(
        "refuse",
        description="Observations lie inside the declared space's low and high. A value past a "
        "bound by float rounding (within a relative 1e-6) is accepted with a note at every "
        "level but off.",
    )
    determinism: CheckLevel = Field(
        "warn",
        description="Gymnasium's env checker (single-agent envs): reset(seed=s) repeats the "
        "same observation, the same actions the same steps; an env that breaks it trains, "
        "but its seeds do not repeat a run.",
    )

    def any_on(self) -> bool:
        return any(level != "off" for level in (self.contract, self.bounds, self.determinism))


class EnvSpec(Section):
    """Which environment to build, with what arguments and wrappers."""

    id: str | None = Field(None, description="A registered Gymnasium id, e.g. CartPole-v1.")
    factory: str | None = Field(
        None,
        description="'module:callable' returning a Gymnasium or PettingZoo env, "
        "e.g. envs.corridor:Corridor.",
    )
    pettingzoo: str | None = Field(
        None,
        description="A PettingZoo environment module, e.g. mpe2.simple_spread_v3 or "
        "pettingzoo.butterfly.pistonball_v6.",
    )
    gymma: str | None = Field(
        None,
        description="A Gymnasium multi-agent env (one Tuple entry per agent, a list of "
        "rewards), as EPyMARL names them: 'module:EnvId' imports the module that registers the "
        "id, e.g. lbforaging:Foraging-8x8-2p-3f-v3 or rware:rware-tiny-2ag-v2. It trains as a "
        "PettingZoo parallel env with agents agent_0, agent_1, ...",
    )
    time_limit: int | None = Field(
        None,
        gt=0,
        le=MAX_STEPS,
        description="env.gymma only: end each episode after this many steps, as a truncation "
        "(EPyMARL's time_limit). Default: the env's own end only.",
    )
    api: Literal["parallel", "aec"] | None = Field(
        None,
        description="PettingZoo API to build: parallel (all agents act at once) or aec "
        "(turn-based). Default: parallel when the module offers it, else aec.",
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments for the env's constructor."
    )
    wrappers: list[NamedEntry] = Field(
        default_factory=list,
        description="Wrappers applied in order: SuperSuit names (resize_v1: {x_size: 84, "
        "y_size: 84}), Gymnasium wrapper classes (single-agent) or 'module:callable'.",
    )
    preset: Literal["atari"] | None = Field(
        None,
        description="A standard preprocessing chain, written out into kwargs, wrappers and "
        "connectors in the run's experiment.yaml. atari (for ALE/ ids): Gymnasium's "
        "AtariPreprocessing (no-op reset, frame skip 4 with max-pooling, 84x84 grayscale), the "
        "game score, FIRE at each start, episodic life and sign-clipped rewards in training "
        "only, 4 stacked frames; sticky actions as ALE v5 has them (0.25).",
    )
    backend: Literal["gymnasium", "envpool", "vmas"] = Field(
        "gymnasium",
        description="What steps the training env runners' envs: gymnasium (its vector env of "
        "the env and wrappers), envpool (EnvPool's C++ threads, as many as "
        "resources.env_runners.cpus, or resources.driver.cpus with no remote env runner; ALE "
        "ids with the atari preset's chain only, needs the "
        "envpool extra) or vmas (each env runner's envs are the worlds of one VMAS batch; "
        f"the {VMAS_FACTORY} factory without wrappers). Evaluation, rlplat eval, export and "
        "serve always use gymnasium.",
    )
    check: EnvCheck = Field(
        default_factory=EnvCheck,
        description="Before Ray starts, the env is reset and stepped with random actions across "
        "episode ends, and what it returns is checked, part by part: contract, bounds, "
        "determinism (their own rows). true: each part as its default; false: no part (the "
        "env is only reset); the probe still samples with the run's module and computes one "
        "update either way.",
    )

    @field_validator("check", mode="before")
    @classmethod
    def _check_switch(cls, value: Any) -> Any:
        if value is True:
            return EnvCheck()
        if value is False:
            return EnvCheck(contract="off", bounds="off", determinism="off")
        return value

    @field_validator("preset")
    @classmethod
    def _preset_fits_the_env(cls, preset: str | None, info: ValidationInfo) -> str | None:
        env = info.data.get("id") or info.data.get("factory") or info.data.get("pettingzoo")
        if preset == "atari" and not (info.data.get("id") or "").startswith(ATARI_NAMESPACE):
            raise ValueError(
                "preset 'atari' preprocesses Atari games: it needs an ALE id such as "
                f"ALE/Breakout-v5 or ALE/Pong-v5 in env.id, not {env!r}"
            )
        return preset

    @model_validator(mode="after")
    def _exactly_one_source(self) -> EnvSpec:
        given = [k for k in ENV_SOURCES if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'id' (a Gymnasium id), 'factory' ('module:callable'), "
                "'pettingzoo' (a module path) or 'gymma' (a Gymnasium multi-agent id)"
                + (f", not several ({', '.join(given)})" if given else "")
            )
        if self.factory is not None and not re.fullmatch(r"[\w.]+:[\w.]+", self.factory):
            raise ValueError(f"factory must look like 'module.path:callable', got {self.factory!r}")
        if self.pettingzoo is not None and not re.fullmatch(r"[\w.]+", self.pettingzoo):
            raise ValueError(
                f"pettingzoo must be a module path such as mpe2.simple_spread_v3, "
                f"got {self.pettingzoo!r}"
            )
        if self.api is not None and self.pettingzoo is None and self.factory is None:
            raise ValueError("'api' applies to PettingZoo environments, not Gymnasium ids")
        if self.time_limit is not None and self.gymma is None:
            raise ValueError(
                "'time_limit' applies to env.gymma; a Gymnasium id takes "
                "kwargs: {max_episode_steps: N}"
            )
        _one_key_entries(self.wrappers, "wrapper")
        if self.backend == "envpool" and not (self.id or "").startswith(ATARI_NAMESPACE):
            raise ValueError(
                "backend 'envpool' runs Atari games (an ALE id such as ALE/Breakout-v5 with "
                f"preset: atari), not {self.label!r}; use backend: gymnasium"
            )
        if self.backend == "vmas" and self.factory != VMAS_FACTORY:
            raise ValueError(
                f"backend 'vmas' batches VMAS scenarios made by factory: {VMAS_FACTORY} "
                "(kwargs: scenario, max_steps and the scenario's own); "
                f"{self.label!r} is not one: use backend: gymnasium"
            )
        if self.backend == "vmas" and self.wrappers:
            raise ValueError(
                "backend 'vmas' steps each runner's worlds as one VMAS batch, which "
                "Gymnasium's wrappers cannot wrap: remove env.wrappers, or keep them with "
                "backend: gymnasium (each world its own env, stepped one after another)"
            )
        return self

    @property
    def user_modules(self) -> list[str]:
        """The modules of user code this env names: its factory, the module of a gymma id and
        'module:callable' wrappers."""
        names = [self.factory] if self.factory else []
        names += [self.gymma] if self.gymma and ":" in self.gymma else []
        names += [name for name, _ in map(entry_parts, self.wrappers) if ":" in name]
        return [name.partition(":")[0] for name in names]

    @property
    def label(self) -> str:
        """The env as the user named it."""
        return str(self.id or self.factory or self.pettingzoo or self.gymma)


RESERVED_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


def _custom_names(custom: dict[str, float]) -> dict[str, float]:
    for name, amount in custom.items():
        if name in RESERVED_RESOURCES or name.startswith("node:"):
            raise ValueError(
                f"{name!r} is not a custom resource: use cpus/gpus for CPU and GPU, and name "
                "custom resources as the nodes declare them (ray start --resources '{\"npu\": 8}')"
            )
        if amount < 0:
            raise ValueError(f"custom resource {name!r} must be >= 0, got {amount}")
    return custom


class ResourceOption(Section):
    """One entry of a preference list: the fields it sets replace the group's own."""

    cpus: float | None = Field(None, ge=0, description="CPUs per actor.")
    gpus: float | None = Field(None, ge=0, description="GPUs per actor.")
    custom: dict[str, float] | None = Field(None, description="Custom resources per actor.")

    @field_validator("custom")
    @classmethod
    def _custom_names(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        return None if value is None else _custom_names(value)


PREFER_DESCRIPTION = (
    "Alternatives tried in order when the run starts: the first that some node of the cluster "
    "can hold wins, e.g. [{custom: {npu: 1}}, {gpus: 1}, {}] (the empty one: the fields above). "
    "The run directory records the choice."
)


class RunnerResources(Section):
    """Env runners: rollout actors. ``count: 0`` samples inside the algorithm's own process."""

    count: int | None = Field(
        None, ge=0, le=MAX_ACTORS, description="Number of remote env runners."
    )
    envs: int | None = Field(None, ge=1, le=MAX_ENVS, description="Vectorized envs per env runner.")
    cpus: float | None = Field(None, ge=0, description="CPUs per env runner.")
    gpus: float | None = Field(None, ge=0, description="GPUs per env runner.")
    custom: dict[str, float] = Field(
        default_factory=dict, description="Custom resources per env runner, e.g. {npu: 1}."
    )
    prefer: list[ResourceOption] = Field(default_factory=list, description=PREFER_DESCRIPTION)

    _custom = field_validator("custom")(_custom_names)


class LearnerResources(Section):
    """Learners: the processes that compute gradients. ``count: 0`` learns in the driver actor."""

    count: int | None = Field(None, ge=0, le=MAX_ACTORS, description="Number of remote learners.")
    cpus: float | Literal["auto"] | None = Field(
        None, description="CPUs per learner (auto: RLlib decides)."
    )
    gpus: float | None = Field(
        None, ge=0, description="GPUs per learner (with count 0: for the driver's own learner)."
    )
    custom: dict[str, float] = Field(
        default_factory=dict, description="Custom resources per learner."
    )
    prefer: list[ResourceOption] = Field(default_factory=list, description=PREFER_DESCRIPTION)

    _custom = field_validator("custom")(_custom_names)


class DriverResources(Section):
    """The trial's own actor, which runs the algorithm's training loop (and, with
    ``learners.count: 0``, its learner): the first bundle of every trial."""

    cpus: float | None = Field(None, ge=0, description="CPUs for the algorithm's process.")
    custom: dict[str, float] = Field(
        default_factory=dict, description="Custom resources for the algorithm's process."
    )
    process: Literal["auto", "command", "actor"] = Field(
        "auto",
        description="Where the algorithm runs: command (inside the rlplat train process: no "
        "second process that imports RLlib and torch again; one trial on an embedded Ray, no "
        "custom resources), actor (a Tune trial actor, as searches, several seeds and --address "
        "need), auto (command where it can, else actor).",
    )

    _custom = field_validator("custom")(_custom_names)


class Resources(Section):
    """Where the work runs. Empty fields take RLlib's defaults; the run records the values used."""

    env_runners: RunnerResources = Field(default_factory=RunnerResources)
    learners: LearnerResources = Field(default_factory=LearnerResources)
    driver: DriverResources = Field(default_factory=DriverResources)
    placement: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] | None = Field(
        None,
        description="How a trial's bundles spread over nodes: PACK (few nodes, best effort), "
        "SPREAD (many nodes, best effort), STRICT_PACK (one node), STRICT_SPREAD (one node each).",
    )


# A run with stop.time_s starts another iteration only if, as long as the last one, it would
# end by the budget plus this share of it; Tune's own stop ends the run once the budget is spent.
TIME_BUDGET_SLACK = 0.1


class StopSpec(Section):
    """When a trial stops: whichever condition is met first."""

    episode_return_mean: float | None = Field(None, description="Target mean episode return.")
    game_score_mean: float | None = Field(
        None,
        description="Target mean game score over the last finished games, for envs that report "
        "a game's end in its last step's info (the atari preset, whose game spans its lives).",
    )
    success_rate: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Target share of the last finished episodes whose last step's info said "
        "is_success (goal envs).",
    )
    env_steps: Count | None = Field(
        None, gt=0, le=MAX_ENV_STEPS, description="Environment steps sampled."
    )
    iterations: Count | None = Field(
        None, gt=0, le=MAX_ITERATIONS, description="Training iterations."
    )
    time_s: float | None = Field(
        None,
        gt=0,
        description="Seconds of training iterations (time_total_s: Ray's start and the "
        "algorithm's build are not counted). An iteration is never cut short: another one starts "
        "only if, as long as the last, it would end within time_s + 10 %, so a run ends by "
        "1.1 x time_s unless an iteration runs longer than the one before, and at most one "
        "iteration early.",
    )

    def another_iteration_fits(self, elapsed_s: float, last_iteration_s: float) -> bool:
        """Whether an iteration as long as the last one would end within ``time_s`` and its
        slack: a run thus ends by ``1.1 x time_s`` unless an iteration runs longer than the one
        before it, and at most one iteration early (the trial checks it after each iteration)."""
        budget = math.inf if self.time_s is None else self.time_s * (1 + TIME_BUDGET_SLACK)
        return elapsed_s + last_iteration_s <= budget

    @model_validator(mode="after")
    def _at_least_one(self) -> StopSpec:
        if all(v is None for v in self.model_dump().values()):
            raise ValueError(
                "give at least one stop condition: episode_return_mean, game_score_mean, "
                "success_rate, env_steps, iterations or time_s (otherwise the run never ends)"
            )
        return self


def _metric_name(value: str) -> str:
    if not is_known_metric(value):
        raise ValueError(
            f"unknown metric {value!r}; use one of {', '.join(METRIC_ALIASES)} "
            "or a full result path such as 'env_runners/episode_return_mean'"
        )
    return value


class CheckpointSpec(Section):
    """How often checkpoints are written and which ones are kept."""

    every: int = Field(
        10, ge=0, le=MAX_ITERATIONS, description="Checkpoint every N iterations (0: never)."
    )
    keep: int | None = Field(
        3,
        ge=1,
        le=MAX_COUNT,
        description="Keep the K best checkpoints, and the newest one a resumed run continues "
        "from (null: all).",
    )
    at_end: bool = Field(True, description="Write a checkpoint when the trial stops.")
    score: str | None = Field(
        None,
        description="Metric that ranks checkpoints (short name or path). Default: "
        "eval_episode_return_mean, the greedy evaluation of each checkpoint, when the run "
        "evaluates (it does unless evaluation.evaluation_interval is null); else "
        "episode_return_mean, the training window, which no checkpoint whose window holds "
        "episodes played before the first update can win. Self-play runs: "
        "self_play/learner_elo, the learner's Elo rating.",
    )
    mode: Literal["max", "min"] = Field("max", description="Whether a higher score is better.")
    rescore: int = Field(
        20,
        ge=0,
        le=MAX_EPISODES,
        description="At the run's end, play each kept checkpoint this many greedy episodes "
        "again (as rlplat eval -n N) and rank them by that mean, printed with its 95% interval, "
        "instead of by the few evaluation episodes of their iteration. Only when the score is "
        "the greedy evaluation, the run finished, it has at most 10 trials and there is a choice "
        "to make (0: never).",
    )
    rescore_share: float | None = Field(
        0.1,
        gt=0,
        le=10,
        description="Re-scoring may take at most this share of the run's training seconds (its "
        "trials' time_total_s, greedy evaluations during training included): each checkpoint "
        "plays up to checkpoint.rescore episodes within its part of that time, and a trial whose "
        "checkpoints could not play more episodes than their evaluation during training keeps "
        "those scores; said in the output. null: no limit.",
    )
    replay_buffer: bool = Field(
        True,
        description="Store the replay buffer (DQN, SAC, QMIX) in each checkpoint, so a resumed "
        "run continues with it (false: smaller checkpoints; a resumed run refills it).",
    )

    @field_validator("score")
    @classmethod
    def _known_metric(cls, value: str | None) -> str | None:
        return None if value is None else _metric_name(value)


class InitSpec(Section):
    """Start from a trained policy instead of random weights (a fine-tune)."""

    checkpoint: str | None = Field(
        None,
        description="A checkpoint, or a trial/run directory (its best checkpoint), whose policy "
        "weights the new run starts from (rlplat train exp.yaml --from PATH sets it).",
    )
    optimizer: bool = Field(
        False,
        description="Also take the optimizer's state (Adam moments); the learning rate stays "
        "this experiment's.",
    )
    experiment: str | None = Field(
        None,
        description="An experiment file (relative to this one) that rlplat train runs first, "
        "with this experiment's seed and output_dir, as a run of its own; this run then starts "
        "from that run's best checkpoint (init.checkpoint). rlplat train --resume <that run> "
        "goes on to this one. One trial only: no seeds list or search.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> InitSpec:
        if self.checkpoint and self.experiment:
            raise ValueError(
                "give init.checkpoint (a trained run) or init.experiment (a file to train "
                "first), not both"
            )
        return self


class VideoSpec(Section):
    """Greedy episodes recorded from checkpoints during training, shown in TensorBoard."""

    every: int = Field(
        0,
        ge=0,
        le=MAX_ITERATIONS,
        description="Record at every checkpoint whose iteration is a multiple of this (0: never).",
    )
    episodes: int = Field(
        1, ge=1, le=100, description="Episodes per recording, played one after another."
    )
    max_width: int = Field(
        320, ge=16, le=4096, description="Wider frames are shrunk to this many pixels."
    )


class DiagnosesSpec(Section):
    """The training-health diagnoses said while a run trains (docs/doctor.md)."""

    off: list[str] = Field(
        default_factory=list,
        description="Rules not to run, by name: " + ", ".join(RULE_NAMES) + ".",
    )

    @field_validator("off")
    @classmethod
    def _known_rules(cls, names: list[str]) -> list[str]:
        for name in names:
            if name not in RULE_NAMES:
                raise ValueError(
                    f"no diagnosis is named {name!r}; allowed: {', '.join(RULE_NAMES)}."
                    + did_you_mean(name, list(RULE_NAMES))
                )
        return names


EXPORT_MODULES = ("onnx", "onnxruntime")


class ExportSpec(Section):
    """An ONNX export of the run's best checkpoint when training ends (rlplat export)."""

    at_end: bool = Field(
        False,
        description="Export the run's best checkpoint into <run dir>/export when training ends, "
        "with its parity certificate; a failed certificate makes rlplat train exit 1.",
    )
    episodes: int = Field(
        10, ge=1, le=MAX_EPISODES, description="Seeded episodes of the parity check."
    )

    @field_validator("at_end")
    @classmethod
    def _exporter_installed(cls, at_end: bool) -> bool:
        missing = [m for m in EXPORT_MODULES if importlib.util.find_spec(m) is None]
        if at_end and missing:
            raise ValueError(
                f"exporting needs {' and '.join(missing)}, which are not installed: "
                "pip install 'rlplat[export]' (or pip install -e '.[export]' in a checkout)"
            )
        return at_end


class HerSpec(Section):
    """Hindsight experience replay (Andrychowicz et al. 2017) for goal envs: replayed
    transitions also learn from goals their episode reached (docs/hindsight.md)."""

    strategy: Literal["future", "final"] = Field(
        "future",
        description="Which reached goal a relabelled transition takes: one its episode reached "
        "at that step or later (future), or at its last stored step (final).",
    )
    goals_per_transition: int = Field(
        4,
        ge=0,
        le=64,
        description="Relabelled transitions per real one in a batch, on average (k: a share "
        "k / (k + 1) of each batch is relabelled).",
    )
    normalize: bool = Field(
        False,
        description="SAC's networks see observations normalised by running statistics of the "
        "replayed ones (clipped to +-10, as RL Zoo's VecNormalize), kept inside the module: the "
        "memory keeps raw observations, whose goals the env's compute_reward reads.",
    )


class ReplaySpec(Section):
    """How replayed transitions are drawn (off-policy algorithms on rlplat's transition
    memory)."""

    her: HerSpec | None = Field(None, description="Hindsight relabelling (absent: none).")


class RndSpec(Section):
    """Random Network Distillation (Burda et al. 2019): an exploration bonus for observations
    a predictor has not yet learned to embed as a fixed random network does (docs/exploration.md).
    Defaults: CleanRL's ppo_rnd_envpool.py."""

    coeff: float = Field(1.0, gt=0, description="Weight of the intrinsic advantages.")
    extrinsic_coeff: float = Field(
        2.0, ge=0, description="Weight of the extrinsic (the env's) advantages."
    )
    gamma: float = Field(
        0.99,
        gt=0,
        lt=1,
        description="Discount of the intrinsic return (the env's is training.gamma); the "
        "intrinsic return does not end with an episode.",
    )
    update_proportion: float = Field(
        0.25, gt=0, le=1, description="Share of each minibatch's rows the predictor trains on."
    )
    hiddens: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [128, 128],
        max_length=8,
        description="Hidden layer sizes of the target network (the predictor has one more).",
    )
    embedding_size: int = Field(
        64, ge=1, le=4096, description="Size of the embedding the predictor learns to match."
    )
    observation_clip: float = Field(
        5.0, gt=0, description="Normalised observations are clipped to [-clip, clip]."
    )


class ExplorationSpec(Section):
    """Exploration bonuses added to the env's rewards while training (PPO)."""

    rnd: RndSpec | None = Field(None, description="Random Network Distillation (absent: no bonus).")


class AlwaysWritten(Section):
    """A logger every run has; listing it changes nothing (it takes no options)."""


class MlflowLogger(Section):
    """Each trial as an MLflow run: the experiment as parameters, rlplat's TensorBoard scalars
    against env steps, the run's files at the end; a search's trials under one parent run."""

    tracking_uri: str = Field(
        description="An MLflow server (http://host:port) or a local store (file:/path, "
        "sqlite:///path.db). Credentials come from MLflow's environment variables "
        "(MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME/PASSWORD), never from this file."
    )
    experiment: str | None = Field(
        None, description="The MLflow experiment (created when missing). Default: name."
    )


class WandbLogger(Section):
    """Each trial as a Weights & Biases run, a search's trials in one group."""

    project: str = Field(description="The W&B project.")
    entity: str | None = Field(None, description="The W&B team or user (default: yours).")
    mode: Literal["online", "offline"] = Field(
        "online",
        description="online needs a key (WANDB_API_KEY or `wandb login`), never this file; "
        "offline writes the runs under <run dir>/wandb for `wandb sync`.",
    )


class LoggersSpec(Section):
    """Where the training curves go: TensorBoard and CSV/JSON files always; trackers too."""

    tensorboard: AlwaysWritten = Field(
        default_factory=AlwaysWritten,
        description="Event files in each trial directory, x = env steps (always written).",
    )
    csv: AlwaysWritten = Field(
        default_factory=AlwaysWritten,
        description="progress.csv and result.json in each trial directory (always written).",
    )
    mlflow: MlflowLogger | None = Field(None, description="An MLflow tracking server or store.")
    wandb: WandbLogger | None = Field(None, description="Weights & Biases.")


class OfflineSpec(Section):
    """Learn from recorded experience instead of sampling the env (BC, MARWIL, CQL, IQL)."""

    input: str | list[str] = Field(
        description="A dataset directory (rlplat eval --record, rlplat dataset) or a list of "
        "them. The env section still names the env: its spaces must match the data's, and "
        "evaluation episodes in it give the run its returns."
    )

    @field_validator("input")
    @classmethod
    def _some_dataset(cls, value: str | list[str]) -> str | list[str]:
        if not value:
            raise ValueError("names no dataset: give a dataset directory or a list of them")
        return value

    def inputs(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class SnapshotRule(Section):
    """When the learning policy is frozen into the self-play pool."""

    every: Count = Field(
        20, ge=1, le=MAX_ITERATIONS, description="Iterations between snapshots (at least)."
    )
    min_win_rate: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="Also require the learner's win rate against the pool since the last "
        "snapshot (draws count half) to reach this; null: a snapshot every `every` iterations.",
    )
    max_every: Count | None = Field(
        None,
        ge=1,
        le=MAX_ITERATIONS,
        description="With min_win_rate: a snapshot at the latest every N iterations, whatever "
        "the win rate (PFSP draws the snapshots the learner beats least, so the rate can stay "
        "under the threshold for good); null: 5 x every.",
    )

    @model_validator(mode="after")
    def _bounds_that_matter(self) -> SnapshotRule:
        if self.max_every is None:
            return self
        if self.min_win_rate is None:
            raise ValueError(
                f"max_every ({self.max_every}) bounds the wait for min_win_rate, which is not "
                f"set: snapshots come every {self.every} iterations. Set min_win_rate or remove "
                "max_every"
            )
        if self.max_every <= self.every:
            raise ValueError(
                f"max_every ({self.max_every}) must be larger than every ({self.every}): "
                "snapshots are at least `every` iterations apart, so min_win_rate would never "
                "hold one back"
            )
        return self

    def latest_every(self) -> int | None:
        """Iterations after which a snapshot is frozen whatever the win rate (None: no bound,
        as without ``min_win_rate`` every snapshot is due on the interval)."""
        if self.min_win_rate is None:
            return None
        return self.max_every or 5 * self.every


class OpponentPool(Section):
    """The frozen snapshots opponents are drawn from."""

    size: Count = Field(
        20,
        ge=1,
        le=MAX_POOL,
        description="Snapshots kept; the oldest goes first (see keep_first).",
    )
    sample: Literal["latest", "uniform", "pfsp"] = Field(
        "pfsp",
        description="latest: the newest snapshot; uniform: any; pfsp: prioritised fictitious "
        "self-play, snapshots the learner beats least drawn most ((1 - win rate)^2).",
    )
    random: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Share of iterations in which the opponent slots play uniformly random "
        "actions (legal ones where the env masks them) instead of a snapshot, so that the "
        "learner also meets play outside its own line; those games are not rated.",
    )
    even: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="Share of snapshot draws spread evenly over the pool, the rest drawn by "
        "`sample`. With pfsp, a snapshot the learner has long beaten is otherwise hardly ever "
        "drawn again, and the learner can forget how to beat it; with 0.5 and 20 snapshots in "
        "the pool each is drawn at least 2.5 % of the time.",
    )
    keep_first: bool = Field(
        False,
        description="Never drop the pool's first snapshot (the learner's starting weights, "
        "e.g. the policy given with --from): the learner keeps meeting the play it started "
        "from; a full pool drops the oldest of the others.",
    )

    @model_validator(mode="after")
    def _even_differs_from_sample(self) -> OpponentPool:
        if self.even > 0 and self.sample == "uniform":
            raise ValueError(
                f"even ({self.even}) spreads a share of the draws evenly over the pool, which "
                "sample: uniform already does for all of them. Set even to 0, or sample to pfsp "
                "or latest"
            )
        return self

    @model_validator(mode="after")
    def _room_beside_the_first(self) -> OpponentPool:
        if self.keep_first and self.size < 2:
            raise ValueError(
                "keep_first needs a pool of at least 2 snapshots (the first one and the "
                f"newest), got size {self.size}"
            )
        return self


class SelfPlaySpec(Section):
    """Self-play: the learner plays frozen snapshots of itself, drawn from a pool."""

    learner: str = Field(description="The policy that trains (a name in multi_agent.policies).")
    opponents: str | list[str] = Field(
        description="Policy slots played by snapshots from the pool (names in "
        "multi_agent.policies); each is given a snapshot every iteration."
    )
    snapshot: SnapshotRule = Field(default_factory=SnapshotRule)
    pool: OpponentPool = Field(default_factory=OpponentPool)
    rating: Literal["elo"] = Field("elo", description="How the learner and snapshots are rated.")
    swap_seats: bool = Field(
        True, description="Each episode, the learner takes a seat at random (both colours)."
    )

    @property
    def opponent_slots(self) -> list[str]:
        return [self.opponents] if isinstance(self.opponents, str) else list(self.opponents)


class MultiAgentSpec(Section):
    """Which policy acts for which agent, which policies learn, and their own settings."""

    policies: Literal["shared", "independent"] | dict[str, str] = Field(
        "shared",
        description="shared: one policy 'shared' for all agents; independent: one policy per "
        "agent, named after it; or {agent pattern: policy}, first matching pattern wins "
        "(fnmatch patterns: 'adversary_*').",
    )
    train: Literal["all"] | list[str] = Field(
        "all", description="Policies that learn; the others keep their initial weights."
    )
    random: list[str] = Field(
        default_factory=list,
        description="Policies that act uniformly at random (among legal actions when the env "
        "gives an action mask); never trained.",
    )
    overrides: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-policy 'training' settings, e.g. {adversary: {lr: 1.0e-4}}.",
    )
    self_play: SelfPlaySpec | None = Field(
        None, description="Train one policy against frozen snapshots of itself (competitive games)."
    )

    @field_validator("policies")
    @classmethod
    def _pattern_names(cls, value: Any) -> Any:
        if isinstance(value, dict):
            if not value:
                raise ValueError("give at least one {agent pattern: policy} entry")
            for policy in value.values():
                if not re.fullmatch(r"[A-Za-z0-9_.-]+", policy):
                    raise ValueError(
                        f"policy names may use letters, digits, '_', '-' and '.', got {policy!r}"
                    )
        return value


TIME_ATTRS = ("iterations", "env_steps", "time_s")


def _known_name(entry: NamedEntry, table: dict[str, Any], what: str) -> NamedEntry:
    _one_key_entries([entry], what)
    name, _ = entry_parts(entry)
    names = list(table)
    if name not in names:
        raise ValueError(
            f"unknown {what} {name!r}; allowed: {', '.join(names)}." + did_you_mean(name, names)
        )
    return entry


class TuneSpec(Section):
    """A hyperparameter search: how many trials, how they are chosen, which stop early.

    Any value under seed, env.kwargs, multi_agent.overrides or an RLlib section may be a search
    space (``lr: {loguniform: [1.0e-5, 1.0e-3]}``, see docs/tuning.md).
    """

    num_samples: int = Field(
        1,
        ge=1,
        le=MAX_SEEDS,
        description="Trials drawn from the spaces (with grid spaces: per grid point).",
    )
    metric: str = Field(
        "episode_return_mean", description="Result that ranks trials (short name or path)."
    )
    mode: Literal["max", "min"] = Field("max", description="Whether a higher metric is better.")
    searcher: NamedEntry = Field(
        "random",
        description="random (Tune's variant generation: grid and random sampling), optuna (TPE), "
        "hyperopt (TPE) or bohb; options as {optuna: {option: value}}.",
    )
    scheduler: NamedEntry | None = Field(
        None,
        description="fifo (run every trial to its stop), asha, hyperband, median, pbt or pb2; "
        "options as {asha: {grace_period: 5}}. Default: fifo (hyperband with bohb). pbt and pb2 "
        "mutate the experiment's search spaces.",
    )
    time_attr: Literal["iterations", "env_steps", "time_s"] = Field(
        "iterations",
        description="What schedulers count as time (grace_period, max_t, perturbation_interval).",
    )
    max_concurrent: int | None = Field(
        None,
        ge=1,
        le=MAX_SEEDS,
        description="Trials running at once (default: as many as the cluster holds).",
    )

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        return _metric_name(value)

    @field_validator("searcher")
    @classmethod
    def _known_searcher(cls, value: NamedEntry) -> NamedEntry:
        return _known_name(value, SEARCHERS, "searcher")

    @field_validator("scheduler")
    @classmethod
    def _known_scheduler(cls, value: NamedEntry | None) -> NamedEntry | None:
        return None if value is None else _known_name(value, SCHEDULERS, "scheduler")


# Every checkpoint is scored by greedy episodes of its own weights: RLlib evaluates at each
# checkpoint's iteration (offline runs: every iteration, their only episodes), and the trainable
# evaluates a checkpoint written at any other iteration when it saves it.
GREEDY_EVALUATION: dict[str, Any] = {
    "evaluation_duration": 5,  # as Stable-Baselines3's EvalCallback and RL Zoo
    "evaluation_duration_unit": "episodes",
    "evaluation_num_env_runners": 0,  # in the algorithm's process, between iterations
    "evaluation_config": {"explore": False},  # RLlib's evaluation samples actions by default
}
# Evaluation interval of runs that checkpoint only at the end (checkpoint.every: 0).
EVALUATION_INTERVAL = 10
# Gymnasium and NumPy take seeds from 0 to 2**32 - 1; RLlib adds each env runner's (and each
# evaluation runner's) offset to the run's seed, and `seeds: N` counts up from it: half the range.


def score_metric(checkpoint: CheckpointSpec, evaluates: bool, self_play: bool = False) -> str:
    """The metric that ranks a run's checkpoints: ``checkpoint.score``, else the learner's Elo
    in a self-play run, else the greedy evaluation's return when the run evaluates, else the
    training window's return."""
    if checkpoint.score:
        return checkpoint.score
    if self_play:
        return SELF_PLAY_SCORE
    return EVAL_SCORE if evaluates else WINDOW_SCORE


RLLIB_SECTIONS = (
    "environment",
    "training",
    "env_runners",
    "learners",
    "rl_module",
    "evaluation",
    "reporting",
    "debugging",
    "fault_tolerance",
    "offline_data",
)
"""Experiment keys passed to the ``AlgorithmConfig`` builder method of the same name."""


class Experiment(Section):
    """One experiment file."""

    name: str = Field(description="Run directory name: <output_dir>/<name>/<timestamp>/.")
    algorithm: str = Field(description="PPO, DQN, SAC, or any registered algorithm.")
    seed: int | None = Field(
        0, description="Seed for RLlib, the envs and torch, 0 to 2**31 - 1 (null: random)."
    )
    seeds: int | list[int] | None = Field(
        None,
        description="Run every configuration once per seed: N (seeds seed, seed+1, ..., "
        "seed+N-1) or a list of seeds. Searches rank configurations by the mean over seeds. "
        "Absent: one trial with seed.",
    )
    stacked: bool = Field(
        False,
        description="Train the seeds of seeds as stacked models over one machine's CPUs "
        "(PPO, PQN, SAC, TD3, CrossQ, DQN; the command's process and Ray actors): each seed "
        "its own networks, optimizer state, observation filter, envs, greedy evaluation and "
        "trial directory, for about the price of a few seeds (docs/performance.md). No "
        "search spaces, multi-agent envs, memory or connectors other than mean_std_filter.",
    )
    env: EnvSpec
    stop: StopSpec
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    init: InitSpec = Field(default_factory=InitSpec)
    multi_agent: MultiAgentSpec | None = Field(
        None, description="Policies for a PettingZoo env (default: one shared policy)."
    )
    offline: OfflineSpec | None = Field(
        None,
        description="Train from datasets instead of the env (offline algorithms); RLlib's own "
        "settings for reading them go in offline_data.",
    )
    connectors: list[NamedEntry] = Field(
        default_factory=list,
        description="Connectors, in order: mean_std_filter and frame_stack: {num_frames: N} "
        "(observations, when acting and learning); reward_scaling: {gamma, clip, epsilon} "
        "(learning only: "
        "rewards divided by the running std of the discounted return, as SB3's VecNormalize; "
        "PPO, APPO, IMPALA; gamma defaults to training.gamma). Their state is saved in "
        "checkpoints.",
    )
    exploration: ExplorationSpec = Field(default_factory=ExplorationSpec)
    replay: ReplaySpec = Field(default_factory=ReplaySpec)
    video: VideoSpec = Field(default_factory=VideoSpec)
    diagnoses: DiagnosesSpec = Field(default_factory=DiagnosesSpec)
    loggers: LoggersSpec = Field(default_factory=LoggersSpec)
    export: ExportSpec = Field(default_factory=ExportSpec)
    resources: Resources = Field(default_factory=Resources)
    output_dir: str = Field("checkpoints", description="Where runs are written.")
    watchdog_s: float | None = Field(
        None,
        gt=0,
        description="Warn when a trial's iteration has run this long without a result (then "
        "the first Ctrl-C stops at once). Default: 10x the trial's slowest iteration so far, "
        "at least 300 s.",
    )
    tune: TuneSpec | None = Field(
        None, description="A hyperparameter search (absent: one trial with the values given)."
    )
    defaults: dict[str, str] = Field(
        default_factory=dict,
        description="Written by rlplat into a run's experiment.yaml: each setting a "
        "single-agent file left out and rlplat filled in for one machine (docs/algorithms.md), "
        "by dotted key, with its source. The values themselves are in their sections; read "
        "back, this changes nothing.",
    )

    environment: dict[str, Any] = Field(default_factory=dict)
    training: dict[str, Any] = Field(default_factory=dict)
    env_runners: dict[str, Any] = Field(default_factory=dict)
    learners: dict[str, Any] = Field(default_factory=dict)
    rl_module: dict[str, Any] = Field(default_factory=dict)
    evaluation: dict[str, Any] = Field(default_factory=dict)
    reporting: dict[str, Any] = Field(default_factory=dict)
    debugging: dict[str, Any] = Field(default_factory=dict)
    fault_tolerance: dict[str, Any] = Field(default_factory=dict)
    offline_data: dict[str, Any] = Field(default_factory=dict)

    @field_validator("fault_tolerance")
    @classmethod
    def _trial_restarts(cls, value: dict[str, Any]) -> dict[str, Any]:
        restarts = value.get(TRIAL_RESTARTS, DEFAULT_TRIAL_RESTARTS)
        whole = isinstance(restarts, int) and not isinstance(restarts, bool)
        if not whole or not 0 <= restarts <= MAX_TRIAL_RESTARTS:
            raise ValueError(
                f"{TRIAL_RESTARTS} is how often a trial whose process or node was lost restarts "
                f"from its last checkpoint: a whole number from 0 to {MAX_TRIAL_RESTARTS} "
                f"(default {DEFAULT_TRIAL_RESTARTS}); got {restarts!r}"
            )
        return value

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", value):
            raise ValueError(
                "name becomes a directory: use letters, digits, '-', '_' and '.' only, "
                f"got {value!r}"
            )
        return value

    @field_validator("seed")
    @classmethod
    def _seed_in_range(cls, value: int | None) -> int | None:
        if isinstance(value, int) and not 0 <= value <= MAX_SEED:
            raise ValueError(f"seed is a whole number from 0 to {MAX_SEED:,}")
        return value

    @field_validator("seeds")
    @classmethod
    def _seed_count_or_list(cls, value: int | list[int] | None) -> int | list[int] | None:
        if isinstance(value, int) and not 1 <= value <= MAX_SEEDS:
            raise ValueError(
                f"seeds is a number of seeds from 1 to {MAX_SEEDS:,} (each one a trial) or a "
                "list of seeds"
            )
        if isinstance(value, list):
            if not value:
                raise ValueError("seeds lists at least one seed")
            if len(value) > MAX_SEEDS:
                raise ValueError(f"seeds lists at most {MAX_SEEDS:,} seeds (each one a trial)")
            repeated = sorted({seed for seed in value if value.count(seed) > 1})
            if repeated:
                raise ValueError(f"seeds lists {repeated[0]} more than once; each seed runs once")
            wrong = [seed for seed in value if not 0 <= seed <= MAX_SEED]
            if wrong:
                raise ValueError(
                    f"seeds are whole numbers from 0 to {MAX_SEED:,}; {wrong[0]} is not"
                )
        return value

    def evaluation_settings(self) -> dict[str, Any]:
        """RLlib's ``evaluation`` settings for the run: the experiment's own keys over rlplat's
        greedy evaluation at every checkpoint's iteration (``GREEDY_EVALUATION``)."""
        interval = 1 if self.offline else (self.checkpoint.every or EVALUATION_INTERVAL)
        settings = {**GREEDY_EVALUATION, "evaluation_interval": interval, **self.evaluation}
        config = {
            **GREEDY_EVALUATION["evaluation_config"],
            **(self.evaluation.get("evaluation_config") or {}),
        }
        duration = settings["evaluation_duration"]
        if settings["evaluation_duration_unit"] == "episodes" and isinstance(duration, int):
            # No more envs than episodes: each env plays about one (a 16-env CartPole
            # runner would play 16 long episodes for 5), and no more than training's.
            envs = min(self.resources.env_runners.envs or 1, duration)
            config.setdefault("num_envs_per_env_runner", envs)
        return {**settings, "evaluation_config": config}

    def evaluates(self) -> bool:
        """Whether the run plays greedy evaluation episodes (``evaluation_interval: null``
        turns them off)."""
        return bool(self.evaluation_settings()["evaluation_interval"])

    def score_metric(self) -> str:
        self_play = self.multi_agent is not None and self.multi_agent.self_play is not None
        return score_metric(self.checkpoint, self.evaluates(), self_play)

    def seed_list(self) -> list[int] | None:
        """The trials' seeds (``seeds: N`` counts up from ``seed``, which ``prepare`` has drawn
        when it was null); None without ``seeds``."""
        if self.seeds is None or isinstance(self.seeds, list):
            return self.seeds
        return [(self.seed or 0) + index for index in range(self.seeds)]

    @field_validator("connectors")
    @classmethod
    def _known_connectors(cls, entries: list) -> list:
        _one_key_entries(entries, "connector")
        for entry in entries:
            name, options = entry_parts(entry)
            if name not in CONNECTORS:
                raise ValueError(
                    f"unknown connector {name!r}; known: {', '.join(CONNECTORS)}."
                    + did_you_mean(name, CONNECTORS)
                )
            allowed = connector_options(name)
            for option in options:
                if option not in allowed:
                    raise ValueError(
                        f"connector {name!r} has no option {option!r}; allowed: "
                        f"{', '.join(allowed)}." + did_you_mean(option, allowed)
                    )
        return entries

    @field_validator("video")
    @classmethod
    def _video_at_checkpoints(cls, video: VideoSpec, info: ValidationInfo) -> VideoSpec:
        checkpoint = info.data.get("checkpoint")
        if video.every and checkpoint is not None:
            if checkpoint.every == 0 or video.every % checkpoint.every:
                raise ValueError(
                    f"video.every ({video.every}) must be a multiple of checkpoint.every "
                    f"({checkpoint.every}): videos are recorded from checkpoints"
                )
        return video

    def rllib_sections(self) -> dict[str, dict[str, Any]]:
        """The RLlib builder sections, by builder method name (rlplat's own keys left out)."""
        sections = {section: getattr(self, section) for section in RLLIB_SECTIONS}
        own = {key: value for key, value in sections["fault_tolerance"].items()
               if key not in OWN_FAULT_TOLERANCE}  # fmt: skip
        return {**sections, "fault_tolerance": own}

    def trial_restarts(self) -> int:
        """How often a trial whose process or node was lost restarts from its last checkpoint
        (``fault_tolerance.trial_restarts``)."""
        return int(self.fault_tolerance.get(TRIAL_RESTARTS, DEFAULT_TRIAL_RESTARTS))
