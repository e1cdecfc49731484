"""The seams rule: Ray's, RLlib's and Tune's private names are named in ``rlplat/seams/`` only.

A private name is one that starts with a single ``_``. Outside the seam package rlplat may not

- import a private module of Ray (``ray._private``, ``ray.air._internal``...) or a private name
  from one of Ray's modules;
- name, in a class that derives from a Ray class, a private attribute or method that the Ray
  classes it derives from have (``self._params``, an override of ``_sample_episodes``);
- name, in a mixin meant for Ray classes (a class without a Ray base), a private attribute of
  ``self`` that rlplat never defines (it can only be the Ray class's);
- name a private attribute that some Ray module defines on any other object
  (``runner._seed``, ``internal_kv._internal_kv_get``), unless rlplat defines that name itself;
- pass a private keyword argument that some Ray function takes (``_no_metrics_reduce=``).

Exempt: RLlib's documented override points that start with ``_`` (an RLModule's forward passes).
Run ``python -m tests.seams_rule`` to list what breaks the rule.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import ray

RLPLAT = Path(__file__).parents[1] / "rlplat"  # read as files: importing rlplat loads its CLI
SEAMS = RLPLAT / "seams"

# RLModule's forward passes: RLlib's documented way to write a module ("override _forward").
OVERRIDE_POINTS = frozenset(
    {"_forward", "_forward_inference", "_forward_exploration", "_forward_train"}
)
_DEFINED = re.compile(r"(?:\bdef |\bclass |\bself\.|^\s*)(_[A-Za-z][A-Za-z0-9_]*)\s*[(:=]", re.M)


@dataclass(frozen=True)
class Touch:
    """One use of a private name of Ray outside the seam package."""

    path: str
    line: int
    name: str
    how: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.how} {self.name}"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in OVERRIDE_POINTS


@functools.cache
def ray_private_names() -> frozenset[str]:
    """Every private name that Ray's sources define (functions, classes, attributes, globals)."""
    names: set[str] = set()
    for path in Path(ray.__file__).parent.rglob("*.py"):
        try:
            names.update(_DEFINED.findall(path.read_text(errors="ignore")))
        except OSError:
            continue
    return frozenset(name for name in names if _private(name))


def _ray_class_names(cls: type) -> set[str]:
    """The private names a class's Ray bases have: their members, and the ``self._x`` their
    modules' sources name (a module's whole source: cheap, and a superset)."""
    names: set[str] = set()
    for base in cls.__mro__:
        if base.__module__.startswith("ray."):
            names.update(name for name in vars(base) if _private(name))
            names.update(_self_names_in_module(base.__module__))
    return names


@functools.cache
def _self_names_in_module(module: str) -> frozenset[str]:
    try:
        source = Path(inspect.getfile(importlib.import_module(module))).read_text()
    except (OSError, TypeError):
        return frozenset()
    return frozenset(n for n in re.findall(r"self\.(_[A-Za-z]\w*)", source) if _private(n))


def _modules() -> list[str]:
    names = ["rlplat"]
    for info in pkgutil.walk_packages([str(RLPLAT)], prefix="rlplat."):
        if not info.name.startswith("rlplat.seams"):
            names.append(info.name)
    return names


def _source_path(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin)


def _self_names(node: ast.ClassDef) -> tuple[set[str], list[tuple[int, str, str]]]:
    """A class body's own private definitions, and its private uses of ``self``, ``cls`` and
    ``super()``."""
    defined: set[str] = set()
    used: list[tuple[int, str, str]] = []
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and _private(item.name):
            used.append((item.lineno, item.name, "defines"))
        for target in _class_targets(item):
            if _private(target):
                used.append((item.lineno, target, "defines"))
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and _private(sub.attr):
            base = sub.value
            on_self = isinstance(base, ast.Name) and base.id in ("self", "cls")
            on_super = isinstance(base, ast.Call) and getattr(base.func, "id", "") == "super"
            if on_self or on_super:
                if isinstance(sub.ctx, ast.Store) and on_self:
                    defined.add(sub.attr)
                used.append((sub.lineno, sub.attr, "calls super()'s" if on_super else "uses"))
    return defined, used


def _class_targets(item: ast.stmt) -> list[str]:
    if isinstance(item, ast.Assign):
        return [t.id for t in item.targets if isinstance(t, ast.Name)]
    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
        return [item.target.id]
    return []


def touches() -> list[Touch]:
    """Every use of a private name of Ray in rlplat outside ``rlplat/seams/``."""
    ray_names = ray_private_names()
    found: list[Touch] = []
    trees: dict[str, tuple[Path, ast.Module]] = {}
    own: set[str] = set()
    for module in _modules():
        path = _source_path(module)
        tree = ast.parse(path.read_text())
        trees[module] = (path, tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.col_offset == 0:
                own.add(node.name)
            if isinstance(node, ast.Assign) and node.col_offset == 0:
                own.update(t.id for t in node.targets if isinstance(t, ast.Name))
    classes: dict[tuple[str, str], type] = {}
    for module in trees:
        imported = importlib.import_module(module)
        for name, value in vars(imported).items():
            if inspect.isclass(value) and value.__module__ == module:
                classes[(module, name)] = value
    # rlplat's own names: what its classes define beyond the Ray classes they derive from
    class_nodes: list[tuple[str, Path, ast.ClassDef]] = []
    defines: dict[tuple[str, str], set[str]] = {}
    for module, (path, tree) in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                class_nodes.append((module, path, node))
                defined, used = _self_names(node)
                defined |= {name for _, name, how in used if how == "defines"}
                defines[(module, node.name)] = defined
                cls = classes.get((module, node.name))
                own.update(defined - (_ray_class_names(cls) if cls else set()))
    own -= ray_names  # a name Ray defines too counts as Ray's where the object is not self
    for module, path, node in class_nodes:
        cls = classes.get((module, node.name))
        relative = str(path.relative_to(RLPLAT.parent))
        inherited = _ray_class_names(cls) if cls else set()
        mro = cls.__mro__ if cls else ()
        class_own = set().union(
            *(defines.get((c.__module__, c.__name__), set()) for c in mro),
            defines[(module, node.name)],
        )
        _, used = _self_names(node)
        for line, name, how in used:
            if name in inherited:
                found.append(Touch(relative, line, name, f"{how} Ray's"))
            elif not inherited and name in ray_names and (name not in class_own or "super" in how):
                found.append(Touch(relative, line, name, "mixin uses Ray's"))
    for path, tree in trees.values():
        relative = str(path.relative_to(RLPLAT.parent))
        modules_here = _imported_modules(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray":
                parts = node.module.split(".")
                for alias in node.names:
                    if any(_private(p) for p in parts) or _private(alias.name):
                        found.append(
                            Touch(relative, node.lineno, f"{node.module}:{alias.name}", "imports")
                        )
            if isinstance(node, ast.Import):
                for alias in node.names:
                    parts = alias.name.split(".")
                    if parts[0] == "ray" and any(_private(p) for p in parts):
                        found.append(Touch(relative, node.lineno, alias.name, "imports"))
            if isinstance(node, ast.Attribute) and _private(node.attr):
                base = node.value
                if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                    continue
                if isinstance(base, ast.Call) and getattr(base.func, "id", "") == "super":
                    continue
                if isinstance(base, ast.Name) and base.id in modules_here:
                    if modules_here[base.id].split(".")[0] != "ray":
                        continue  # os._exit, torch._foreach_norm: not Ray's
                    found.append(Touch(relative, node.lineno, node.attr, "uses Ray's"))
                elif node.attr in ray_names and node.attr not in own:
                    found.append(Touch(relative, node.lineno, node.attr, "uses Ray's"))
            if isinstance(node, ast.keyword) and node.arg and _private(node.arg):
                if node.arg in ray_names and node.arg not in own:  # update(_no_metrics_reduce=)
                    found.append(Touch(relative, node.value.lineno, node.arg, "passes Ray's"))
    return sorted(set(found), key=lambda t: (t.path, t.line, t.name))


def _imported_modules(tree: ast.Module) -> dict[str, str]:
    """Local names bound by imports, to where they come from (``import x.y as z``: x.y;
    ``from x import y``: x.y, a module or not): a name from outside Ray is not Ray's."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = alias.name
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def seams() -> list[tuple[str, str, object]]:
    """Every seam: (its module's short name, its name, the object), in ``__all__`` order."""
    found = []
    for info in pkgutil.iter_modules([str(SEAMS)]):
        module = importlib.import_module(f"rlplat.seams.{info.name}")
        found.extend((info.name, name, getattr(module, name)) for name in module.__all__)
    return found


def seam_table() -> str:
    """docs/upgrading.md's table: each seam, the first sentence of its docstring, its canary."""
    rows = ["| seam | stands for | canary |", "|---|---|---|"]
    for area, name, seam in seams():
        summary = " ".join((inspect.getdoc(seam) or "").split("\n\n")[0].split())
        canary = f"tests/unit/test_seams_{area}.py::test_{snake_case(name)}"
        rows.append(f"| `seams/{area}.py::{name}` | {summary} | `{canary}` |")
    return "\n".join(rows)


def snake_case(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


if __name__ == "__main__":
    import sys

    if "--table" in sys.argv:
        print(seam_table())
    else:
        for touch in touches():
            print(touch)
