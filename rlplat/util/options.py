"""A stage's command-line options, declared once: in the stage's own options dataclass.

Each field made with :func:`option` is an option of the stage's command, with its default, its
help text and, where they are not derived from the field's name, its flags. ``rlplat.cli`` turns
those fields into the command's Typer options, so a default or a help text is never written twice.
A field made without :func:`option` is not offered on the command line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field
from typing import Any

METADATA_KEY = "rlplat.option"


@dataclass(frozen=True)
class OptionInfo:
    """How the command line offers one field: its help text and its flags (none: ``--<name>``)."""

    help: str
    flags: tuple[str, ...] = ()


def option(
    default: Any = MISSING,
    *,
    help: str,
    flags: tuple[str, ...] = (),
    factory: Callable[[], Any] | None = None,
) -> Any:
    """A dataclass field that is also a command-line option: ``default`` (or ``factory`` for a
    mutable one), the ``help`` text, and ``flags`` where the option's names are not derived from
    the field's (``("--episodes", "-n")``, ``("--verify/--no-verify",)``)."""
    metadata = {METADATA_KEY: OptionInfo(help, flags)}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def option_info(dataclass_field: Field) -> OptionInfo | None:
    """The command-line declaration of a field, or None where the field is not an option."""
    return dataclass_field.metadata.get(METADATA_KEY)
