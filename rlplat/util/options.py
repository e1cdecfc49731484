"""A stage's command-line options, declared once: in the stage's own options dataclass.

Each field made with :func:`option` is an option of the stage's command, with its default, its
help text and, where they are not derived from the field's name, its flags. ``rlplat.cli`` turns
those fields into the command's Typer options, so a default or a help text is never written twice.
A field made without :func:`option` is not offered on the command line.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field
from typing import Annotated, Any

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


def typer_parameters(options: type, kind: Any) -> list[inspect.Parameter]:
    """The command's parameters (of ``kind``) for the option fields of the dataclass ``options``,
    as Typer reads them: the field's type and default, an ``Option`` with its help and flags (a
    bool's: ``--<name>``, a flag without a ``--no-`` form). A factory's field defaults to None
    here (:func:`from_values` then leaves it to the factory); a field without a default is a
    required option."""
    import typer  # noqa: PLC0415 - the command line's alone

    hints = typing.get_type_hints(options)
    params = []
    for each in dataclasses.fields(options):
        info = option_info(each)
        if info is None:
            continue
        hint, default = hints[each.name], each.default
        if each.default_factory is not MISSING:
            hint, default = hint | None, None
        elif default is MISSING:
            default = inspect.Parameter.empty
        flags = info.flags or ((f"--{each.name.replace('_', '-')}",) if hint is bool else ())
        annotation = Annotated[hint, typer.Option(*flags, help=info.help)]
        params.append(inspect.Parameter(each.name, kind, default=default, annotation=annotation))
    return params


def from_values(options: type, values: dict[str, Any]) -> Any:
    """The dataclass ``options`` built from a command's parameter values, which it takes out of
    ``values``; an option left unset (None) keeps the dataclass's default."""
    given = {f.name: values.pop(f.name) for f in dataclasses.fields(options) if option_info(f)}
    return options(**{name: value for name, value in given.items() if value is not None})
