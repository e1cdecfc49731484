"""Read YAML keeping each key's line, and write YAML that reads back the same.

Duplicate keys and tabs are errors (ruamel.yaml's safe-by-default round-trip loader refuses both);
we turn its exceptions into a ``ConfigError`` that names the file and the line.
"""

from __future__ import annotations

import io
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from rlplat.errors import ConfigError

KeyPath = tuple[str | int, ...]


# Values an experiment may hold once YAML aliases are expanded: aliases that refer to aliases
# grow exponentially ("billion laughs"), and a file of a few hundred bytes would fill memory.
MAX_VALUES = 100_000


class _Budget:
    def __init__(self, source: str):
        self.source = source
        self.left = MAX_VALUES

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise ConfigError(
                f"the file holds more than {MAX_VALUES:,} values once its YAML aliases (*name) "
                "are expanded: aliases that refer to other aliases multiply. Write the values "
                "out, or refer to each anchor fewer times.",
                location=self.source,
            )


def _plain(node: Any, path: KeyPath, lines: dict[KeyPath, int], budget: _Budget) -> Any:
    """Convert ruamel's nodes to plain dict/list/scalars, recording 1-based line numbers."""
    budget.spend()
    if isinstance(node, CommentedMap):
        out = {}
        for key, value in node.items():
            try:
                lines[(*path, key)] = node.lc.key(key)[0] + 1
            except (KeyError, TypeError):
                pass
            out[key] = _plain(value, (*path, key), lines, budget)
        return out
    if isinstance(node, CommentedSeq):
        out_list = []
        for index, value in enumerate(node):
            try:
                lines[(*path, index)] = node.lc.item(index)[0] + 1
            except (KeyError, TypeError):
                pass
            out_list.append(_plain(value, (*path, index), lines, budget))
        return out_list
    # ruamel keeps the source format in scalar subclasses (ScalarFloat, ScalarInt, ...).
    for kind in (bool, int, float, str):
        if isinstance(node, kind):
            return kind(node)
    return node


def parse_yaml(text: str, source: str) -> tuple[Any, dict[KeyPath, int]]:
    """Parse YAML text; return plain data and a map from key path to line number."""
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        data = yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f"{source}:{mark.line + 1}" if mark else source
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        if "found character '\\t'" in str(exc):
            problem = "tabs are not allowed for indentation in YAML; indent with spaces"
        elif "duplicate key" in str(exc):
            problem = problem.replace("\n", " ") + " (each key may appear only once)"
        raise ConfigError(f"invalid YAML: {problem}.", location=line) from None
    except YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}".replace("\n", " "), location=source) from None
    except TypeError:  # ruamel hashes a complex key (``? {a: [1]}``), and a list is unhashable
        raise ConfigError(
            "invalid YAML: a key is itself a mapping holding a list (a '?' complex key); "
            "experiment keys are names.",
            location=source,
        ) from None
    lines: dict[KeyPath, int] = {}
    return _plain(data, (), lines, _Budget(source)), lines


def dump_yaml(data: Any) -> str:
    """Serialise plain data (dicts, lists, scalars) to block-style YAML."""
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False
    buffer = io.StringIO()
    yaml.dump(data, buffer)
    return buffer.getvalue()
