"""Nothing in src/graphcap outside ``torch_private/`` touches a private torch name.

The adapter package (``graphcap.torch_private``) is the one place for torch's
private surface (docs/architecture.md). This scans graphcap's source and fails naming
``file:line`` for
(a) an import or dotted access of a private torch path (``torch._x``,
    ``torch.utils._pytree``, ``torch.fx.graph._PyTreeInfo``);
(b) ``from torch... import _name``;
(c) a private attribute ``obj._name`` (or ``getattr(obj, "_name")``) whose
    name graphcap does not define itself: torch's or a library's field;
(d) a string that is the name of a private field of a common torch object
    (``module.__dict__["_modules"]``).
Operator names (``torch.ops.aten._to_copy``) are public operators, not private
Python names, and dunders are fine.
"""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "graphcap"
ADAPTER = SRC / "torch_private"

TEMPORARILY_EXEMPT: set[str] = set()

# Private names of Python and its libraries that are their documented protocol.
NOT_TORCH = {
    "_getframe": "sys._getframe: the stdlib's way to read a caller's frame (CPython, documented)",
    "_fields": "namedtuple's documented field list",
    "_asdict": "namedtuple's documented method",
    "_make": "namedtuple's documented constructor",
    "_replace": "namedtuple's documented method",
    "_name_": "Enum's documented member name (a sunder)",
    "_value_": "Enum's documented member value (a sunder)",
    "_missing_": "Enum's documented lookup hook (a sunder)",
    "_print": "sympy's documented printer protocol (Printer._print dispatches to _print_<Class>)",
}

# Private attributes graphcap itself attaches to objects it builds (not torch's fields).
OWN_ATTACHED = {
    "_checker": "runtime.py: module()'s input checker on the GraphModule it builds",
    "_leaf_checks_in_hook": "runtime.py: whether module()'s hook checks leaves too",
    "_constant_fqns": "runtime.py: the constants module() attaches as plain attributes",
    "_guards_fn": "runtime.py: the input-guards submodule module() adds",
}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


# The case catalogue's programs are user code: they call what users call (torch._check included).
USER_PROGRAMS = SRC / "cases"


def _sources():
    return sorted(p for p in SRC.rglob("*.py") if ADAPTER not in p.parents and USER_PROGRAMS not in p.parents)


def _own_private_names() -> set[str]:
    """Private names graphcap defines: defs, classes, globals, ``self._x``/``cls._x``, parameters, aliases."""
    own = set(OWN_ATTACHED)
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                own.update(a.asname for a in node.names if a.asname)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for sub in ast.walk(target):
                        if isinstance(sub, ast.Name):
                            own.add(sub.id)
                        elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) \
                                and sub.value.id in ("self", "cls"):
                            own.add(sub.attr)
    return {name for name in own if _is_private(name)}


def _torch_fields() -> set[str]:
    """Private attributes of common torch objects: a graphcap name that coincides with one of
    these is only graphcap's on ``self``/``cls`` (its own class), never on another object."""
    import torch
    graph = torch.fx.Graph()
    node = graph.placeholder("x")
    graph.output(node)
    samples = (torch.nn.BatchNorm1d(1), torch.fx.GraphModule(torch.nn.Module(), graph), graph, node,
               torch.ones(1), torch.ops.aten.add.Tensor, torch.fx.Tracer())
    return {name for obj in samples for name in dir(obj) if _is_private(name)}


def _operator_aliases(tree: ast.AST) -> set[str]:
    """Names bound to an operator namespace (``aten = torch.ops.aten``): their attributes are operators."""
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and (_dotted(node.value) or "").startswith("torch.ops"):
            aliases.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return aliases


def _is_operator_lookup(dotted: str | None, aliases: set[str]) -> bool:
    return bool(dotted) and (dotted.startswith("torch.ops.") or dotted.split(".", 1)[0] in aliases)


def _private_torch_path(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] == "torch" and any(_is_private(p) for p in parts[1:])


def _hits(path: Path, own: set[str], torch_fields: set[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    aliases = _operator_aliases(tree)
    where = path.relative_to(SRC).as_posix()
    inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    hits = []

    def hit(node, what):
        hits.append(f"{where}:{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _private_torch_path(alias.name):
                    hit(node, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _private_torch_path(node.module):
                hit(node, f"from {node.module} import ...")
            elif node.module.split(".")[0] == "torch":
                for alias in node.names:
                    if _is_private(alias.name):
                        hit(node, f"from {node.module} import {alias.name}")
        elif isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if _is_operator_lookup(dotted, aliases):
                continue
            if dotted and dotted.split(".", 1)[0] == "torch":
                if _private_torch_path(dotted) and id(node) not in inner:  # reported once, whole
                    hit(node, f"private torch path {dotted}")
            elif _is_private(node.attr) and node.attr not in NOT_TORCH:
                on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
                if node.attr not in own or (node.attr in torch_fields and not on_self):
                    hit(node, f"private attribute {dotted or '<expr>.' + node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in torch_fields \
                and node.value not in NOT_TORCH:
            hit(node, f"the name of torch's private field {node.value!r} (e.g. a __dict__ key)")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) > 1 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            name = node.args[1].value
            if _is_private(name) and (name not in own or name in torch_fields) and name not in NOT_TORCH:
                hit(node, f'{node.func.id}(..., "{name}")')
    return hits


def test_no_private_torch_name_outside_the_adapter_package():
    own = _own_private_names()
    torch_fields = _torch_fields()
    hits = []
    for path in _sources():
        if path.relative_to(SRC).as_posix() in TEMPORARILY_EXEMPT:
            continue
        hits.extend(_hits(path, own, torch_fields))
    assert not hits, ("private torch names used outside src/graphcap/torch_private/ "
                      "(add a named function there, with its RELIES_ON entry):\n" + "\n".join(sorted(set(hits))))


def test_temporary_exemptions_still_exist():
    missing = [name for name in TEMPORARILY_EXEMPT if not (SRC / name).exists()]
    assert not missing, f"remove from TEMPORARILY_EXEMPT (file gone): {missing}"
