"""Every private torch name graphcap relies on still exists, with the expected shape.

Each module of ``graphcap.torch_private`` declares ``RELIES_ON`` (see the
package docstring). This test resolves every entry against the installed torch
and checks it: a callable has the expected leading parameter names, an
attribute exists, an instance field exists on an instance built here. A
failure names the entry and the adapter function(s) using it, so a torch
upgrade that moves something is a one-line diagnosis.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
import torch

import graphcap.torch_private as package


def _adapter_modules():
    return [importlib.import_module(f"{package.__name__}.{info.name}")
            for info in pkgutil.iter_modules(package.__path__)]


def _entries():
    for module in _adapter_modules():
        for path, expected in getattr(module, "RELIES_ON", {}).items():
            yield pytest.param(module, path, expected, id=f"{module.__name__.rsplit('.', 1)[-1]}:{path}")


def _resolve(dotted: str):
    """The object at ``dotted``: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for i, attr in enumerate(parts[cut:], cut):
            if not hasattr(obj, attr):
                raise LookupError(f"{'.'.join(parts[:i])} has no attribute {attr!r}")
            obj = getattr(obj, attr)
        return obj
    raise LookupError(f"no importable module in {dotted!r}")


def _users(module, path: str) -> str:
    """The adapter functions (or re-exports) of ``module`` whose source mentions the entry's name.

    The last dotted name is looked for first, then the one before it if it is a class.
    """
    source = Path(module.__file__).read_text()
    parts = path.replace("#", ".").split(".")
    names = parts[-1].split("|")[:1] + ([parts[-2]] if len(parts) > 1 and parts[-2][:1].isupper() else [])
    for name in names:
        users = []
        for node in ast.parse(source).body:
            segment = ast.get_source_segment(source, node) or ""
            if name not in segment or _is_relies_on(node):
                continue
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                users.append(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = getattr(node, "targets", None) or [node.target]
                users.extend(f"{t.id} (re-export)" for t in targets if isinstance(t, ast.Name) and t.id != "__all__")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                users.extend(f"{a.asname or a.name} (re-export)" for a in node.names if name in (a.name, a.asname))
        if users:
            return ", ".join(users)
    return "(not named in the module: a field or convention its functions rely on)"


def _is_relies_on(node) -> bool:
    return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "RELIES_ON" for t in node.targets)


def _sample_graph():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.relu, (x,)))
    return graph


def _sample_shape_env():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    return ShapeEnv()


def _sample_fake_mode():
    from graphcap.torch_private.fake import FakeTensorMode
    return FakeTensorMode()


def _sample_additional_inputs():
    from torch.export.dynamic_shapes import AdditionalInputs
    return AdditionalInputs()


def _sample_torch_program():
    return torch.export.export(torch.nn.ReLU(), (torch.ones(2),))


# Cheap instances for "Class#field" entries, by the class's dotted path.
SAMPLES = {
    "torch.fx.Graph": _sample_graph,
    "torch.fx.graph.Graph": _sample_graph,
    "torch.fx.Node": lambda: next(iter(_sample_graph().nodes)),
    "torch.fx.node.Node": lambda: next(iter(_sample_graph().nodes)),
    "torch.fx.GraphModule": lambda: torch.fx.GraphModule(torch.nn.Module(), _sample_graph()),
    "torch.nn.Module": lambda: torch.nn.BatchNorm1d(2),
    "torch.Tensor": lambda: torch.ones(2),
    "torch._ops.OpOverload": lambda: torch.ops.aten.add.Tensor,
    "torch._ops.OpOverloadPacket": lambda: torch.ops.aten.add,
    "torch.fx.experimental.symbolic_shapes.ShapeEnv": _sample_shape_env,
    "torch._subclasses.fake_tensor.FakeTensorMode": _sample_fake_mode,
    "torch.export.dynamic_shapes.AdditionalInputs": _sample_additional_inputs,
    "torch.export.exported_program.ExportedProgram": _sample_torch_program,
}


def _sample_for(module, cls_path: str):
    for source in (getattr(module, "SAMPLES", {}), SAMPLES):
        if cls_path in source:
            return source[cls_path]()
    for other in _adapter_modules():
        if cls_path in getattr(other, "SAMPLES", {}):
            return other.SAMPLES[cls_path]()
    return None


def _leading_parameters(obj) -> list[str] | None:
    try:
        return list(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return None  # a C function or builtin without a signature


def _torch_line() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


def _release(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


@pytest.mark.parametrize("module, path, expected", list(_entries()))
def test_private_torch_name_still_has_the_shape_graphcap_relies_on(module, path, expected):
    where = f"{module.__name__}.RELIES_ON[{path!r}] (used by {_users(module, path)}; torch {torch.__version__})"
    since = getattr(module, "SINCE", {}).get(path)
    if since is not None and _torch_line() < _release(since):
        # an older line: the adapter does without the entry here, which must then be absent
        # (present, SINCE names too late a release and the adapter takes a needless fallback)
        owner, _, field = path.partition("#")
        try:
            _resolve(owner)
            present = hasattr(_sample_for(module, owner), field) if field else True
        except LookupError:
            present = False
        assert not present, f"{where}: SINCE says torch {since}, but this torch has it already"
        return
    assert expected is None or isinstance(expected, tuple), f"{where}: expected a tuple of parameter names or None"
    if "#" in path:
        cls_path, field = path.split("#", 1)
        try:
            _resolve(cls_path)
        except LookupError as exc:
            pytest.fail(f"{where}: class is gone: {exc}")
        instance = _sample_for(module, cls_path)
        if instance is None:
            pytest.fail(f"{where}: no cheap instance of {cls_path} to check the field on; "
                        f"add a SAMPLES entry to {module.__name__}")
        # "a|b": the field has another name on some supported torch line; the adapter reads
        # whichever this torch has
        assert any(hasattr(instance, name) for name in field.split("|")), \
            f"{where}: instances of {cls_path} no longer have {field!r}"
        return
    try:
        obj = _resolve(path)
    except LookupError as exc:
        pytest.fail(f"{where}: missing: {exc}")
    if expected is None:
        return
    assert callable(obj), f"{where}: expected a callable, got {type(obj).__name__}"
    if not expected:
        return
    params = _leading_parameters(obj)
    if params is None:
        return
    assert params[:len(expected)] == list(expected), (
        f"{where}: leading parameters are now {params[:len(expected) + 2]}, graphcap expects {list(expected)}")


def test_each_versioned_entry_is_one_the_module_relies_on():
    """``SINCE`` (the first torch release that has an entry) only qualifies ``RELIES_ON`` entries,
    spelled as supported releases ("2.12")."""
    for module in _adapter_modules():
        for path, since in getattr(module, "SINCE", {}).items():
            assert path in module.RELIES_ON, f"{module.__name__}.SINCE[{path!r}] is not a RELIES_ON entry"
            assert _release(since) >= (2, 10), f"{module.__name__}.SINCE[{path!r}] = {since!r}: not a supported line"


def test_every_adapter_module_declares_what_it_relies_on():
    missing = [m.__name__ for m in _adapter_modules() if not isinstance(getattr(m, "RELIES_ON", None), dict)]
    assert not missing, f"adapter modules without a RELIES_ON dict: {missing}"


def test_each_private_name_is_declared_by_one_adapter_module():
    """One place per private name: the module of its engine area declares it, the others call
    that module's function. A name in two ``RELIES_ON`` dicts means two modules touch it, so a
    torch release that moves it breaks two places (and the package no longer says which owns it)."""
    owners: dict[str, list[str]] = {}
    for module in _adapter_modules():
        for path in getattr(module, "RELIES_ON", {}):
            owners.setdefault(path, []).append(module.__name__.rsplit(".", 1)[-1])
    repeated = {path: modules for path, modules in owners.items() if len(modules) > 1}
    assert not repeated, (
        "private torch names declared by more than one adapter module (keep each in the module of its "
        f"engine area and call it from the other): {repeated}")
