"""Inputs, outputs and the calling convention: graphcap.export against torch.export and eager.

Each probe exports a small program with graphcap and with torch.export (strict=False and
strict=True), then runs ``ep.module()`` on the example and on other accepted calls and
compares with eager (outputs, and the inputs the forward writes), does the same after
``run_decompositions()`` and after a save/load round trip, and calls the module with calls it
must refuse, checking the refusal comes before computing (a written input is left as it was)
and recording the error's class and first line. Prints one line per probe and library:

    name | side | verdict

Run: PYTHONPATH=src python bench/probes/inputs_audit.py [name-substring ...]
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import sys
import traceback
import warnings
from collections import namedtuple
from typing import Any, Callable

import torch
import torch.export as te
import torch.utils._pytree as pytree
from _compare import roundtrip

import graphcap

logging.disable(logging.WARNING)  # torch.export.load logs what it falls back to
warnings.simplefilter("ignore")

# ---------------------------------------------------------------------------- user types

Pair = namedtuple("Pair", ["a", "b"])


@dataclasses.dataclass
class DcTe:  # registered with torch.export.register_dataclass
    x: torch.Tensor
    y: torch.Tensor
    n: int = 2


te.register_dataclass(DcTe, serialized_type_name="inputs_audit.DcTe")


@dataclasses.dataclass
class DcPy:  # registered with torch.utils._pytree.register_dataclass
    x: torch.Tensor
    y: torch.Tensor


pytree.register_dataclass(DcPy, serialized_type_name="inputs_audit.DcPy")


class Node2:  # registered with register_pytree_node, context a string
    def __init__(self, left, right, tag="t"):
        self.left, self.right, self.tag = left, right, tag


pytree.register_pytree_node(
    Node2, lambda n: ([n.left, n.right], n.tag), lambda vals, tag: Node2(vals[0], vals[1], tag),
    serialized_type_name="inputs_audit.Node2",
    flatten_with_keys_fn=lambda n: ([(pytree.GetAttrKey("left"), n.left), (pytree.GetAttrKey("right"), n.right)],
                                    n.tag))

# ---------------------------------------------------------------------------- helpers


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and \
            (a.device.type == "meta" or torch.allclose(a, b, equal_nan=True, atol=1e-5))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(_same(getattr(a, f.name), getattr(b, f.name))
                                          for f in dataclasses.fields(a))
    if isinstance(a, Node2):
        return type(b) is Node2 and a.tag == b.tag and _same(a.left, b.left) and _same(a.right, b.right)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(a) is type(b) and list(a.keys()) == list(b.keys()) and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _clone(tree: Any) -> Any:
    return copy.deepcopy(tree)


@dataclasses.dataclass
class Probe:
    name: str
    make: Callable[[], Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    ok: list[tuple[tuple[Any, ...], dict[str, Any]]] = dataclasses.field(default_factory=list)
    bad: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = dataclasses.field(default_factory=list)
    identity: bool = False  # also report whether outputs alias inputs / each other
    dynamic_shapes: Any = None


def _mod(fn: Callable[..., Any]) -> torch.nn.Module:
    class M(torch.nn.Module):
        def forward(self, *args, **kwargs):
            return fn(*args, **kwargs)
    return M()


class _Fwd(torch.nn.Module):
    """A module whose forward is ``fn`` with fn's own signature (names, defaults, kw-only)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *a, **k):  # replaced per instance below
        raise NotImplementedError


def _module_of(fn: Callable[..., Any]) -> torch.nn.Module:
    def forward(self, *a, **k):
        return fn(*a, **k)
    cls = type(f"M_{fn.__name__}", (torch.nn.Module,), {"forward": forward})
    import inspect
    sig = inspect.signature(fn)
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] + list(sig.parameters.values())
    cls.forward.__signature__ = sig.replace(parameters=params)
    return cls()


def _export(side: str, model: Any, args: Any, kwargs: Any, dynamic_shapes: Any = None) -> Any:
    if side.startswith("g"):
        return graphcap.export(model, args, kwargs, strict=side.endswith("s"), dynamic_shapes=dynamic_shapes)
    return te.export(model, args, kwargs, strict=side.endswith("s"), dynamic_shapes=dynamic_shapes)


def _run_calls(p: Probe, model: Any, m: Any) -> str:
    calls = [(p.args, p.kwargs)] + p.ok
    for i, (a, k) in enumerate(calls):
        ea, ek = _clone(a), _clone(k)
        ga, gk = _clone(a), _clone(k)
        want = model(*ea, **ek)
        try:
            got = m(*ga, **gk)
        except Exception as e:
            return f"call{i} raised {type(e).__name__}: {str(e).splitlines()[0][:150]}"
        if not _same(want, got):
            return f"call{i} WRONG output"
        if not _same((ea, ek), (ga, gk)):
            return f"call{i} WRONG inputs after the call"
    return "="


def _run_bad(p: Probe, m: Any) -> list[str]:
    out = []
    for label, a, k in p.bad:
        a2, k2 = _clone(a), _clone(k)
        try:
            m(*a2, **k2)
            out.append(f"{label}: ACCEPTED")
        except Exception as e:
            touched = "" if _same((a, k), (a2, k2)) else " (after writing an input)"
            out.append(f"{label}: {type(e).__name__}{touched}: {str(e).splitlines()[0][:170]}")
    return out


def run_probe(p: Probe, sides: tuple[str, ...] = ("g", "gs", "t", "ts")) -> None:
    for side in sides:
        model = p.make()
        try:
            ep = _export(side, model, _clone(p.args), _clone(p.kwargs), p.dynamic_shapes)
        except Exception as e:
            print(f"{p.name} | {side} | export failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            if "-v" in sys.argv:
                traceback.print_exc()
            continue
        verdicts = []
        try:
            verdicts.append("run " + _run_calls(p, model, ep.module()))
        except Exception as e:
            verdicts.append(f"run failed {type(e).__name__}: {e}"[:200])
        try:
            verdicts.append("decomp " + _run_calls(p, model, ep.run_decompositions().module()))
        except Exception as e:
            verdicts.append(f"decomp failed {type(e).__name__}: {str(e)[:200]}")
        try:
            verdicts.append("saved " + _run_calls(p, model, roundtrip(ep).module()))
        except Exception as e:
            verdicts.append(f"save/load failed {type(e).__name__}: {str(e)[:200]}")
        print(f"{p.name} | {side} | " + "; ".join(verdicts))
        for line in _run_bad(p, ep.module()):
            print(f"    bad {line}")
        if p.identity:
            print("    identity " + _identity(model, ep, p))


def _identity(model: Any, ep: Any, p: Probe) -> str:
    a = _clone(p.args)
    out = ep.module()(*a)
    eager = model(*_clone(p.args))
    flat_in = [id(t) for t in pytree.tree_leaves(a) if isinstance(t, torch.Tensor)]
    outs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    is_input = [id(t) in flat_in for t in outs]
    dup = len({id(t) for t in outs}) != len(outs)
    shares = [any(t.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
                  for x in pytree.tree_leaves(a) if isinstance(x, torch.Tensor)) for t in outs]
    e_outs = [t for t in pytree.tree_leaves(eager) if isinstance(t, torch.Tensor)]
    e_dup = len({id(t) for t in e_outs}) != len(e_outs)
    return f"out is input {is_input}; shares storage {shares}; repeated output same object {dup} (eager {e_dup})"


# ---------------------------------------------------------------------------- probes

def T(*s):
    return torch.randn(*s)


PROBES: list[Probe] = []


def probe(*a, **k):
    PROBES.append(Probe(*a, **k))


# pytree inputs/outputs
def nested(d):
    return {"o": [d["a"][0] + 1, (d["a"][1][0] * 2, d["a"][1][1] - d["b"]["c"])], "p": (d["b"]["c"].sum(),)}


probe("nested dict/list/tuple in and out", lambda: _module_of(nested),
      ({"a": [T(2), (T(2), T(2))], "b": {"c": T(2)}},),
      ok=[(({"b": {"c": T(2)}, "a": [T(2), (T(2), T(2))]},), {})],
      bad=[("list for tuple", ({"a": [T(2), [T(2), T(2)]], "b": {"c": T(2)}},), {}),
           ("extra key", ({"a": [T(2), (T(2), T(2))], "b": {"c": T(2), "d": T(2)}},), {}),
           ("missing key", ({"a": [T(2), (T(2), T(2))], "b": {}},), {}),
           ("shorter list", ({"a": [T(2)], "b": {"c": T(2)}},), {})])


def nt(p):
    return Pair(p.a + p.b, p.b * 2)


probe("namedtuple in and out", lambda: _module_of(nt), (Pair(T(3), T(3)),),
      ok=[((Pair(T(3), b=T(3)),), {})],
      bad=[("plain tuple for namedtuple", ((T(3), T(3)),), {})])


def dc_te(d):
    return DcTe(d.x + d.y, d.y * d.n, d.n + 1)


probe("dataclass (torch.export.register_dataclass) in and out", lambda: _module_of(dc_te), (DcTe(T(2), T(2), 3),),
      ok=[((DcTe(T(2), T(2), 3),), {})],
      bad=[("other int field", (DcTe(T(2), T(2), 4),), {}),
           ("DcPy for DcTe", (DcPy(T(2), T(2)),), {})])


def dc_py(d):
    return {"s": DcPy(d.x * 2, d.y + 1)}


probe("dataclass (pytree.register_dataclass) in and out", lambda: _module_of(dc_py), (DcPy(T(2), T(2)),),
      bad=[("dict for dataclass", ({"x": T(2), "y": T(2)},), {})])


def node2(n):
    return Node2(n.right, n.left + 1, n.tag + "!")


probe("register_pytree_node class in and out", lambda: _module_of(node2), (Node2(T(2), T(2), "t"),),
      bad=[("other context", (Node2(T(2), T(2), "u"),), {})])


def none_leaves(x, d):
    return x + d["a"], None, {"k": None, "v": [x, None]}


probe("None leaves in and out", lambda: _module_of(none_leaves), (T(2), {"a": T(2), "b": None}),
      bad=[("tensor for None", (T(2), {"a": T(2), "b": T(2)}), {})])


def empties(x, lst, dct, tup):
    return x + 1, [], {}, (), [[]], {"e": ()}


probe("empty containers in and out", lambda: _module_of(empties), (T(2), [], {}, ()),
      bad=[("non-empty list", (T(2), [T(2)], {}, ()), {}),
           ("tuple for list", (T(2), (), {}, ()), {})])


# kwargs, defaults, varargs
def kwonly(x, *, a, b):
    return x * a - b


probe("kw-only args, kwargs given b then a", lambda: _module_of(kwonly), (T(2),), {"b": T(2), "a": T(2)},
      ok=[((T(2),), {"a": T(2), "b": T(2)})],
      bad=[("missing kw", (T(2),), {"a": T(2)}),
           ("extra kw", (T(2),), {"a": T(2), "b": T(2), "c": T(2)}),
           ("kw given positionally", (T(2), T(2), T(2)), {})])


def pos_or_kw(x, y):
    return x - y


probe("positional export, keyword call", lambda: _module_of(pos_or_kw), (T(2), T(2)),
      ok=[((T(2),), {"y": T(2)}), ((), {"x": T(2), "y": T(2)}), ((), {"y": T(2), "x": T(2)})],
      bad=[("unknown keyword", (T(2),), {"z": T(2)})])
probe("keyword export, positional call", lambda: _module_of(pos_or_kw), (T(2),), {"y": T(2)},
      ok=[((T(2), T(2)), {}), ((), {"y": T(2), "x": T(2)})])


def with_default(x, y=None, scale=2.0):
    return x * scale if y is None else x * scale + y


probe("default omitted at export, given at call", lambda: _module_of(with_default), (T(2),),
      ok=[((T(2),), {"scale": 2.0})],
      bad=[("y given", (T(2), T(2)), {}), ("y given by keyword", (T(2),), {"y": T(2)}),
           ("other scale", (T(2),), {"scale": 3.0})])
probe("default given at export, omitted at call", lambda: _module_of(with_default), (T(2), T(2)), {"scale": 2.0},
      ok=[((T(2), T(2)), {})],
      bad=[("y omitted", (T(2),), {})])
probe("default given at export equal to default, call other scale", lambda: _module_of(with_default), (T(2),),
      {"scale": 2.0}, bad=[("other scale", (T(2),), {"scale": 5.0})])


def varargs(*xs):
    return sum(xs[1:], xs[0])


probe("*args forward", lambda: _module_of(varargs), (T(2), T(2), T(2)),
      bad=[("one more", (T(2), T(2), T(2), T(2)), {}), ("one fewer", (T(2), T(2)), {})])


def varkw(x, **kw):
    return x + kw["a"] * kw["b"]


probe("**kwargs forward", lambda: _module_of(varkw), (T(2),), {"a": T(2), "b": T(2)},
      ok=[((T(2),), {"b": T(2), "a": T(2)})],
      bad=[("extra kw", (T(2),), {"a": T(2), "b": T(2), "c": T(2)})])


class Inner(torch.nn.Module):
    def forward(self, x, *, bias=None):
        return x + (0 if bias is None else bias)


class Forwarder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)


probe("*args/**kwargs forwarded to a submodule", Forwarder, (T(2),), {"bias": T(2)},
      bad=[("bias omitted", (T(2),), {})])


# constants
def consts(x, i, f, b, s, n, dt, dev):
    y = x.to(dt).to(dev) * i + f
    if b:
        y = y + 1
    if s == "double":
        y = y * 2
    if n is None:
        y = y - 1
    return y


probe("constant inputs int/float/bool/str/None/dtype/device", lambda: _module_of(consts),
      (T(2), 3, 0.5, True, "double", None, torch.float64, torch.device("cpu")),
      bad=[("int 4", (T(2), 4, 0.5, True, "double", None, torch.float64, torch.device("cpu")), {}),
           ("float 0.25", (T(2), 3, 0.25, True, "double", None, torch.float64, torch.device("cpu")), {}),
           ("bool False", (T(2), 3, 0.5, False, "double", None, torch.float64, torch.device("cpu")), {}),
           ("str other", (T(2), 3, 0.5, True, "single", None, torch.float64, torch.device("cpu")), {}),
           ("tensor for None", (T(2), 3, 0.5, True, "double", T(2), torch.float64, torch.device("cpu")), {}),
           ("dtype float32", (T(2), 3, 0.5, True, "double", None, torch.float32, torch.device("cpu")), {}),
           ("device meta", (T(2), 3, 0.5, True, "double", None, torch.float64, torch.device("meta")), {}),
           ("int 3.0 float", (T(2), 3.0, 0.5, True, "double", None, torch.float64, torch.device("cpu")), {}),
           ("bool 1 for True", (T(2), 3, 0.5, 1, "double", None, torch.float64, torch.device("cpu")), {})])


def scalar_unused(x, k):
    return x + 1


probe("unused int input, other value", lambda: _module_of(scalar_unused), (T(2), 7),
      bad=[("k=8", (T(2), 8), {})])


# aliasing, views, mutation
def mut_first(a, b):
    a.add_(1)
    return a + b


probe("same tensor twice, forward writes the first", lambda: _module_of(mut_first), None)  # filled below


def read_two(a, b):
    return a * b


def mut_input(x, y):
    x.mul_(2)
    y[0] = 5.0
    return x + y


probe("user input mutation", lambda: _module_of(mut_input), (T(3), T(3)),
      ok=[((T(3), T(3)), {})],
      bad=[("wrong dtype", (T(3), T(3).double()), {}), ("wrong rank", (T(3), T(1, 3)), {}),
           ("wrong size", (T(3), T(4)), {}), ("wrong device", (T(3), T(3).to("meta")), {}),
           ("int for tensor", (T(3), 3), {}), ("missing", (T(3),), {})])


def mut_view(x):
    x[:, 0].add_(1)
    x.t()[1].mul_(3)
    return x.sum()


probe("input written through views", lambda: _module_of(mut_view), (T(3, 3),))


def mut_nested(d):
    d["a"].add_(1)
    d["l"][1].sub_(1)
    return d["a"] * d["l"][0]


probe("nested input mutation", lambda: _module_of(mut_nested), ({"a": T(2), "l": [T(2), T(2)]},))


def mut_dc(d):
    d.x.add_(1)
    return d.y * 2


probe("dataclass field mutation", lambda: _module_of(mut_dc), (DcTe(T(2), T(2), 1),))


def ret_input(x):
    return x


probe("output is the input", lambda: _module_of(ret_input), (T(2),), identity=True)


def ret_view(x):
    return x[0], x.t(), x.view(-1)


probe("outputs are views of the input", lambda: _module_of(ret_view), (T(2, 2),), identity=True)


def ret_twice(x):
    y = x + 1
    return y, y, [y]


probe("output repeated", lambda: _module_of(ret_twice), (T(2),), identity=True)


def ret_in_twice(x):
    return x, x


probe("input returned twice", lambda: _module_of(ret_in_twice), (T(2),), identity=True)


def mut_and_return(x):
    x.add_(1)
    return x


probe("input written and returned", lambda: _module_of(mut_and_return), (T(2),), identity=True)


def scalars_out(x):
    return x + 1, 3, 2.5, True, None, "s", x.shape[0]


probe("int/float/bool/None/str outputs", lambda: _module_of(scalars_out), (T(2),))


def only_scalar_out(x):
    return x.shape[0] * 2


probe("only a python int out", lambda: _module_of(only_scalar_out), (T(4),))


def no_out(x):
    x.add_(1)


probe("returns None, writes the input", lambda: _module_of(no_out), (T(2),))


def item_out(x):
    return x.sum().item() > 0, (x + 1).tolist()


probe("data-dependent python outputs", lambda: _module_of(item_out), (torch.ones(2),))


def two_views_in(a, b):
    return a + b


# dynamic dims inside containers
B = te.Dim("B", min=2, max=16)


def dyn_tree(d, p, c):
    return d["x"] * p.a + c.x.sum(0), Pair(p.b.shape[0] + 1, c.y * 2)


probe("Dim specs inside dict/namedtuple/dataclass", lambda: _module_of(dyn_tree),
      ({"x": T(4, 3)}, Pair(T(4, 3), T(4)), DcTe(T(4, 3), T(4), 1)),
      dynamic_shapes=({"x": {0: B}}, Pair({0: B}, {0: B}), [{0: B}, {0: B}, None]),
      ok=[(({"x": T(9, 3)}, Pair(T(9, 3), T(9)), DcTe(T(9, 3), T(9), 1)), {}),
          (({"x": T(2, 3)}, Pair(T(2, 3), T(2)), DcTe(T(2, 3), T(2), 1)), {})],
      bad=[("mismatched B", ({"x": T(9, 3)}, Pair(T(8, 3), T(9)), DcTe(T(9, 3), T(9), 1)), {}),
           ("B above max", ({"x": T(17, 3)}, Pair(T(17, 3), T(17)), DcTe(T(17, 3), T(17), 1)), {})])


class ReturnsState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))
        self.register_buffer("b", torch.randn(3))

    def forward(self, x):
        return self.w, self.b, x + self.w


probe("outputs are a parameter and a buffer", ReturnsState, (T(3),))


def default_tensor(x, bias=torch.ones(2)):  # noqa: B008 (a default tensor is what is probed)
    return x + bias


probe("default tensor argument omitted", lambda: _module_of(default_tensor), (T(2),),
      bad=[("bias given", (T(2), T(2)), {})])


def sym_out(x):
    return x.shape[0], x.shape[0] * x.shape[1], x.new_zeros(x.shape[0]).sum() > -1


probe("SymInt and bool tensor outputs, dynamic", lambda: _module_of(sym_out), (T(4, 3),),
      dynamic_shapes=({0: B, 1: None},), ok=[((T(7, 3),), {}), ((T(16, 3),), {})],
      bad=[("below min", (T(1, 3),), {}), ("other static dim", (T(4, 4),), {})])


def mut_dc_alias(d):
    d.x.add_(1)
    return d.x * d.y


# filled with views at build time
def _fill() -> None:
    for p in PROBES:
        if p.name == "same tensor twice, forward writes the first":
            t = T(2)
            p.args = (t, t)
            p.ok = [((T(2), T(2)), {})]
    x = T(4)
    PROBES.append(Probe("inputs are views of one tensor", lambda: _module_of(two_views_in), (x[:2], x[2:]),
                        ok=[((T(2), T(2)), {})]))
    y = T(4)
    PROBES.append(Probe("overlapping views, forward writes one", lambda: _module_of(mut_first), (y[:3], y[1:]),
                        ok=[((T(3), T(3)), {})]))
    w = T(3)
    PROBES.append(Probe("dataclass fields are one tensor, one written", lambda: _module_of(mut_dc_alias),
                        (DcTe(w, w, 0),), ok=[((DcTe(T(3), T(3), 0),), {})]))
    v = T(5)
    PROBES.append(Probe("separate example, overlapping call, forward writes one", lambda: _module_of(mut_first),
                        (T(4), T(4)), ok=[((v[:4], v[1:]), {})]))
    q = T(4, 2)
    PROBES.append(Probe("separate example, interleaved views call, forward writes one",
                        lambda: _module_of(mut_first), (T(4), T(4)), ok=[((q[:, 0], q[:, 1]), {})]))
    z = T(2)
    PROBES.append(Probe("same tensor twice, read only", lambda: _module_of(read_two), (z, z), ok=[((T(2), T(2)), {})]))


_fill()


def spec_report(p: Probe) -> None:
    """call_spec / in_spec / out_spec / example_inputs of graphcap's program against torch's, before
    and after run_decompositions and save/load; and, after run_decompositions, whether an output is
    an input (graphcap's rule: never)."""
    eps = {}
    for side in ("g", "t"):
        try:
            eps[side] = _export(side, p.make(), _clone(p.args), _clone(p.kwargs))
        except Exception as e:
            print(f"spec {p.name} | {side} | export failed {type(e).__name__}")
            continue
    if len(eps) < 2:
        return
    g, t = eps["g"], eps["t"]
    verdict = []
    for label, gs, ts in (("in_spec", g.call_spec.in_spec, t.call_spec.in_spec),
                          ("out_spec", g.call_spec.out_spec, t.call_spec.out_spec)):
        verdict.append(f"{label} {'=' if gs == ts else 'DIFFERS'}")
    for label, derived in (("decomp", g.run_decompositions()), ("saved", roundtrip(g))):
        same = derived.call_spec.in_spec == g.call_spec.in_spec and derived.call_spec.out_spec == g.call_spec.out_spec
        verdict.append(f"{label} specs {'=' if same else 'DIFFER'}")
        ex = derived.example_inputs
        verdict.append(f"{label} example_inputs {'=' if _same(ex, g.example_inputs) else 'DIFFER'}")
    verdict.append(f"example_inputs vs torch {'=' if _same(g.example_inputs, t.example_inputs) else 'DIFFER'}")
    try:
        t_decomposed = t.run_decompositions()
    except Exception as e:
        verdict.append(f"torch run_decompositions failed {type(e).__name__}")
        t_decomposed = None
    pairs = [("training", g, t)] + ([("decomposed", g.run_decompositions(), t_decomposed)] if t_decomposed else [])
    for label, ge, te_ in pairs:
        gm, tm = ge.graph_signature.user_inputs_to_mutate, te_.graph_signature.user_inputs_to_mutate
        verdict.append(f"{label} user_inputs_to_mutate {dict(gm) if dict(gm) != dict(tm) else '='}"
                       + ("" if dict(gm) == dict(tm) else f" (torch {dict(tm)})"))
        if list(ge.graph_signature.user_inputs) != list(te_.graph_signature.user_inputs):
            verdict.append(f"{label} user_inputs {ge.graph_signature.user_inputs} (torch "
                           f"{te_.graph_signature.user_inputs})")
    a = _clone(p.args)
    try:
        out = g.run_decompositions().module()(*a, **_clone(p.kwargs))
    except Exception as e:
        print(f"spec {p.name} | " + "; ".join(verdict) + f"; decomposed call refused: {type(e).__name__}")
        return
    ins = {id(x) for x in pytree.tree_leaves(a) if isinstance(x, torch.Tensor)}
    aliased = any(id(x) in ins for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor))
    verdict.append(f"decomposed output is an input: {aliased}")
    print(f"spec {p.name} | " + "; ".join(verdict))


def main() -> None:
    wanted = [a for a in sys.argv[1:] if not a.startswith("-")]
    for p in PROBES:
        if wanted and not any(w in p.name for w in wanted):
            continue
        if "--specs" in sys.argv:
            spec_report(p)
        else:
            run_probe(p)


if __name__ == "__main__":
    main()
