"""rlplat's own error types.

A ``UserError`` is something the user can fix (bad YAML, unknown key, impossible demand): the CLI
prints its message as one paragraph and exits with code 2. Anything else is a runtime failure
(exit 1).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class RlplatError(Exception):
    """Base class of every error rlplat raises on purpose."""

    exit_code = 1


class UserError(RlplatError):
    """Bad input: the message names the file, the key and what is allowed."""

    exit_code = 2


class Interrupted(RlplatError):
    """The run was stopped (Ctrl-C, SIGTERM) before its end; it can be resumed."""

    exit_code = 130  # the shell's code for a command ended by Ctrl-C


class EnvKeepsFailing(RlplatError):
    """The training env crashed again and again (rlplat.environments.guard); the run stops."""


class StorageFailed(RlplatError):
    """The run directory's disk is full or it cannot be written; the run can be resumed."""


class ConfigError(UserError):
    """An experiment file (or a command-line override) is invalid.

    ``location`` is ``file:line`` (or ``command line``), ``key`` the dotted key path.
    """

    def __init__(self, message: str, *, location: str | None = None, key: str | None = None):
        self.location = location
        self.key = key
        where = ", ".join(part for part in (location, f"key '{key}'" if key else None) if part)
        super().__init__(f"{where}: {message}" if where else message)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ' Did you mean 'x'?' for the closest choice, or '' when nothing is close."""
    choices = list(choices)
    matches = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    if not matches:  # then ignoring case: 'ddgp' is close to 'DDPG'
        lowered = {c.lower(): c for c in choices}
        close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
        matches = [lowered[c] for c in close]
    if not matches and len(word) >= 3:  # a part of a longer name: 'return'
        matches = sorted((c for c in choices if word.lower() in c.lower()), key=len)
    return f" Did you mean '{matches[0]}'?" if matches else ""


def allowed_list(choices: Iterable[str], limit: int = 12) -> str:
    """Format allowed values for a message, cutting long lists."""
    choices = sorted(choices)
    shown = ", ".join(choices[:limit])
    return shown + (f", ... ({len(choices) - limit} more)" if len(choices) > limit else "")


def not_among(name: str, allowed: Iterable[str], limit: int = 12) -> str:
    """`` Did you mean 'x'? Allowed: a, b, c.`` for a name that is not one of ``allowed``."""
    allowed = list(allowed)
    return did_you_mean(name, allowed) + f" Allowed: {allowed_list(allowed, limit=limit)}."


def first_line(exc: BaseException) -> str:
    """An exception's message in one line (its first), or its type's name when it has none."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
