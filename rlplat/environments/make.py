"""Build the environment an experiment names, the same way in training and in ``rlplat eval``."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from rlplat.environments.backends import backend_for
from rlplat.environments.contract import (
    RANDOM_STEPS,
    CheckReport,
    ContractBroken,
    EnvRaised,
    check_contract,
)
from rlplat.environments.goals import GoalLayout, goal_parts
from rlplat.environments.gymma import make_gymma
from rlplat.environments.kinds import is_multi_agent, is_pettingzoo
from rlplat.environments.opengl import opengl_failure
from rlplat.environments.packages import package_problems
from rlplat.environments.wrappers import WrapperProblem, apply_chain, resolve_chain
from rlplat.errors import ConfigError, UserError, allowed_list, did_you_mean
from rlplat.experiment.schema import EnvSpec
from rlplat.util.imports import import_object
from rlplat.util.raised import describe_raised


def _pettingzoo_constructor(spec: EnvSpec) -> Callable[..., Any]:
    """``parallel_env`` or ``env`` of the module ``spec.pettingzoo`` names."""
    module = importlib.import_module(spec.pettingzoo)
    api = spec.api or ("parallel" if hasattr(module, "parallel_env") else "aec")
    name = "parallel_env" if api == "parallel" else "env"
    if not hasattr(module, name):
        raise AttributeError(f"module {spec.pettingzoo!r} offers no {api} API (no {name}())")
    return getattr(module, name)


# Gymnasium namespaces whose ids are registered by importing a package, and the extra with it.
NAMESPACE_PACKAGES = {"ALE": ("ale_py", "atari")}


def import_namespace(env_id: str) -> None:
    """Import the package that registers ``env_id``'s namespace (``ALE/...``: ale_py)."""
    namespace = env_id.partition("/")[0] if "/" in env_id else ""
    if namespace in NAMESPACE_PACKAGES:
        importlib.import_module(NAMESPACE_PACKAGES[namespace][0])


class EnvCreator:
    """Picklable env creator handed to RLlib: ``creator(env_config) -> env``.

    Builds the env (Gymnasium id, factory or PettingZoo module), applies ``env.wrappers`` in
    order, and turns PettingZoo envs into RLlib ``MultiAgentEnv``s. RLlib passes its
    ``EnvContext`` (the kwargs plus worker/vector indices); only the kwargs reach the env.
    ``evaluation``: the env as evaluation plays it, without training-only wrappers.

    Where the backend makes the whole vector (``env.backend: envpool``), RLlib asks for it at
    once (``num_envs`` in ``env_config``): the backend's vector of that many envs, stepped by
    ``threads`` threads.
    """

    def __init__(self, spec: EnvSpec, *, evaluation: bool = False, threads: int = 1):
        self.spec = spec
        self.evaluation = evaluation
        self.threads = threads

    def __call__(self, env_config: dict[str, Any] | None = None) -> Any:
        kwargs = dict(self.spec.kwargs)
        kwargs.update(dict(env_config or {}))
        if not self.evaluation and "num_envs" in kwargs:  # RLlib asks for the whole vector
            backend = backend_for(self.spec)
            vector = backend.make_vector(self.spec, kwargs["num_envs"], self.threads)
            if vector is not None:
                return vector
        if self.spec.id is not None:
            import_namespace(self.spec.id)
            env = gym.make(self.spec.id, **kwargs)
        elif self.spec.pettingzoo is not None:
            env = _pettingzoo_constructor(self.spec)(**kwargs)
        elif self.spec.gymma is not None:
            env = make_gymma(self.spec.gymma, self.spec.time_limit, **kwargs)
        else:
            env = import_object(self.spec.factory)(**kwargs)
        multi_agent = is_pettingzoo(env)
        chain = resolve_chain(self.spec.wrappers, multi_agent=multi_agent)
        env = apply_chain(env, chain, evaluation=self.evaluation)
        if not multi_agent:
            return env
        # RLlib's MultiAgentEnv (and torch with it) loads only for multi-agent envs: evaluating
        # a single-agent ONNX export needs neither.
        from rlplat.environments.pettingzoo import to_multi_agent_env  # noqa: PLC0415

        return to_multi_agent_env(env)


def build_env(
    creator: Callable[[dict[str, Any]], Any], spec: EnvSpec, render_mode: str | None, source: Any
) -> Any:
    """Build a run's environment again with ``creator`` (for evaluation and export), with
    ``render_mode`` if given; ``source`` is the file that describes it, for the message."""
    try:
        return creator({"render_mode": render_mode} if render_mode else {})
    except Exception as exc:  # noqa: BLE001 - any failure here means the env cannot be rebuilt
        no_opengl = opengl_failure(exc) if render_mode == "rgb_array" else None
        if no_opengl is not None:
            raise UserError(f"cannot render {spec.label!r}: {no_opengl}") from None
        hint = (
            " The environment may not accept a render_mode argument."
            if render_mode and isinstance(exc, TypeError)
            else ""
        )
        raise UserError(
            f"cannot rebuild the environment {spec.label!r} described in {source}: "
            f"{type(exc).__name__}: {str(exc).rstrip('.')}.{hint} Its package must be installed "
            "and importable here (custom environments from the directory you train in, e.g. "
            "envs/)."
        ) from None


@dataclass(frozen=True)
class EnvInfo:
    """What the check learnt about the env: its spaces, per agent for multi-agent envs."""

    observation_space: gym.Space
    action_space: gym.Space
    agents: list[str] | None = None  # None: a single-agent Gymnasium env
    observation_spaces: dict[str, gym.Space] = field(default_factory=dict)
    action_spaces: dict[str, gym.Space] = field(default_factory=dict)
    render_modes: tuple[str, ...] = ()
    turn_based: bool = False  # a PettingZoo AEC env: one agent acts per step
    state_space: gym.Space | None = None  # multi-agent: the space of the env's state(), if any
    # Multi-agent: each step's rewards by agent in the contract check's random steps (none
    # when the check is off).
    random_rewards: tuple[dict[str, float], ...] = ()
    check_notes: tuple[str, ...] = ()  # what the check accepted or warned about, one line each
    # A goal env (rlplat.environments.goals): where its goals sit in the flat observation;
    # None, with the reason, for any other env.
    goals: GoalLayout | None = None
    goal_problem: str = ""

    @property
    def watch_with(self) -> str | None:
        """The ``rlplat eval --render`` choice that shows an episode: a video, else text."""
        if "rgb_array" in self.render_modes:
            return "gif"
        return "ansi" if "ansi" in self.render_modes else None

    @property
    def multi_agent(self) -> bool:
        return self.agents is not None


def check_env(
    spec: EnvSpec,
    locate: Callable[[str], str],
    *,
    needs_frames: bool = False,
    contract: bool = True,
    random_steps: int = RANDOM_STEPS,
) -> EnvInfo:
    """Fail early (before Ray starts) on an unknown id, a bad import path, a bad wrapper or
    kwargs the env rejects.

    The environment is built once and closed: this is what catches a misspelt kwarg.
    ``needs_frames``: videos are requested, so the env must offer ``rgb_array`` rendering.
    ``contract``: also step it through ``check_contract`` (unless every part of ``env.check`` is
    off), for
    ``random_steps`` random steps.
    """
    _check_source(spec, locate)
    backend_for(spec).check(spec, locate)
    env = _build(spec, locate)
    report = _reset_or_check_contract(env, spec, locate, contract=contract, steps=random_steps)
    env.close()
    if needs_frames and "rgb_array" not in render_modes(env):
        raise ConfigError(
            f"videos need rgb_array frames, but {spec.label!r} renders only: "
            f"{allowed_list(render_modes(env)) or 'nothing'}. Set video.every to 0.",
            location=locate("video.every"),
            key="video.every",
        )
    agents = getattr(env, "possible_agents", None)
    modes = tuple(render_modes(env))
    if agents is None:
        goals, goal_problem = goal_parts(env)
        return EnvInfo(
            env.observation_space,
            env.action_space,
            render_modes=modes,
            check_notes=(*report.notes, *package_problems()),
            goals=goals,
            goal_problem=goal_problem,
        )
    return EnvInfo(
        env.observation_space,
        env.action_space,
        render_modes=modes,
        agents=list(agents),
        observation_spaces=dict(env.observation_spaces),
        action_spaces=dict(env.action_spaces),
        turn_based=bool(getattr(env, "turn_based", False)),
        state_space=getattr(env, "state_space", None),
        random_rewards=tuple(report.rewards),
        check_notes=(*report.notes, *package_problems()),
    )


def _check_source(spec: EnvSpec, locate: Callable[[str], str]) -> None:
    """The id is registered, the PettingZoo module or the factory can be imported."""
    if spec.gymma is not None:
        _check_gymma(spec, locate)
    elif spec.id is None:
        if spec.pettingzoo is not None:
            _check_pettingzoo_module(spec, locate)
        else:
            _check_factory(spec, locate)
    elif ":" in spec.id:
        _check_registering_module(spec.id, "env.id", locate, "minigrid:MiniGrid-Empty-5x5-v0")
        return
    elif spec.id not in gym.registry:
        _import_namespace_package(spec, locate)
    if spec.id is not None and spec.id not in gym.registry:
        registering = _registering_package(spec.id)
        raise ConfigError(
            f"unknown Gymnasium environment {spec.id!r}."
            + (
                f" The {registering!r} package registers it on import: write "
                f"'{registering}:{spec.id}'."
                if registering
                else did_you_mean(spec.id, gym.registry)
            )
            + " Use a registered id (e.g. CartPole-v1, Pendulum-v1), 'module:EnvId' for an id "
            "that a package registers when imported (e.g. minigrid:MiniGrid-Empty-5x5-v0), "
            "'factory: module:callable' for a custom environment or 'pettingzoo: module.path' "
            "for a PettingZoo one.",
            location=locate("env.id"),
            key="env.id",
        )


def _registering_package(env_id: str) -> str | None:
    """An installed package, named after the id's first word (MiniGrid-...: minigrid,
    highway-...: highway_env), whose import registers ``env_id``."""
    word = re.split(r"[-_/]", env_id)[0].lower()
    if not word.isidentifier():  # '', '3d', 'a.b' (find_spec would import a.b's parent a)
        return None
    for module in (word, f"{word}_env", f"{word}_envs", f"gym_{word}"):
        if importlib.util.find_spec(module) is None:
            continue
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - a broken package is not the one that registers it
            continue
        if env_id in gym.registry:
            return module
    return None


# The packages of Gymnasium multi-agent envs that the multiagent extra installs.
GYMMA_PACKAGES = ("lbforaging", "rware")


def _check_gymma(spec: EnvSpec, locate: Callable[[str], str]) -> None:
    """The module before ':' imports and registers the id after it."""
    _check_registering_module(
        spec.gymma,
        "env.gymma",
        locate,
        "lbforaging:Foraging-8x8-2p-3f-v3",
        packages=GYMMA_PACKAGES,
        install=f"the multiagent extra has {' and '.join(GYMMA_PACKAGES)}: pip install -e "
        "'.[multiagent]'",
    )


def _check_registering_module(
    value: str,
    key: str,
    locate: Callable[[str], str],
    example: str,
    *,
    packages: tuple[str, ...] = (),
    install: str = "pip install <package> in this environment",
) -> None:
    """Gymnasium's 'module:EnvId': the module imports and registers the id after the colon.
    ``packages``: the ones rlplat's extras install (for "did you mean"), ``install`` how."""
    module, _, env_id = value.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(
                f"cannot import {module!r}, the package {key} names before ':' to register "
                f"{env_id!r} ({exc})."
                + did_you_mean(module, packages)
                + f" Install the package that registers it ({install}).",
                location=locate(key),
                key=key,
            ) from None
    if env_id not in gym.registry:
        registered = [name for name in gym.registry if module and _registered_by(name, module)]
        offered = registered or list(gym.registry)
        raise ConfigError(
            f"{env_id!r} is not a registered Gymnasium id"
            + (f" after importing {module!r}" if module else "")
            + "."
            + (did_you_mean(env_id, offered) or _some_of(registered, module))
            + f" {key} is 'module:EnvId', e.g. {example}.",
            location=locate(key),
            key=key,
        )


def _some_of(registered: list[str], module: str) -> str:
    if not registered:
        return ""
    return f" {module!r} registers {len(registered)}: {allowed_list(registered, limit=5)}."


def _registered_by(env_id: str, module: str) -> bool:
    entry = gym.registry[env_id].entry_point
    return isinstance(entry, str) and entry.split(".")[0].split(":")[0] == module


def _import_namespace_package(spec: EnvSpec, locate: Callable[[str], str]) -> None:
    """Register the id's namespace (``ALE/``) by importing its package, or say which extra
    installs it."""
    try:
        import_namespace(spec.id)
    except ImportError as exc:
        namespace = spec.id.partition("/")[0]
        package, extra = NAMESPACE_PACKAGES[namespace]
        raise ConfigError(
            f"{spec.id!r} is a {namespace} environment, registered by the {package} package, "
            f"which cannot be imported ({exc}). Install the {extra} extra: pip install "
            f"'rlplat[{extra}]' (in a checkout: pip install -e '.[{extra}]').",
            location=locate("env.id"),
            key="env.id",
        ) from None


def _build(spec: EnvSpec, locate: Callable[[str], str]) -> Any:
    """The env with its wrappers; what fails to build is a ConfigError at its key, and so is a
    warning of the env's that it left some of ``env.kwargs`` unused (VMAS scenarios warn)."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env = EnvCreator(spec)()
    except WrapperProblem as exc:
        key = f"env.wrappers.{exc.index}"
        raise ConfigError(str(exc), location=locate(key), key=key) from None
    except TypeError as exc:
        raise ConfigError(
            f"the environment rejected its arguments: {str(exc).rstrip('.')}."
            + _argument_hint(spec, str(exc)),
            location=locate("env.kwargs"),
            key="env.kwargs",
        ) from None
    except Exception as exc:  # noqa: BLE001 - any failure to build is the user's env problem
        raise ConfigError(
            f"building the environment {spec.label!r}{_built_with(spec)} failed: "
            f"{describe_raised(exc)}" + _clashes(),
            location=locate("env"),
            key="env",
        ) from None
    unused = []
    for warning in caught:
        if _says_unused(str(warning.message)):
            unused.append(str(warning.message))
        else:
            warnings.showwarning(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    if unused:
        env.close()
        raise ConfigError(
            f"the environment {spec.label!r} left some of its arguments unused: "
            f"{unused[0].rstrip('.')}. Check their names against the env's own arguments "
            "(a misspelt one would silently keep its default).",
            location=locate("env.kwargs"),
            key="env.kwargs",
        )
    return env


# How envs say that a keyword argument went unused (VMAS: "kwargs: {...} passed but not used").
UNUSED_ARGUMENT = re.compile(
    r"\b(kw)?arg(ument)?s?\b.*\bnot (used|consumed)\b|\bunused (kw)?arg", re.I
)


def _says_unused(message: str) -> bool:
    return UNUSED_ARGUMENT.search(message) is not None


def _argument_hint(spec: EnvSpec, message: str) -> str:
    """ " Did you mean 'x'? It takes: ..." for an unexpected keyword argument, read from the
    env's constructor where its signature names its arguments; '' otherwise."""
    unexpected = re.search(r"unexpected keyword argument '(\w+)'", message)
    names = _constructor_arguments(spec)
    if unexpected is None or not names:
        return ""
    return did_you_mean(unexpected.group(1), names) + f" It takes: {allowed_list(names)}."


def _constructor_arguments(spec: EnvSpec) -> list[str]:
    """The keyword arguments the env's constructor names (none where it takes ``**kwargs``
    only, or cannot be found)."""
    try:
        if spec.id is not None:
            constructor = gym.spec(spec.id).entry_point
            if isinstance(constructor, str):
                constructor = import_object(constructor)
        elif spec.pettingzoo is not None:
            module = importlib.import_module(spec.pettingzoo)
            constructor = getattr(module, "raw_env", None) or _pettingzoo_constructor(spec)
        elif spec.factory is not None:
            constructor = import_object(spec.factory)
        else:
            return []
        parameters = inspect.signature(constructor).parameters.values()
    except Exception:  # noqa: BLE001 - no signature to read: no hint
        return []
    keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters if p.kind in keyword and p.name != "self"]


def _reset_or_check_contract(
    env: Any, spec: EnvSpec, locate: Callable[[str], str], *, contract: bool, steps: int
) -> CheckReport:
    """Step the env through ``check_contract`` (or only reset it when every part of the check
    is off): what it saw. The env is closed when that fails."""
    try:
        if spec.check.any_on() and contract:
            return check_contract(env, steps=steps, levels=spec.check)
        env.reset(seed=0)
        return CheckReport()
    except ContractBroken as exc:
        env.close()
        api = "PettingZoo's" if is_multi_agent(env) else "Gymnasium's"
        what = "failed" if isinstance(exc, EnvRaised) else f"breaks {api} API"
        relax = (
            "Fix the env"
            if exc.part is None
            else f"Fix the env, or set env.check.{exc.part}: warn (or off) to let the run go on"
        )
        raise ConfigError(
            f"the environment {spec.label!r}{_built_with(spec)} (with its wrappers) {what}: "
            f"{str(exc).rstrip('.')}{_clashes()}. {relax}.",
            location=locate("env"),
            key="env",
        ) from None
    except Exception as exc:  # noqa: BLE001 - a wrapper or kwarg that only fails when used
        env.close()
        raise ConfigError(
            f"the environment {spec.label!r}{_built_with(spec)} (with its wrappers) failed on "
            f"reset: {describe_raised(exc)}" + _clashes(),
            location=locate("env"),
            key="env",
        ) from None


def _clashes() -> str:
    """The installed packages known to break envs, for a failure's message (or '')."""
    problems = package_problems()
    return (". Installed packages that may be why: " + "; ".join(problems)) if problems else ""


def _built_with(spec: EnvSpec) -> str:
    return f" with kwargs {spec.kwargs}" if spec.kwargs else ""


def _check_pettingzoo_module(spec: EnvSpec, locate: Callable[[str], str]) -> None:
    try:
        module = importlib.import_module(spec.pettingzoo)
    except ImportError as exc:
        siblings = _sibling_envs(spec.pettingzoo)
        known = f" Its package has: {allowed_list(siblings)}." if siblings else ""
        raise ConfigError(
            f"cannot import the PettingZoo environment {spec.pettingzoo!r} ({exc})."
            + known
            + did_you_mean(spec.pettingzoo, siblings)
            + " Suites need their extras: pip install 'pettingzoo[butterfly,sisl,classic]' mpe2 "
            "(or pip install -e '.[multiagent]').",
            location=locate("env.pettingzoo"),
            key="env.pettingzoo",
        ) from None
    offered = [
        api for api, fn in (("parallel", "parallel_env"), ("aec", "env")) if hasattr(module, fn)
    ]
    if not offered:
        raise ConfigError(
            f"module {spec.pettingzoo!r} is not a PettingZoo environment module: it has neither "
            "parallel_env() nor env().",
            location=locate("env.pettingzoo"),
            key="env.pettingzoo",
        )
    if spec.api is not None and spec.api not in offered:
        raise ConfigError(
            f"{spec.pettingzoo!r} offers only the {' and '.join(offered)} API; set api to "
            f"{' or '.join(offered)} (aec is turn-based, parallel simultaneous).",
            location=locate("env.api"),
            key="env.api",
        )


def _sibling_envs(module_path: str) -> list[str]:
    """Environment modules (``name_vN``) next to ``module_path``, when its package imports."""
    package_name = module_path.rpartition(".")[0]
    try:
        package = importlib.import_module(package_name)
    except ImportError:
        return []
    return [
        f"{package_name}.{info.name}"
        for info in pkgutil.iter_modules(getattr(package, "__path__", []))
        if re.search(r"_v\d+$", info.name)
    ]


def _check_factory(spec: EnvSpec, locate: Callable[[str], str]) -> None:
    module_name, _, attr = spec.factory.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"cannot import module {module_name!r} ({exc}). rlplat imports user code from the "
            "current directory, then the experiment file's directory and its project (the "
            "nearest directory above it with a pyproject.toml or .git), then installed "
            "packages: e.g. envs/corridor.py there for 'envs.corridor:Corridor'.",
            location=locate("env.factory"),
            key="env.factory",
        ) from None
    if not hasattr(module, attr.split(".")[0]):
        names = [n for n in dir(module) if not n.startswith("_")]
        raise ConfigError(
            f"module {module_name!r} has no attribute {attr!r}; it has: "
            f"{allowed_list(names)}." + did_you_mean(attr, names),
            location=locate("env.factory"),
            key="env.factory",
        )


def render_modes(env: Any) -> list[str]:
    return list(env.metadata.get("render_modes") or [])
