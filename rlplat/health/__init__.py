"""Training-health diagnoses: rules over a trial's results that say what is wrong with a run that
trains without error and learns nothing, and the setting to try (docs/doctor.md).

``TrialHealth`` follows one trial result by result (the Tune callback while it trains,
``rlplat doctor`` afterwards over its ``result.json``); each rule fires at most once per trial.
Pure: plain result dicts in, ``Finding``s out; no Ray, no files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from rlplat.health.reading import Reading, Settings
from rlplat.health.rules import RULE_NAMES, RULES
from rlplat.health.trace import Trace

__all__ = ["RULE_NAMES", "RULES", "Finding", "Settings", "TrialHealth", "replay"]


@dataclass(frozen=True)
class Finding:
    """A diagnosis that fired: which rule, when (the result it fired on) and its line."""

    rule: str
    iteration: int
    env_steps: int
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class TrialHealth:
    """The rules over one trial's results, in order; each fires at most once."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.trace = Trace()
        self.findings: list[Finding] = []

    def observe(self, row: Mapping[str, Any]) -> list[Finding]:
        """Read one result; the diagnoses it set off (none that fired before)."""
        config = row.get("config")
        if not self.trace.readings and isinstance(config, Mapping):
            # The algorithm's whole config, as the trial ran it, over the defaults given.
            self.settings = replace(self.settings, config={**self.settings.config, **config})
        self.trace.add(Reading.of(row, self.settings.q_metrics))
        fired = {finding.rule for finding in self.findings}
        new = []
        for rule in RULES:
            if rule.name in fired or rule.name in self.settings.off:
                continue
            message = rule.check(self.trace, self.settings)
            if message:
                last = self.trace.last
                new.append(Finding(rule.name, last.iteration, int(last.env_steps), message))
        self.findings += new
        return new


def replay(rows: Iterable[Mapping[str, Any]], settings: Settings) -> TrialHealth:
    """The rules over a trial's results, oldest first (a finished trial's or a running one's)."""
    health = TrialHealth(settings)
    for row in rows:
        health.observe(row)
    return health
