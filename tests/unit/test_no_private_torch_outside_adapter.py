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
    (``module.__dict__["_modules"]``);
(e) a field of torch's engine objects, public name or not: what a ShapeEnv or a
    FakeTensorMode holds (``env.var_to_range``, ``getattr(env, "guards")``) is
    their internal state, read and written through ``torch_private.shapes`` /
    ``torch_private.fake``;
(f) a regular expression run over an exception's text (``re.search(..., str(e))``,
    ``PATTERN.match(str(err))``, or over a local holding it, as in (h)): torch's
    messages are read in ``torch_private.messages`` only;
(g) a process-wide patch: an assignment to an attribute of ``builtins``,
    ``math`` or a torch module (``builtins.max = ...``, ``torch.fx.config.x = ...``),
    or ``setattr`` on one. Another thread would see it;
(h) a plain substring test on an exception's text (``"no fake impl" in str(e)``,
    ``str(err).startswith("Runtime assertion")``, or the same through a local that
    holds the text: ``text = str(e)`` ... ``"..." in text``): classify by type, or
    read torch's wording in ``torch_private.messages``.
Operator names (``torch.ops.aten._to_copy``) are public operators, not private
Python names, and dunders are fine.
"""
from __future__ import annotations

import ast
import re
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
    "_checker": "runtime/exported_module.py: module()'s input checker on the GraphModule it builds",
    "_leaf_checks_in_hook": "runtime/exported_module.py: whether module()'s hook checks leaves too",
    "_constant_fqns": "runtime/exported_module.py: the constants module() attaches as plain attributes",
    "_guards_fn": "runtime/exported_module.py: the input-guards submodule module() adds",
}


# (e) Fields of ShapeEnv / FakeTensorMode that graphcap may name outside the adapter, with why.
ENGINE_FIELDS_ALLOWED = {
    "shape_env": "FakeTensorMode.shape_env / SymNode.shape_env: the documented way from a fake mode or "
                 "a symbolic value to its ShapeEnv",
    "settings": "module_inputs' own settings objects (graphcap's; ShapeEnv.settings is never read)",
}

# (g) Modules whose attributes are process-wide state, and the one sanctioned writer of each.
PATCHED_MODULES = ("builtins", "math", "torch")
PATCH_ALLOWED = {
    "trace/python_overrides.py": "_apply_builtins installs max/min/math.pow wrappers that act on the "
                                 "exporting thread only (a thread-local depth) and call the originals "
                                 "on every other thread; tests/unit/test_trace_thread_isolation.py",
}

_MATCHERS = {"search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"}
_ERROR_NAMES = {"e", "err", "exc", "error", "exception", "cause"}


def _engine_fields() -> set[str]:
    """Instance fields of a fresh ShapeEnv and FakeTensorMode (public names included)."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    from graphcap.torch_private.fake import FakeTensorMode
    fields = set(vars(ShapeEnv())) | set(vars(FakeTensorMode()))
    # and every field the adapter declares for them, under each name any supported torch line uses
    # ("ShapeEnv#backed_var_to_val|var_to_val"): a line that lacks one still refuses it elsewhere
    import importlib
    import pkgutil

    import graphcap.torch_private as package
    for info in pkgutil.iter_modules(package.__path__):
        for path in getattr(importlib.import_module(f"{package.__name__}.{info.name}"), "RELIES_ON", {}):
            owner, _, field = path.partition("#")
            if field and owner.rsplit(".", 1)[-1] in ("ShapeEnv", "FakeTensorMode"):
                fields.update(field.split("|"))
    return {name for name in fields if not name.startswith("__")} - set(ENGINE_FIELDS_ALLOWED)


def _error_names(tree: ast.AST) -> set[str]:
    """Names that hold an exception: ``except ... as e``, parameters annotated as one, usual names."""
    names = set(_ERROR_NAMES)
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.arg) and node.annotation is not None \
                and re.search(r"(Exception|Error)\b", ast.unparse(node.annotation)):
            names.add(node.arg)
    return names


def _is_error_text(node: ast.AST, errors: set[str]) -> bool:
    """``str(e)``, ``repr(e)``, ``e.args``, ``e.args[0]``, ``str(e).lower()``, ... for an exception name."""
    while isinstance(node, (ast.Subscript, ast.Call, ast.Attribute)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("str", "repr") \
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in errors:
            return True
        if isinstance(node, ast.Attribute) and node.attr == "args" and isinstance(node.value, ast.Name) \
                and node.value.id in errors:
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


# (h) str methods that test an exception's text for a wording
_TEXT_TESTS = {"startswith", "endswith", "find", "rfind", "index", "rindex", "count"}


def _derives_error_text(node: ast.AST, errors: set[str], texts: set[str]) -> bool:
    """Whether ``node`` is an exception's text or part of it: ``str(e)``, ``str(e).lower()``,
    ``e.args[0]``, a local in ``texts`` (``text``, ``text.split(...)[1]``), or a conditional
    expression / ``or`` with one of these among its values."""
    if isinstance(node, ast.IfExp):
        return _derives_error_text(node.body, errors, texts) or _derives_error_text(node.orelse, errors, texts)
    if isinstance(node, ast.BoolOp):
        return any(_derives_error_text(v, errors, texts) for v in node.values)
    if _is_error_text(node, errors):
        return True
    while isinstance(node, (ast.Subscript, ast.Call, ast.Attribute)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return isinstance(node, ast.Name) and node.id in texts


def _error_text_locals(function: ast.AST, errors: set[str]) -> set[str]:
    """Locals of ``function`` that hold an exception's text: assigned from it (``text = str(e)``,
    ``first = str(e).splitlines()[0]``) or iterating over it (``for line in text.splitlines()``)."""
    texts: set[str] = set()
    grew = True
    while grew:
        grew = False
        for node in ast.walk(function):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and node.value is not None:
                targets, value = (node.targets if isinstance(node, ast.Assign) else [node.target]), node.value
            elif isinstance(node, (ast.For, ast.comprehension)):
                targets, value = [node.target], node.iter
            else:
                continue
            if not _derives_error_text(value, errors, texts):
                continue
            for target in targets:
                if isinstance(target, ast.Name) and target.id not in texts:
                    texts.add(target.id)
                    grew = True
    return texts


def _message_reading_hits(tree: ast.AST, where: str, errors: set[str]) -> list[str]:
    """(f) a regular expression over an exception's text and (h) a substring test on it
    (``"..." in str(e)``, ``str(e).startswith(...)``), directly or through a local holding the text."""
    hits = []
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
    seen: set[int] = set()
    for function in [tree, *functions]:
        texts = _error_text_locals(function, errors) if function is not tree else set()
        for node in ast.walk(function):
            found = None
            if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
                if any(_derives_error_text(side, errors, texts) for side in [node.left, *node.comparators]):
                    found = "a substring test on an exception's text"
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in _TEXT_TESTS and _derives_error_text(node.func.value, errors, texts):
                    found = f".{node.func.attr}() on an exception's text"
                elif node.func.attr in _MATCHERS and any(_derives_error_text(a, errors, texts) for a in
                                                         list(node.args) + [k.value for k in node.keywords]):
                    found = "a regular expression over an exception's text"
            if found and id(node) not in seen:
                seen.add(id(node))
                hits.append(f"{where}:{node.lineno}: {found} ({ast.unparse(node)[:60]}): classify by type, "
                            f"or read torch's wording in torch_private.messages")
    return hits


def _patched_module_aliases(tree: ast.AST) -> dict[str, str]:
    """Local names bound to a ``PATCHED_MODULES`` module or one of its attributes, with what they
    name: ``import builtins as b`` (b -> builtins), ``from torch.fx import config as cfg``
    (cfg -> torch.fx.config). An assignment through one patches the process as the full name does."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname and a.name.split(".", 1)[0] in PATCHED_MODULES:
                    aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".", 1)[0] in PATCHED_MODULES:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def _full_name(dotted: str | None, aliases: dict[str, str]) -> str | None:
    if not dotted:
        return dotted
    head, _, rest = dotted.partition(".")
    return (aliases[head] + ("." + rest if rest else "")) if head in aliases else dotted


def _is_module_patch(target: ast.AST, aliases: dict[str, str]) -> str | None:
    dotted = _full_name(_dotted(target), aliases) if isinstance(target, ast.Attribute) else None
    if dotted and dotted.split(".", 1)[0] in PATCHED_MODULES:
        return dotted
    return None


def _graphcap_module_names(tree: ast.AST) -> set[str]:
    """Names bound to graphcap's own modules (``from ..torch_private import shapes``): their
    attributes are graphcap's functions, even where one is named like the field it reads."""
    return {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level > 0
            for a in node.names}


def _rule_e_f_g_hits(tree: ast.AST, where: str, engine_fields: set[str], allow_patch: bool) -> list[str]:
    hits = []
    errors = _error_names(tree)
    own_modules = _graphcap_module_names(tree)
    aliases = _patched_module_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in engine_fields and not node.attr.startswith("_"):
            on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls") + tuple(own_modules)
            if not on_self:
                hits.append(f"{where}:{node.lineno}: field {node.attr!r} of torch's ShapeEnv / FakeTensorMode "
                            f"({ast.unparse(node)}): use torch_private.shapes / torch_private.fake")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) > 1 \
                and isinstance(node.args[1], ast.Constant) and node.args[1].value in engine_fields:
            hits.append(f"{where}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r}): a field of torch's "
                        f"ShapeEnv / FakeTensorMode")
        if not allow_patch:
            targets = []
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    targets.extend(target.elts if isinstance(target, ast.Tuple) else [target])
            elif isinstance(node, ast.Delete):
                targets = node.targets
            for target in targets:
                dotted = _is_module_patch(target, aliases)
                if dotted:
                    hits.append(f"{where}:{node.lineno}: process-wide patch of {dotted}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("setattr", "delattr") and node.args \
                    and (_full_name(_dotted(node.args[0]), aliases) or "").split(".", 1)[0] in PATCHED_MODULES:
                hits.append(f"{where}:{node.lineno}: process-wide patch {node.func.id}("
                            f"{_full_name(_dotted(node.args[0]), aliases)}, ...)")
    return hits + _message_reading_hits(tree, where, errors)


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


def _hits(path: Path, own: set[str], torch_fields: set[str], engine_fields: set[str] = frozenset(),
          where: str | None = None) -> list[str]:
    tree = ast.parse(path.read_text())
    aliases = _operator_aliases(tree)
    where = where or path.relative_to(SRC).as_posix()
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
    return hits + _rule_e_f_g_hits(tree, where, engine_fields, allow_patch=where in PATCH_ALLOWED)


def test_no_private_torch_name_outside_the_adapter_package():
    own = _own_private_names()
    torch_fields = _torch_fields()
    engine_fields = _engine_fields()
    hits = []
    for path in _sources():
        if path.relative_to(SRC).as_posix() in TEMPORARILY_EXEMPT:
            continue
        hits.extend(_hits(path, own, torch_fields, engine_fields))
    assert not hits, ("private torch names used outside src/graphcap/torch_private/ "
                      "(add a named function there, with its RELIES_ON entry):\n" + "\n".join(sorted(set(hits))))


def test_temporary_exemptions_still_exist():
    missing = [name for name in TEMPORARILY_EXEMPT if not (SRC / name).exists()]
    assert not missing, f"remove from TEMPORARILY_EXEMPT (file gone): {missing}"


PLANTED = """
import builtins, math, re
import torch

def reads_engine_state(fake_mode, env):
    ranges = env.var_to_range                      # (e) a ShapeEnv field, public name
    env.backed_var_to_val[0] = 1                   # (e) written
    cache = getattr(env, "fake_tensor_cache")      # (e) by name
    return fake_mode.fake_tensor_converter, ranges, cache  # (e) a FakeTensorMode field

def parses_torch_message(e):
    found = re.search(r"data-dependent expression (.+?) ", str(e))   # (f)
    return found

_PATTERN = re.compile("no fake impl")

def parses_caught(call):
    try:
        call()
    except RuntimeError as failure:
        return _PATTERN.match(failure.args[0])    # (f) a compiled pattern over e.args

def classifies_by_wording(e):
    if "data-dependent" in str(e).lower():         # (h) a substring test
        return 1
    if str(e).startswith("Runtime assertion"):     # (h) a prefix test
        return 2
    text = str(e).strip() if str(e) else ""
    head = text.split("Got graph break/error:", 1)[-1]
    for line in head.splitlines():
        if line.strip().startswith("Developer"):   # (h) through locals that hold the text
            return 3
    if re.search(r"from user code:(.*)", head):     # (f) a regular expression through a local
        return 4
    return "non-Fake Tensor" not in text           # (h)

def patches_the_process():
    builtins.max = lambda *a: 0                    # (g)
    builtins.min, math.pow = min, pow              # (g) tuple target
    torch.fx.config.do_not_emit_stack_traces = True  # (g) a torch flag
    setattr(builtins, "round", None)               # (g)

import builtins as b, math as m
import torch.fx.config as fx_config
from torch.fx import config as cfg
from torch._dynamo import config as dynamo_config  # (a) a private module, and patched below

def patches_through_other_names():
    b.max = None                                   # (g) builtins.max under another name
    m.pow = None                                   # (g)
    fx_config.do_not_emit_stack_traces = True      # (g) torch.fx.config's flag under another name
    cfg.do_not_emit_stack_traces = True            # (g)
    setattr(dynamo_config, "verbose", True)        # (g)
"""


def test_the_rule_catches_planted_engine_reads_message_regexes_and_patches(tmp_path):
    """A module outside the adapter that reads ShapeEnv / fake-mode fields, parses an exception's
    text with a regular expression or tests it for a substring, or patches builtins / a torch flag
    is named, line by line."""
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)
    hits = _hits(planted, _own_private_names(), _torch_fields(), _engine_fields(), where="planted.py")
    text = "\n".join(hits)
    lines = {int(h.split(":")[1]) for h in hits}
    expected = {i for i, line in enumerate(PLANTED.splitlines(), 1) if "# (" in line}
    assert lines == expected, f"caught lines {sorted(lines)}, planted {sorted(expected)}:\n{text}"
    for what in ("var_to_range", "backed_var_to_val", "'fake_tensor_cache'", "fake_tensor_converter",
                 "regular expression", "a substring test on an exception's text", ".startswith()",
                 "builtins.max", "builtins.min", "math.pow",
                 "torch.fx.config.do_not_emit_stack_traces", "setattr(builtins",
                 "setattr(torch._dynamo.config"):
        assert what in text, f"{what} not named:\n{text}"


def test_the_sanctioned_builtins_patch_is_caught_anywhere_else(tmp_path):
    """python_overrides' thread-dispatching wrappers are the one allowed patch: the same code in
    another file is a process-wide patch."""
    source = (SRC / "trace" / "python_overrides.py").read_text()
    copy = tmp_path / "copied_overrides.py"
    copy.write_text(source)
    hits = _hits(copy, _own_private_names(), _torch_fields(), _engine_fields(), where="elsewhere.py")
    assert any("process-wide patch of builtins.max" in h for h in hits), hits
