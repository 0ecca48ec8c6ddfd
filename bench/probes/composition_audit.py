"""Composition and repetition audit: what users do around export.

Each probe is a function of the library (``graphcap`` or ``torch.export``) that exports a small,
seeded model and does what a user's code does around it: export it twice, from two threads, after
``torch.compile``, as a partial/bound method/lambda, with weights changed after export, with
``ep.module()`` wrapped, re-exported, decomposed, saved and loaded, composed with another program,
unflattened and exported again, compiled, deep-copied and pickled. A probe returns what the user
sees: "=" where ``module()`` gives eager's numbers, a value, or the exception's class and first line.

    name | gc: <what graphcap gives> | te: <what torch.export gives> [| DIFF]

Run: PYTHONPATH=src python bench/probes/composition_audit.py [name-substring ...] [--strict]
(``--strict``: every export in the probes uses ``strict=True``)
"""
from __future__ import annotations

import copy
import functools
import io
import os
import pickle
import sys
import tempfile
import threading
import warnings
from typing import Any, Callable

import torch
import torch.export as te
from _compare import roundtrip

import graphcap

STRICT = False


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count.add_(1)
        return torch.relu(self.lin(x)) + self.count


class Pure(torch.nn.Module):
    """No buffer writes: its outputs depend on the inputs and weights alone."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.lin(x)) * 2

    def helper(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) - 1


class Wrapper(torch.nn.Module):
    """ep.module() as a submodule, with ops around it."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.post = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.post(self.inner(x * 2) + 1)


class Seq(torch.nn.Module):
    def __init__(self, a: torch.nn.Module, b: torch.nn.Module) -> None:
        super().__init__()
        self.a = a
        self.b = b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


class Nested(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.block = Pure()
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x) + x)


def _x(n: int = 3) -> torch.Tensor:
    return torch.randn(n, 4, generator=torch.Generator().manual_seed(n))


def _export(lib: Any, model: Any, args: tuple | None = None, dyn: bool = False, **kw: Any) -> Any:
    kw.setdefault("strict", STRICT)
    if dyn and "dynamic_shapes" not in kw:
        kw["dynamic_shapes"] = ({0: lib.Dim("b", max=64)},)
    return lib.export(model, args or (_x(),), **kw)


def _close(a: Any, b: Any) -> str:
    return "=" if torch.allclose(a, b, atol=1e-5) else f"WRONG (sum {a.sum().item():.4f} vs {b.sum().item():.4f})"


def _pure_ep(lib: Any, dyn: bool = True, seed: int = 0) -> Any:
    return _export(lib, Pure(seed), dyn=dyn)


PROBES: dict[str, Callable[[Any], Any]] = {}


def probe(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    PROBES[fn.__name__] = fn
    return fn


# -- exporting the same module twice ---------------------------------------------------------
@probe
def twice_same_graph_and_names(lib):
    m = Model()
    a, b = _export(lib, m, dyn=True), _export(lib, m, dyn=True)
    return (a.graph_module.code == b.graph_module.code,
            [n.name for n in a.graph.nodes] == [n.name for n in b.graph.nodes],
            a.graph_signature == b.graph_signature, str(a.range_constraints) == str(b.range_constraints))


@probe
def twice_model_buffer_untouched_by_export(lib):
    m = Model()
    _export(lib, m)
    _export(lib, m)
    return m.count.tolist()


@probe
def twice_programs_share_the_models_buffer(lib):
    # both programs hold the model's own buffer (no copy): running one's module advances the other's
    m = Model()
    a, b = _export(lib, m), _export(lib, m)
    x = _x()
    ma = a.module()
    ma(x)
    ma(x)
    eager = Model()
    eager(x)
    eager(x)  # the state b's module starts from
    return b.state_dict["count"].tolist(), m.count.tolist(), _close(b.module()(x), eager(x))


@probe
def twice_editing_one_graph_leaves_the_other(lib):
    m = Pure()
    a, b = _export(lib, m), _export(lib, m)
    for n in a.graph.nodes:
        if n.target == torch.ops.aten.mul.Tensor:
            n.target = torch.ops.aten.add.Tensor
    a.graph_module.recompile()
    x = _x()
    return _close(b.module()(x), m(x)), _close(a.module()(x), m(x)) != "="


@probe
def twice_state_dict_shares_model_storage(lib):
    m = Pure()
    a, b = _export(lib, m), _export(lib, m)
    w = m.lin.weight
    return (a.state_dict["lin.weight"].data_ptr() == w.data_ptr(),
            b.state_dict["lin.weight"].data_ptr() == w.data_ptr())


@probe
def twice_different_specs(lib):
    m = Pure()
    s = _export(lib, m)
    d = _export(lib, m, dyn=True)
    x5 = _x(5)
    try:
        s.module()(x5)
        static_refuses = False
    except Exception:
        static_refuses = True
    return static_refuses, _close(d.module()(x5), m(x5)), len(s.range_constraints), len(d.range_constraints)


@probe
def twice_python_attribute_changed_between(lib):
    class Scaled(Pure):
        scale = 2.0

        def forward(self, x):
            return self.lin(x) * self.scale

    m = Scaled()
    a = _export(lib, m)
    m.scale = 5.0
    b = _export(lib, m)
    x = _x()
    return _close(a.module()(x), m.lin(x) * 2.0), _close(b.module()(x), m(x))


@probe
def twice_hook_added_between(lib):
    m = Pure()
    a = _export(lib, m)
    h = m.register_forward_hook(lambda mod, args, out: out * 10)
    b = _export(lib, m)
    h.remove()
    x = _x()
    return _close(a.module()(x), m(x)), _close(b.module()(x), m(x) * 10)


@probe
def twice_train_eval_between(lib):
    class Drop(Pure):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm1d(4)

        def forward(self, x):
            return self.bn(self.lin(x))

    m = Drop().eval()
    a = _export(lib, m)
    m.train()
    b = _export(lib, m)
    m.eval()
    x = _x()
    return _close(a.module()(x), m(x)), m.bn.num_batches_tracked.item(), b.module().bn.num_batches_tracked.item() \
        if hasattr(b.module(), "bn") else "?"


# -- torch.compile before export ---------------------------------------------------------------
@probe
def compiled_module_exported(lib):
    m = Pure()
    c = torch.compile(m, backend="eager")
    ep = _export(lib, c, dyn=True)
    x = _x(5)
    return _close(ep.module()(x), m(x)), sorted(ep.state_dict)


@probe
def compiled_module_called_then_exported(lib):
    m = Pure()
    c = torch.compile(m, backend="eager")
    c(_x())
    ep = _export(lib, c)
    x = _x()
    return _close(ep.module()(x), m(x)), sorted(ep.state_dict)


@probe
def module_compile_in_place_then_exported(lib):
    m = Pure()
    m.compile(backend="eager")
    m(_x())
    ep = _export(lib, m, dyn=True)
    x = _x(5)
    return _close(ep.module()(x), m(x)), sorted(ep.state_dict)


# -- callables other than a module -----------------------------------------------------------
@probe
def export_functools_partial(lib):
    m = Pure()
    f = functools.partial(lambda mod, x, k: mod(x) * k, m, k=3.0)
    ep = _export(lib, f)
    x = _x()
    return _close(ep.module()(x), f(x))


@probe
def export_bound_method_of_module(lib):
    m = Pure()
    ep = _export(lib, m.helper)
    x = _x()
    return _close(ep.module()(x), m.helper(x)), sorted(ep.state_dict)


@probe
def export_lambda(lib):
    m = Pure()
    f = lambda x: m(x) + 1  # noqa: E731
    ep = _export(lib, f)
    x = _x()
    return _close(ep.module()(x), f(x))


@probe
def export_forward_monkeypatched_on_instance(lib):
    m = Pure()
    m.forward = lambda x: m.lin(x) * 7  # type: ignore[method-assign]
    ep = _export(lib, m)
    x = _x()
    return _close(ep.module()(x), m.lin(x) * 7)


@probe
def export_forward_bound_method_patched(lib):
    m = Pure()
    m.forward = m.helper  # type: ignore[method-assign]
    ep = _export(lib, m)
    x = _x()
    return _close(ep.module()(x), m.helper(x))


# -- weights changed after export ---------------------------------------------------------------
@probe
def weights_changed_in_place_after_export(lib):
    m = Pure()
    ep = _export(lib, m)
    x = _x()
    before = m(x)
    with torch.no_grad():
        m.lin.weight.mul_(2)
    seen = ep.module()(x)
    return ("sees new weights" if torch.allclose(seen, m(x), atol=1e-5)
            else "keeps old" if torch.allclose(seen, before, atol=1e-5) else "WRONG")


@probe
def weights_changed_in_place_module_made_before(lib):
    m = Pure()
    ep = _export(lib, m)
    mod = ep.module()
    x = _x()
    before = m(x)
    with torch.no_grad():
        m.lin.weight.mul_(2)
    seen = mod(x)
    return ("sees new weights" if torch.allclose(seen, m(x), atol=1e-5)
            else "keeps old" if torch.allclose(seen, before, atol=1e-5) else "WRONG")


@probe
def parameter_replaced_after_export(lib):
    m = Pure()
    ep = _export(lib, m)
    x = _x()
    before = m(x)
    m.lin.weight = torch.nn.Parameter(torch.zeros(4, 4))
    return _close(ep.module()(x), before)


@probe
def optimizer_step_after_export(lib):
    m = Pure()
    ep = _export(lib, m)
    x = _x()
    before = m(x)
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    m(x).sum().backward()
    opt.step()
    seen = ep.module()(x)
    return ("sees new weights" if torch.allclose(seen, m(x), atol=1e-5)
            else "keeps old" if torch.allclose(seen, before, atol=1e-5) else "WRONG")


# -- ep.module() inside a new module ----------------------------------------------------------
@probe
def wrapper_static(lib):
    inner = _pure_ep(lib, dyn=False).module()
    w = Wrapper(inner)
    ep = _export(lib, w)
    x = _x()
    return _close(ep.module()(x), w(x)), sorted(ep.state_dict)


@probe
def wrapper_dynamic(lib):
    inner = _pure_ep(lib).module()
    w = Wrapper(inner)
    ep = _export(lib, w, dyn=True)
    x = _x(7)
    return _close(ep.module()(x), w(x)), [str(r) for r in ep.range_constraints.values()]


@probe
def wrapper_of_buffer_writing_program(lib):
    inner = _export(lib, Model(), dyn=True).module()
    w = Wrapper(inner)
    ref = Wrapper(Model())
    ref.post = w.post
    ep = _export(lib, w, dyn=True)
    x = _x(5)
    m = ep.module()
    m(x)
    ref(x)
    return _close(m(x), ref(x)), inner.count.tolist(), sorted(ep.graph_signature.buffers_to_mutate.values())


@probe
def wrapper_decomposed(lib):
    w = Wrapper(_pure_ep(lib).module())
    ep = _export(lib, w, dyn=True).run_decompositions()
    x = _x(6)
    return _close(ep.module()(x), w(x)), sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"})


@probe
def wrapper_saved_loaded(lib):
    w = Wrapper(_pure_ep(lib).module())
    ep = roundtrip(_export(lib, w, dyn=True))
    x = _x(6)
    return _close(ep.module()(x), w(x)), sorted(ep.state_dict)


@probe
def wrapper_unflattened(lib):
    w = Wrapper(_pure_ep(lib).module())
    ep = _export(lib, w, dyn=True)
    u = lib.unflatten(ep)
    x = _x(6)
    return _close(u(x), w(x)), sorted(n for n, _ in u.named_children())


# -- re-exporting a program's module ------------------------------------------------------------
@probe
def reexport_module(lib):
    m = Model()
    ep = _export(lib, m, dyn=True)
    ep2 = _export(lib, ep.module(), dyn=True)
    x = _x(5)
    return (_close(ep2.module()(x), Model()(x)), [s.kind.name for s in ep2.graph_signature.input_specs],
            ep.graph_module.code == ep2.graph_module.code)


@probe
def reexport_loaded_module(lib):
    ep = roundtrip(_export(lib, Model(), dyn=True))
    ep2 = _export(lib, ep.module(), dyn=True)
    x = _x(5)
    return _close(ep2.module()(x), Model()(x)), sorted(ep2.state_dict)


@probe
def reexport_decomposed_module(lib):
    ep = _export(lib, Model(), dyn=True).run_decompositions()
    ep2 = _export(lib, ep.module(), dyn=True)
    x = _x(5)
    return _close(ep2.module()(x), Model()(x)), sorted(ep2.graph_signature.buffers_to_mutate.values())


@probe
def reexport_static_program_with_dynamic_spec(lib):
    ep = _pure_ep(lib, dyn=False)
    ep2 = _export(lib, ep.module(), dyn=True)
    x = _x(5)
    return _close(ep2.module()(x), Pure()(x))


@probe
def reexport_dynamic_program_static(lib):
    ep = _pure_ep(lib)
    ep2 = _export(lib, ep.module(), (_x(5),))
    return _close(ep2.module()(_x(5)), Pure()(_x(5))), len(ep2.range_constraints)


@probe
def reexport_with_narrower_range(lib):
    ep = _pure_ep(lib)
    ep2 = _export(lib, ep.module(), dynamic_shapes=({0: lib.Dim("n", min=2, max=8)},))
    return _close(ep2.module()(_x(8)), Pure()(_x(8))), [str(r) for r in ep2.range_constraints.values()]


@probe
def reexport_twice_repeated(lib):
    ep = _pure_ep(lib)
    for _ in range(3):
        ep = _export(lib, ep.module(), dyn=True)
    x = _x(9)
    return _close(ep.module()(x), Pure()(x)), len(list(ep.graph.nodes))


@probe
def composed_two_programs(lib):
    a, b = _pure_ep(lib, seed=0).module(), _pure_ep(lib, seed=1).module()
    s = Seq(a, b)
    ep = _export(lib, s, dyn=True)
    x = _x(5)
    return _close(ep.module()(x), Pure(1)(Pure(0)(x))), sorted(ep.state_dict)


@probe
def composed_programs_saved_loaded_decomposed(lib):
    a, b = _pure_ep(lib, seed=0).module(), _pure_ep(lib, seed=1).module()
    ep = roundtrip(_export(lib, Seq(a, b), dyn=True)).run_decompositions()
    x = _x(5)
    return _close(ep.module()(x), Pure(1)(Pure(0)(x)))


@probe
def composed_with_itself(lib):
    a = _pure_ep(lib).module()
    ep = _export(lib, Seq(a, a), dyn=True)
    x = _x(5)
    return _close(ep.module()(x), Pure()(Pure()(x))), sorted(ep.state_dict)


@probe
def cross_library_module(lib):
    other = te if lib is graphcap else graphcap
    inner = _export(other, Model(), dyn=True).module()
    ep = _export(lib, inner, dyn=True)
    x = _x(5)
    return _close(ep.module()(x), Model()(x))


@probe
def unflattened_exported_again(lib):
    ep = _export(lib, Nested(), dyn=True)
    u = lib.unflatten(ep)
    ep2 = _export(lib, u, dyn=True)
    x = _x(5)
    return _close(ep2.module()(x), Nested()(x)), sorted(ep2.state_dict)


@probe
def unflattened_buffer_writer_exported_again(lib):
    ep = _export(lib, Model(), dyn=True)
    u = lib.unflatten(ep)
    ep2 = _export(lib, u, dyn=True)
    x = _x(5)
    m = ep2.module()
    m(x)
    ref = Model()
    ref(x)
    return _close(m(x), ref(x)), u.count.tolist()


@probe
def unflattened_submodule_exported(lib):
    ep = _export(lib, Nested(), dyn=True)
    u = lib.unflatten(ep)
    ep2 = _export(lib, u.block, dyn=True)
    x = _x(5)
    return _close(ep2.module()(x), Pure()(x))


class KwModel(torch.nn.Module):
    """Keyword-only input, a dict output, a lifted constant and a non-persistent buffer."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("scratch", torch.ones(4), persistent=False)
        self.c = torch.tensor([1.0, 2.0, 3.0, 4.0])

    def forward(self, x: torch.Tensor, *, y: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"a": self.lin(x) + self.c, "b": y * self.scratch}


@probe
def reexport_keyword_input_dict_output_constants(lib):
    b = lib.Dim("b", max=64)
    ep = lib.export(KwModel(), (_x(),), {"y": _x()}, dynamic_shapes={"x": {0: b}, "y": {0: b}}, strict=STRICT)
    ep2 = lib.export(ep.module(), (_x(),), {"y": _x()}, dynamic_shapes={"x": {0: b}, "y": {0: b}}, strict=STRICT)
    x, y = _x(5), _x(5)
    out, ref = ep2.module()(x, y=y), KwModel()(x, y=y)
    return (_close(out["a"], ref["a"]), _close(out["b"], ref["b"]),
            sorted((s.kind.name, s.target) for s in ep2.graph_signature.input_specs if s.target),
            sorted(ep2.state_dict), sorted(ep2.constants))


@probe
def reexport_module_without_guards_in_graph(lib):
    ep = _pure_ep(lib)
    ep2 = _export(lib, ep.module(check_guards=False) if lib is graphcap else ep.module(), dyn=True)
    x = _x(5)
    return _close(ep2.module()(x), Pure()(x))


@probe
def wrapper_calls_inner_twice(lib):
    inner = _pure_ep(lib).module()

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(self.inner(x) - 0.5)

    w = Twice()
    ep = _export(lib, w, dyn=True)
    x = _x(5)
    return (_close(ep.module()(x), w(x)), _close(roundtrip(ep).module()(x), w(x)),
            _close(lib.unflatten(ep)(x), w(x)))


@probe
def wrapper_of_program_with_two_inputs_spec_by_name(lib):
    class Two(torch.nn.Module):
        def forward(self, x, y):
            return x * y + 1

    b = lib.Dim("b", max=64)
    inner = lib.export(Two(), (_x(), _x()), dynamic_shapes={"x": {0: b}, "y": {0: b}}, strict=STRICT).module()

    class W(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def forward(self, p, q):
            return self.inner(p, q).sum(0)

    ep = lib.export(W(), (_x(), _x()), dynamic_shapes={"p": {0: b}, "q": {0: b}}, strict=STRICT)
    x, y = _x(6), _x(6)
    return _close(ep.module()(x, y), (x * y + 1).sum(0))


@probe
def compiled_child_submodule(lib):
    class Parent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = torch.compile(Pure(), backend="eager")
            self.head = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.head(self.block(x))

    m = Parent()
    m(_x())
    ep = _export(lib, m, dyn=True)
    x = _x(5)
    return _close(ep.module()(x), m(x)), sorted(ep.state_dict)


@probe
def original_exported_after_compiled_wrapper_ran(lib):
    m = Pure()
    c = torch.compile(m, backend="eager")
    c(_x())
    ep = _export(lib, m, dyn=True)
    x = _x(5)
    return _close(ep.module()(x), m(x)), _close(c(x), m(x)), sorted(ep.state_dict)


@probe
def strict_and_non_strict_same_graph(lib):
    m = Model()
    a = lib.export(m, (_x(),), strict=False)
    b = lib.export(m, (_x(),), strict=True)
    names = [n.name for n in a.graph.nodes] == [n.name for n in b.graph.nodes]
    return a.graph_module.code == b.graph_module.code, names


@probe
def module_under_torch_compile_out_of_range(lib):
    ep = _pure_ep(lib)
    c = torch.compile(ep.module(), backend="eager")
    c(_x(5))
    try:
        out = c(_x(100))  # max=64
        return "runs" + (" =" if torch.allclose(out, Pure()(_x(100)), atol=1e-5) else " WRONG")
    except Exception as e:
        return f"refuses {type(e).__name__}"


class Branchy(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.shape[0] > 4 else x + 1


def _compiled_calls(c: Any, sizes: tuple[int, ...]) -> list[str]:
    out = []
    for n in sizes:
        try:
            out.append(_close(c(_x(n)), Branchy()(_x(n))))
        except Exception as e:
            out.append(f"refuses {type(e).__name__}")
    return out


@probe
def module_under_torch_compile_specialized_branch(lib):
    ep = _export(lib, Branchy(), (_x(3),))  # static: the program is x + 1
    return _compiled_calls(torch.compile(ep.module(), backend="eager"), (3, 6, 3))


@probe
def module_under_torch_compile_fullgraph_specialized_branch(lib):
    ep = _export(lib, Branchy(), (_x(3),))
    return _compiled_calls(torch.compile(ep.module(), backend="eager", fullgraph=True), (3, 6, 3))


@probe
def unflattened_under_torch_compile_specialized_branch(lib):
    ep = _export(lib, Branchy(), (_x(3),))
    return _compiled_calls(torch.compile(lib.unflatten(ep), backend="eager"), (3, 6, 3))


@probe
def module_under_torch_compile_wrong_dtype(lib):
    ep = _pure_ep(lib)
    c = torch.compile(ep.module(), backend="eager")
    c(_x(5))
    try:
        return str(c(_x(5).double()).dtype)
    except Exception as e:
        return f"refuses {type(e).__name__}: {str(e).splitlines()[0][:80]}"


@probe
def unflattened_deepcopied(lib):
    ep = _export(lib, Model(), dyn=True)
    u = lib.unflatten(ep)
    c = copy.deepcopy(u)
    x = _x(5)
    c(x)
    c(x)
    return _close(u(x), Model()(x)), c.count.tolist(), u.count.tolist()


@probe
def program_module_runs_while_another_exports(lib):
    ep = _pure_ep(lib)
    m = ep.module()
    x = _x(5)
    res = _in_threads([lambda: [_close(m(x), Pure()(x)) for _ in range(20)][-1],
                       lambda: _close(_export(lib, Nested(), dyn=True).module()(x), Nested()(x))])
    return res


@probe
def export_the_program_object_itself(lib):
    ep = _pure_ep(lib)
    ep2 = _export(lib, ep, dyn=True)
    return _close(ep2.module()(_x(5)), Pure()(_x(5)))


@probe
def wrapper_eval_called(lib):
    w = Wrapper(_pure_ep(lib).module())
    w.eval()
    return w.training, w.inner.training


@probe
def reexport_module_with_forward_hook(lib):
    m = _pure_ep(lib).module()
    m.register_forward_hook(lambda mod, args, out: out + 100)
    ep2 = _export(lib, m, dyn=True)
    x = _x(5)
    return _close(ep2.module()(x), Pure()(x) + 100)


@probe
def reexport_module_inputs_by_keyword(lib):
    m = _pure_ep(lib).module()
    ep2 = lib.export(m, (), {"x": _x()}, dynamic_shapes={"x": {0: lib.Dim("b", max=64)}}, strict=STRICT)
    x = _x(5)
    try:
        positional = _close(ep2.module()(x), Pure()(x))
    except Exception as e:  # exported by keyword: a positional call is refused, as torch's module refuses it
        positional = f"positional refused ({type(e).__name__})"
    return _close(ep2.module()(x=x), Pure()(x)), positional


@probe
def model_cast_between_exports(lib):
    m = Pure()
    a = _export(lib, m)
    m.double()
    b = _export(lib, m, (_x().double(),))
    x = _x()
    return (_close(a.module()(x), Pure()(x)), str(a.state_dict["lin.weight"].dtype),
            str(b.module()(x.double()).dtype))


# -- compile, copy and pickle after export -----------------------------------------------------
@probe
def module_under_torch_compile(lib):
    ep = _export(lib, Model(), dyn=True)
    c = torch.compile(ep.module(), backend="eager")
    x = _x(5)
    ref = Model()
    c(x)
    ref(x)
    return _close(c(x), ref(x))


@probe
def module_under_torch_compile_aot_eager(lib):
    ep = _export(lib, Pure(), dyn=True)
    c = torch.compile(ep.module(), backend="aot_eager", dynamic=True)
    x = _x(5)
    return _close(c(x), Pure()(x)), _close(c(_x(7)), Pure()(_x(7)))


@probe
def module_deepcopied(lib):
    ep = _export(lib, Model(), dyn=True)
    m = ep.module()
    c = copy.deepcopy(m)
    x = _x(5)
    c(x)
    c(x)
    return _close(m(x), Model()(x)), c.count.tolist(), m.count.tolist()


@probe
def module_torch_save_load(lib):
    ep = _export(lib, Model(), dyn=True)
    m = ep.module()
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    m2 = torch.load(buf, weights_only=False)
    x = _x(5)
    return _close(m2(x), Model()(x)), type(m2).__name__


@probe
def module_torch_save_load_file(lib):
    ep = _export(lib, Pure(), dyn=True)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "m.pt")
        torch.save(ep.module(), p)
        m2 = torch.load(p, weights_only=False)
    x = _x(5)
    try:
        m2(_x(100))
        refuses = False
    except Exception:
        refuses = True
    return _close(m2(x), Pure()(x)), refuses


@probe
def program_deepcopied_both_run(lib):
    ep = _export(lib, Model(), dyn=True)
    c = copy.deepcopy(ep)
    x = _x(5)
    mc, me = c.module(), ep.module()
    mc(x)
    mc(x)
    return _close(me(x), Model()(x)), c.state_dict["count"].tolist(), ep.state_dict["count"].tolist()


@probe
def program_deepcopied_edit_copy(lib):
    ep = _export(lib, Pure(), dyn=True)
    c = copy.deepcopy(ep)
    with torch.no_grad():
        c.state_dict["lin.weight"].zero_()
    x = _x(5)
    return _close(ep.module()(x), Pure()(x)), _close(c.module()(x), Pure()(x)) != "="


@probe
def program_pickled(lib):
    ep = _export(lib, Pure(), dyn=True)
    data = pickle.dumps(ep)  # a failure here is the clear one: a file that cannot load is not
    return type(pickle.loads(data)).__name__


@probe
def program_torch_save(lib):
    ep = _export(lib, Pure(), dyn=True)
    buf = io.BytesIO()
    torch.save(ep, buf)
    buf.seek(0)
    return type(torch.load(buf, weights_only=False)).__name__


@probe
def program_shallow_copied(lib):
    ep = _export(lib, Pure(), dyn=True)
    c = copy.copy(ep)
    x = _x(5)
    return _close(c.module()(x), Pure()(x)), c.graph_module is ep.graph_module


@probe
def decomposed_twice_share_the_buffer(lib):
    # graphs and tables of their own, the program's tensors shared (as torch's run_decompositions)
    ep = _export(lib, Model(), dyn=True)
    a, b = ep.run_decompositions(), ep.run_decompositions()
    x = _x(5)
    ma = a.module()
    ma(x)
    ma(x)
    eager = Model()
    eager(x)
    eager(x)
    return (_close(b.module()(x), eager(x)), a.graph_module.code == b.graph_module.code,
            a.graph_module is not b.graph_module)


# -- threads (last: torch.export's failures in threads can leave its mode stack broken) --
def _in_threads(jobs: list[Callable[[], Any]]) -> list[Any]:
    out: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            out[i] = jobs[i]()
        except Exception as e:  # reported, not raised in the thread
            out[i] = f"raises {type(e).__name__}: {str(e).splitlines()[0][:100] if str(e) else ''}"

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


@probe
def threads_two_models(lib):
    ma, mb = Pure(0), Nested()
    a, b = _in_threads([lambda: _export(lib, ma, dyn=True), lambda: _export(lib, mb, dyn=True)])
    if isinstance(a, str) or isinstance(b, str):
        return a, b
    x = _x(6)
    return _close(a.module()(x), ma(x)), _close(b.module()(x), mb(x))


@probe
def threads_same_model(lib):
    m = Model()
    a, b = _in_threads([lambda: _export(lib, m), lambda: _export(lib, m)])
    if isinstance(a, str) or isinstance(b, str):
        return a, b
    x = _x()
    untouched = m.count.tolist()  # export leaves the model's buffer as it was
    # (both programs hold the model's buffer, as torch's do: one module's run advances it for both)
    return untouched, a.graph_module.code == b.graph_module.code, _close(a.module()(x), Model()(x))


def _describe(fn: Callable[[Any], Any], lib: Any) -> str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return repr(fn(lib))
    except Exception as e:  # a probe reports what the user sees
        return f"raises {type(e).__name__}: {str(e).splitlines()[0][:140] if str(e) else ''}"


def main(argv: list[str]) -> None:
    global STRICT
    STRICT = "--strict" in argv
    wanted = [a for a in argv if not a.startswith("-")]
    for name, fn in PROBES.items():
        if wanted and not any(w in name for w in wanted):
            continue
        torch.compiler.reset()
        gc, tx = _describe(fn, graphcap), _describe(fn, te)
        mark = "" if gc == tx else " | DIFF"
        print(f"{name} | gc: {gc} | te: {tx}{mark}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
