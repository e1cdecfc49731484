"""The diagnoses: each a rule over a trial's results so far, with its threshold and its source.

A rule returns the one line a user reads (what was seen, since when, the settings to try with
their values in use) or None. Rules look only at what a trial already reports (RLlib's learner
and env-runner metrics, and the per-episode numbers under ``health/``) and stay silent where a
metric is missing, so each applies to the algorithms that log what it reads.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from rlplat.health.reading import Settings
from rlplat.health.trace import Trace

# Thresholds (docs/doctor.md gives each one's source).
ENTROPY_COLLAPSED = 0.1  # entropy below this fraction of its start
NO_REWARD_EPISODES = 100
KL_TOO_HIGH = 10.0  # times training.kl_target
KL_NOTHING = 1e-6
DETERMINISTIC = 1e-3  # entropy of a policy that always takes one action
CLIP_FRACTION_HIGH = 0.5
KL_DEFAULT_TARGET = 0.01
EXPLAINED_VARIANCE_WINDOW = 10
EXPLAINED_VARIANCE_AFTER = 20  # iterations before the value function is judged
EXPLAINED_VARIANCE_LOW = -0.05  # the mean of the window, each of whose values is below 0
OBS_LARGE = 10.0  # mean |observation component|
ACTIONS_SATURATED = 0.8
TRUNCATED_ALL = 0.99
TRUNCATED_EPISODES = 100  # episodes since the first update
REWARD_PER_STEP_LARGE = 100.0
THROUGHPUT_FALL = 0.5
Q_SLACK = 2.0  # times the largest |Q| the rewards seen allow


@dataclass(frozen=True)
class Rule:
    """One diagnosis: ``name`` (what ``diagnoses.off`` lists), what it looks for, its threshold
    and where that comes from, and the check."""

    name: str
    looks_for: str
    threshold: str
    source: str
    check: Callable[[Trace, Settings], str | None]


def steps(value: float) -> str:
    """``400k``, ``1.2M``: env steps as a user reads them."""
    if value >= 1e6:
        return f"{value / 1e6:.1f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    return f"{value:,.0f}"


def _fix(settings: Settings, *keys: str, otherwise: str = "") -> str:
    return settings.named(*keys) or otherwise


def _collapsed_entropy(trace: Trace) -> float | None:
    """The mean of the last 3 entropies when it is below ENTROPY_COLLAPSED x the first ones."""
    start = trace.start_entropy
    now = trace.recent("entropy", 3)
    if start is None or start <= 0.05 or len(now) < 3 or trace.count("entropy") < 5:
        return None
    current = statistics.fmean(now)
    return current if current <= ENTROPY_COLLAPSED * start else None


def entropy_collapse(trace: Trace, settings: Settings) -> str | None:
    current = _collapsed_entropy(trace)
    if current is None or trace.improved():
        return None
    start = trace.start_entropy or 0.0
    since = trace.steps_since(lambda r: r.entropy is not None and r.entropy <= 0.5 * start)
    if not trace.rewarded:
        why = "without a rewarded episode"
    elif trace.first_return is None:
        why = "while the return did not improve"
    else:
        why = f"while the return stayed near its start ({trace.first_return:.3g})"
    fix = _fix(settings, "entropy_coeff", otherwise="more exploration")
    return (
        f"policy entropy fell from {start:.2f} to {current:.2g} by "
        f"{steps(trace.last.env_steps)} env steps (below half its start since {steps(since)}) "
        f"{why}: raise {fix}"
    )


def no_reward(trace: Trace, settings: Settings) -> str | None:
    episodes = trace.last.episodes_lifetime or 0
    if trace.rewarded or episodes < NO_REWARD_EPISODES or not trace.episodes_seen:
        return None
    fix = _fix(settings, "entropy_coeff", "epsilon", "initial_alpha")
    more = f"raise the exploration ({fix})" if fix else "raise the exploration"
    if settings.rnd_available:
        more += ", add an exploration bonus (exploration: {rnd: {}}, docs/exploration.md)"
    return (
        f"no episode earned a non-zero reward in the first {episodes:,.0f} episodes "
        f"({steps(trace.last.env_steps)} env steps): the exploration does not reach the reward; "
        f"{more}, or make the task denser or shorter"
    )


def kl_divergence(trace: Trace, settings: Settings) -> str | None:
    target = settings.number("kl_target", KL_DEFAULT_TARGET)
    kl, clipped = trace.recent("kl", 3), trace.recent("clip_fraction", 3)
    too_far = len(kl) == 3 and min(kl) > KL_TOO_HIGH * target
    if too_far or (len(clipped) == 3 and min(clipped) > CLIP_FRACTION_HIGH):
        since = trace.steps_since(
            lambda r: (
                (r.kl or 0) > KL_TOO_HIGH * target or (r.clip_fraction or 0) > CLIP_FRACTION_HIGH
            )
        )
        seen = f"approximate KL {statistics.fmean(kl):.3g} per update" if kl else ""
        if clipped:
            seen += f"{', ' if seen else ''}{statistics.fmean(clipped):.0%} of the rows clipped"
        fix = _fix(settings, "lr", "num_epochs")
        return (
            f"each update moves the policy too far ({seen}; the aim: KL about training."
            f"kl_target {target:g}, a clipped share under {CLIP_FRACTION_HIGH:.0%}) over the "
            f"last 3 iterations, since {steps(since)} env steps: lower {fix}"
        )
    # So far that the first updates left a deterministic policy: its KL is ~0 from then on, and
    # its entropy was ~0 already at the first reading, so neither test above nor the entropy
    # rule sees it (PPO on CartPole at lr 1.0, some seeds).
    entropy, early = trace.recent("entropy", 3), trace.recent("clip_fraction", 10)
    if len(entropy) == 3 and max(entropy) < DETERMINISTIC and max(early) > CLIP_FRACTION_HIGH:
        fix = _fix(settings, "lr", "num_epochs")
        return (
            f"each update moves the policy too far: {max(early):.0%} of the rows clipped (the "
            f"aim: under {CLIP_FRACTION_HIGH:.0%}), after which the policy is deterministic "
            f"(entropy {max(entropy):.2g} in each of the last 3 iterations) and learns no more: "
            f"lower {fix}"
        )
    recent = trace.recent("kl", 10)
    # A policy whose entropy collapsed is deterministic: its KL is ~0 whatever the learning rate.
    if len(recent) == 10 and max(recent) < KL_NOTHING and _collapsed_entropy(trace) is None:
        return (
            f"approximate KL between consecutive policies below {KL_NOTHING:g} in each of the "
            f"last 10 iterations ({steps(trace.last.env_steps)} env steps): the updates do "
            f"not change the policy; raise {_fix(settings, 'lr', otherwise='the learning rate')}"
        )
    return None


def value_unexplained(trace: Trace, settings: Settings) -> str | None:
    if trace.count("explained_variance") < EXPLAINED_VARIANCE_AFTER or not trace.rewarded:
        return None
    recent = trace.recent("explained_variance", EXPLAINED_VARIANCE_WINDOW)
    mean = statistics.fmean(recent)
    # Near 0 is also what a value function reads once returns hardly vary (every episode solved):
    # only values clearly and steadily below 0 say it predicts worse than the mean return.
    if max(recent) >= 0 or mean >= EXPLAINED_VARIANCE_LOW:
        return None
    since = trace.steps_since_all(lambda r: (r.explained_variance or 0) < 0)
    fix = _fix(settings, "vf_loss_coeff", "vf_clip_param", "lr")
    return (
        f"the value function's explained variance is {mean:.2f} (mean of the last "
        f"{EXPLAINED_VARIANCE_WINDOW} iterations, below 0 since {steps(since)} env steps): it "
        f"predicts returns (up to {trace.max_abs_return:.3g}) worse than their mean does; try "
        f"{fix}, or scale the rewards (connectors: [reward_scaling])"
    )


def q_divergence(trace: Trace, settings: Settings) -> str | None:
    q = trace.last.q_abs_max
    if q is None or not trace.episodes_seen:
        return None
    gamma = settings.number("gamma", 0.99)
    per_step, per_episode = trace.max_reward_per_step, trace.max_abs_return
    # |Q| <= r_max / (1 - gamma); r_max is read from the episodes seen: their mean reward per step,
    # or their whole return where one reward makes most of it (a sparse goal).
    bound = Q_SLACK * max(per_episode, per_step / max(1.0 - gamma, 1e-6), 1.0)
    if q <= bound:
        return None
    since = trace.steps_since(lambda r: r.q_abs_max is not None and r.q_abs_max > bound)
    seen = "not finite" if q == float("inf") else f"{q:.3g}"
    fix = _fix(settings, "critic_lr", "lr", "tau", "target_network_update_freq")
    return (
        f"Q-value estimates reached {seen} since {steps(since)} env steps, beyond the "
        f"{bound:.3g} that rewards of {per_step:.3g} per step ({per_episode:.3g} per episode) "
        f"allow with gamma {gamma:g}: the critic diverges; lower {fix}"
    )


def large_observations(trace: Trace, settings: Settings) -> str | None:
    if "mean_std_filter" in settings.connectors:
        return None
    last = trace.recent("obs_abs_mean", 3)
    if len(last) < 3 or min(last) <= OBS_LARGE:
        return None
    return (
        f"observations average {statistics.fmean(last):.3g} in magnitude per component with no "
        "normalising connector: large inputs saturate the network's first layer; add "
        "connectors: [mean_std_filter]"
    )


def actions_saturated(trace: Trace, settings: Settings) -> str | None:
    last = trace.recent("actions_at_bounds", 5)
    if trace.count("actions_at_bounds") < 10 or len(last) < 5 or trace.improved():
        return None
    share = statistics.fmean(last)
    if share <= ACTIONS_SATURATED:
        return None
    fix = _fix(settings, "lr", "actor_lr", otherwise="the learning rate")
    return (
        f"{share:.0%} of the continuous action components sat at their bounds over the last 5 "
        f"iterations ({steps(trace.last.env_steps)} env steps) and the return has not improved: "
        f"the policy pushes past the action space; lower {fix}, start its spread lower "
        "(PPO: rl_module.model_config.log_std_init), or check the env's action bounds"
    )


def truncation_dominated(trace: Trace, settings: Settings) -> str | None:
    episodes = trace.episodes_since_learning()
    if (
        episodes < TRUNCATED_EPISODES
        or not trace.rewarded  # no_reward's case
        or trace.count("truncated_fraction") < 10
        or trace.min_truncated < TRUNCATED_ALL
        or trace.improved_since_learning()
    ):
        return None
    return (
        f"every episode so far ended at the time limit, and over {episodes:,.0f} episodes "
        "since learning began the return has not improved: a goal may lie beyond the limit; "
        "raise the env's max_episode_steps (env.kwargs), or shape the reward"
    )


def reward_scale(trace: Trace, settings: Settings) -> str | None:
    if "reward_scaling" in settings.connectors:
        return None
    per_step = trace.reward_per_step()
    if per_step is None or per_step <= REWARD_PER_STEP_LARGE:
        return None
    return (
        f"rewards average {per_step:.3g} per step in magnitude with no reward normalisation: "
        "value and Q targets of that size swamp the losses (and RLlib's clipped value loss); "
        "add connectors: [reward_scaling] or scale the reward in the env"
    )


def throughput_drop(trace: Trace, settings: Settings) -> str | None:
    start, now, since = trace.throughput()
    if start is None or now is None or now >= THROUGHPUT_FALL * start:
        return None
    return (
        f"env steps per second fell from {start:,.0f} to {now:,.0f} (at {steps(since)} env "
        "steps): an env that slows as it runs (a leak) or a growing buffer; "
        "rlplat train --timings shows where an iteration's time goes"
    )


RULES: tuple[Rule, ...] = (
    Rule(
        "entropy_collapse",
        "policy entropy collapsed while the return has not improved or before any reward",
        f"entropy below {ENTROPY_COLLAPSED:g} x its first value, return not above its start",
        "Andrychowicz et al. 2021, What Matters in On-Policy RL; "
        "Ahmed et al. 2019, Understanding the Impact of Entropy on Policy Optimization",
        entropy_collapse,
    ),
    Rule(
        "no_reward",
        "no non-zero episode return in the first episodes (a sparse task not reached)",
        f"{NO_REWARD_EPISODES} episodes, all with return exactly 0",
        "Burda et al. 2019, Exploration by Random Network Distillation (sparse-reward tasks)",
        no_reward,
    ),
    Rule(
        "kl_divergence",
        "KL between consecutive policies far above the target, or always ~0",
        f"3 iterations with approximate KL above {KL_TOO_HIGH:g} x training.kl_target or over "
        f"{CLIP_FRACTION_HIGH:.0%} of rows clipped, or such clipping followed by 3 iterations "
        f"of a deterministic policy (entropy below {DETERMINISTIC:g}); 10 iterations with KL "
        f"below {KL_NOTHING:g}",
        "Schulman et al. 2017, PPO (the adaptive KL penalty and its target); Huang et al. 2022, "
        "The 37 Implementation Details of PPO (approx_kl as a debugging signal)",
        kl_divergence,
    ),
    Rule(
        "value_unexplained",
        "the value function's explained variance stays below 0",
        f"each of the last {EXPLAINED_VARIANCE_WINDOW} iterations < 0 and their mean < "
        f"{EXPLAINED_VARIANCE_LOW:g}, after {EXPLAINED_VARIANCE_AFTER} iterations and a "
        "rewarded episode",
        "Huang et al. 2022, The 37 Implementation Details of PPO (explained_variance); "
        "Andrychowicz et al. 2021 (value normalisation)",
        value_unexplained,
    ),
    Rule(
        "q_divergence",
        "Q estimates beyond what the reward scale and discount allow",
        f"|Q| > {Q_SLACK:g} x the larger of max |episode return| and max mean |reward| per step "
        "/ (1 - gamma), or not finite",
        "van Hasselt et al. 2018, Deep RL and the Deadly Triad (soft divergence, |Q| past "
        "r_max / (1 - gamma))",
        q_divergence,
    ),
    Rule(
        "large_observations",
        "observations of large magnitude with no normalising connector",
        f"mean |observation component| > {OBS_LARGE:g} in 3 iterations, no mean_std_filter",
        "Andrychowicz et al. 2021, What Matters in On-Policy RL (observation normalisation)",
        large_observations,
    ),
    Rule(
        "actions_saturated",
        "continuous actions at their bounds most of the time, return not improving",
        f"> {ACTIONS_SATURATED:.0%} of action components at a bound over 5 iterations",
        "Andrychowicz et al. 2021 (action clipping vs squashing); Haarnoja et al. 2018, SAC "
        "(action bounds enforced by tanh squashing)",
        actions_saturated,
    ),
    Rule(
        "truncation_dominated",
        "every episode ends at the time limit while the return does not improve",
        f"{TRUNCATED_ALL:.0%}+ of episodes truncated in every iteration, no better return "
        f"over {TRUNCATED_EPISODES} episodes since the first update",
        "Pardo et al. 2018, Time Limits in Reinforcement Learning",
        truncation_dominated,
    ),
    Rule(
        "reward_scale",
        "rewards of large magnitude with no reward normalisation",
        f"mean |return| / episode length > {REWARD_PER_STEP_LARGE:g}, no reward_scaling",
        "Engstrom et al. 2020, Implementation Matters in Deep Policy Gradients (reward "
        "scaling); Andrychowicz et al. 2021",
        reward_scale,
    ),
    Rule(
        "throughput_drop",
        "env steps per second fall by more than half during the run",
        f"median of the last 5 iterations < {THROUGHPUT_FALL:g} x the median of the first 5 "
        "after learning starts",
        "rlplat's own: a run's speed should not fall with time at a fixed batch",
        throughput_drop,
    ),
)
RULE_NAMES: tuple[str, ...] = tuple(rule.name for rule in RULES)


def rules_table() -> str:
    """The rules as docs/doctor.md lists them (``python -m rlplat.health``)."""
    lines = ["| rule | looks for | fires when | source |", "|---|---|---|---|"]
    for rule in RULES:
        cells = (f"`{rule.name}`", rule.looks_for, rule.threshold, rule.source)
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
