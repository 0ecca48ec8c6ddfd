"""Damaged higher-order operator calls in a saved file (audit ``load_hop_args``, 2026-11-27 afternoon).

Real programs holding each higher-order operator graphcap's files carry (``cond``, ``while_loop``,
``scan``, ``map_impl``, ``auto_functionalized_v2`` from a custom operator writing a buffer, decomposed,
``flex_attention``, ``wrap_with_set_grad_enabled``, ``wrap_with_autocast``) are saved, their
program.json edited at the call (a subgraph pointing elsewhere, operands of another count or kind,
``auto_functionalized`` keywords missing, extra or of the wrong kind, base indices past
``_all_bases``, an item read past the call's outputs, ...) and loaded. Each verdict:

  refused     a graphcap ``SerializationError`` at load (``Where`` given or not)
  FAILS-CALL  loaded; the first call raised (the error named)
  DIFFERENT   loaded; the call computed other numbers than the saved program
  same        loaded; the same numbers (a damage that changes nothing)

Also calls graphcap never writes but a hand-made file could hold (``with_effects``,
``invoke_subgraph``, ``auto_functionalized`` v1), well formed and damaged, and the real programs
themselves (must load and match).

    PYTHONPATH=src python bench/probes/load_hop_args.py [FILTER]   # the damaged files
    PYTHONPATH=src python bench/probes/load_hop_args.py legit      # real programs
    PYTHONPATH=src python bench/probes/load_hop_args.py torch      # some damages, torch.export.load
"""
from __future__ import annotations

import copy
import io
import json
import logging
import sys
import warnings
from typing import Optional

import torch

import graphcap
from graphcap.errors import SerializationError
from graphcap.serialize import schema
from graphcap.serialize.archive import read_entries, write_archive

warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)


@torch.library.custom_op("load_hop_args::bump", mutates_args=("buf",))
def bump(x: torch.Tensor, buf: torch.Tensor, k: int) -> torch.Tensor:
    buf.add_(k)
    return x * 2


@bump.register_fake
def _(x, buf, k):
    return torch.empty_like(x)


class Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


class While(torch.nn.Module):
    def forward(self, x):
        from torch._higher_order_ops.while_loop import while_loop
        i = torch.zeros((), dtype=torch.int64)
        return while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2), (i, x))


class Scan(torch.nn.Module):
    def forward(self, x):
        from torch._higher_order_ops.scan import scan

        def f(c, xs):
            return c + xs, c * xs
        return scan(f, torch.zeros(x.shape[1]), x)


class Map(torch.nn.Module):
    def forward(self, x, y):
        from functorch.experimental.control_flow import map
        return map(lambda a, b: a - b * 2, x, y)


class Mut(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(3))

    def forward(self, x):
        return torch.ops.load_hop_args.bump(x, self.buf, 2) + self.buf


class Flex(torch.nn.Module):
    def forward(self, q, k, v):
        from torch.nn.attention.flex_attention import flex_attention
        return flex_attention(q, k, v, score_mod=lambda s, b, h, qi, ki: s + (qi - ki))


class Grad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        with torch.no_grad():
            y = self.lin(x)
        return y + 1


class Autocast(torch.nn.Module):
    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ x.T
        return y.float() + 1


def _x():
    torch.manual_seed(0)
    return torch.randn(4, 3)


def _qkv(length=16):
    torch.manual_seed(0)
    return tuple(torch.randn(1, 2, length, 8) for _ in range(3))


PROGRAMS = {
    "cond": (Cond, lambda: (_x(),), False),
    "while_loop": (While, lambda: (_x(),), False),
    "scan": (Scan, lambda: (_x(),), False),
    "map": (Map, lambda: (_x(), _x() + 1), False),
    "auto_functionalized_v2": (Mut, lambda: (_x()[0],), True),
    "flex_attention": (Flex, _qkv, False),
    "set_grad": (Grad, lambda: (_x(),), False),
    "autocast": (Autocast, lambda: (_x(),), False),
}
_SAVED: dict[str, bytes] = {}


def saved(name: str) -> bytes:
    if name not in _SAVED:
        cls, inputs, decompose = PROGRAMS[name]
        ep = graphcap.export(cls(), inputs())
        if decompose:
            ep = ep.run_decompositions()
        buf = io.BytesIO()
        graphcap.save(ep, buf)
        _SAVED[name] = buf.getvalue()
    return _SAVED[name]


def edited(data: bytes, edit) -> io.BytesIO:
    entries = read_entries(io.BytesIO(data))
    program = json.loads(entries[schema.PROGRAM_ENTRY])
    edit(program)
    entries[schema.PROGRAM_ENTRY] = json.dumps(program).encode()
    out = io.BytesIO()
    write_archive(out, entries)
    out.seek(0)
    return out


def run(ep, inputs):
    m = ep.module()
    out = m(*copy.deepcopy(inputs))
    return out, [b.clone() for b in m.buffers()]


def same(a, b):
    la, lb = torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)
    return len(la) == len(lb) and all(
        isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
        and x.dtype == y.dtype and torch.allclose(x.float(), y.float(), atol=1e-5, equal_nan=True)
        for x, y in zip(la, lb))


# -- edits ---------------------------------------------------------------------------------------

def node(program, target=None, name=None):
    for n in program["graph_module"]["nodes"]:
        if n["op"] == "call_function" and (n["target"] == target or n["name"] == name):
            return n
    raise LookupError(target or name)


def hop(program, name):
    return node(program, {"hop": name})


def setarg(name, i, value):
    def edit(p):
        hop(p, name)["args"][i] = value
    return edit


def setkw(name, key, value, delete=False):
    def edit(p):
        kw = hop(p, name)["kwargs"]
        if delete:
            del kw[key]
        else:
            kw[key] = value
    return edit


def item(name, index):
    """The first item read of the call's results reads ``index``."""
    def edit(p):
        h = hop(p, name)["name"]
        n = next(n for n in p["graph_module"]["nodes"] if n["op"] == "call_function"
                 and n["target"] == {"python": "_operator.getitem"} and n["args"][0] == {"node": h})
        n["args"][1] = index
    return edit


def both(*edits):
    def edit(p):
        for e in edits:
            e(p)
    return edit


def retarget(old_hop_or_op, new_target, args, kwargs=None):
    def edit(p):
        n = node(p, old_hop_or_op)
        n["target"], n["args"], n["kwargs"] = new_target, args, kwargs or {}
    return edit


N = lambda name: {"node": name}  # noqa: E731
T = lambda *xs: {"tuple": list(xs)}  # noqa: E731
L = lambda *xs: {"list": list(xs)}  # noqa: E731
BUMP = {"op": "load_hop_args::bump.default"}

DAMAGES = [
    # cond(pred, true_graph, false_graph, operands)
    ("cond", "branches swapped", lambda p: hop(p, "cond")["args"].__setitem__(
        slice(1, 3), [N("false_graph_0"), N("true_graph_0")])),
    ("cond", "both branches the true one", setarg("cond", 2, N("true_graph_0"))),
    ("cond", "a branch is an operand node", setarg("cond", 1, N("x"))),
    ("cond", "a branch is a number", setarg("cond", 1, 3)),
    ("cond", "two operands for one-input branches", setarg("cond", 3, T(N("x"), N("x")))),
    ("cond", "no operands", setarg("cond", 3, T())),
    ("cond", "operand None", setarg("cond", 3, T(None))),
    ("cond", "operand a number", setarg("cond", 3, T(3))),
    ("cond", "operand the predicate (bool tensor)", setarg("cond", 3, T(N("gt")))),
    ("cond", "a fifth argument", lambda p: hop(p, "cond")["args"].append(1)),
    ("cond", "three arguments", lambda p: hop(p, "cond")["args"].pop()),
    ("cond", "a keyword argument", setkw("cond", "extra", 1)),
    ("cond", "pred a float tensor (x)", setarg("cond", 0, N("x"))),
    ("cond", "item 1 of one output", item("cond", 1)),
    ("cond", "item -1", item("cond", -1)),
    ("cond", "item -2", item("cond", -2)),
    # while_loop(cond_fn, body_fn, carried, additional)
    ("while_loop", "cond_fn and body_fn swapped", lambda p: hop(p, "while_loop")["args"].__setitem__(
        slice(0, 2), [N("while_loop_body_graph_0"), N("while_loop_cond_graph_0")])),
    ("while_loop", "body_fn the cond_fn", setarg("while_loop", 1, N("while_loop_cond_graph_0"))),
    ("while_loop", "one carried value dropped", setarg("while_loop", 2, T(N("x")))),
    ("while_loop", "carried moved to additional", both(setarg("while_loop", 2, T(N("zeros"))),
                                                       setarg("while_loop", 3, T(N("x"))))),
    ("while_loop", "carried None", setarg("while_loop", 2, T(None, N("x")))),
    ("while_loop", "carried a number", setarg("while_loop", 2, T(0, N("x")))),
    ("while_loop", "additional a number", setarg("while_loop", 3, T(1))),
    ("while_loop", "item 2 of two outputs", item("while_loop", 2)),
    # scan(combine, init, xs, additional)
    ("scan", "init moved to xs", both(setarg("scan", 1, T()), setarg("scan", 2, T(N("zeros"), N("x"))))),
    ("scan", "xs moved to init", both(setarg("scan", 1, T(N("zeros"), N("x"))), setarg("scan", 2, T()))),
    ("scan", "xs moved to additional", both(setarg("scan", 2, T()), setarg("scan", 3, T(N("x"))))),
    ("scan", "init and xs swapped", both(setarg("scan", 1, T(N("x"))), setarg("scan", 2, T(N("zeros"))))),
    ("scan", "an extra additional operand", setarg("scan", 3, T(N("x")))),
    ("scan", "xs None", setarg("scan", 2, T(None))),
    ("scan", "init a number", setarg("scan", 1, T(0.0))),
    ("scan", "combine an operand node", setarg("scan", 0, N("x"))),
    ("scan", "item 2 of two outputs", item("scan", 2)),
    ("scan", "a fifth argument", lambda p: hop(p, "scan")["args"].append(T())),
    # map_impl(body, xs, args)
    ("map", "xs and args swapped", both(setarg("map_impl", 1, T(N("y"))), setarg("map_impl", 2, T(N("x"))))),
    ("map", "args moved to xs", both(setarg("map_impl", 1, T(N("x"), N("y"))), setarg("map_impl", 2, T()))),
    ("map", "no xs", both(setarg("map_impl", 1, T()), setarg("map_impl", 2, T(N("x"), N("y"))))),
    ("map", "xs None", setarg("map_impl", 1, T(None))),
    ("map", "xs a number", setarg("map_impl", 1, T(2))),
    ("map", "item 1 of one output", item("map_impl", 1)),
    # auto_functionalized_v2(op, *, x=, k=, _buf_base_index=, _all_bases=)
    ("auto_functionalized_v2", "keyword x missing", setkw("auto_functionalized_v2", "x", None, delete=True)),
    ("auto_functionalized_v2", "keyword k missing", setkw("auto_functionalized_v2", "k", None, delete=True)),
    ("auto_functionalized_v2", "extra keyword", setkw("auto_functionalized_v2", "zz", 1)),
    ("auto_functionalized_v2", "k a string", setkw("auto_functionalized_v2", "k", "two")),
    ("auto_functionalized_v2", "k a float", setkw("auto_functionalized_v2", "k", 2.5)),
    ("auto_functionalized_v2", "k a tensor node", setkw("auto_functionalized_v2", "k", N("x"))),
    ("auto_functionalized_v2", "k changed (3)", setkw("auto_functionalized_v2", "k", 3)),
    ("auto_functionalized_v2", "x a number", setkw("auto_functionalized_v2", "x", 3)),
    ("auto_functionalized_v2", "x None", setkw("auto_functionalized_v2", "x", None)),
    ("auto_functionalized_v2", "buf given itself (v1 form)", setkw("auto_functionalized_v2", "buf", N("b_buf"))),
    ("auto_functionalized_v2", "_buf_base_index missing",
     setkw("auto_functionalized_v2", "_buf_base_index", None, delete=True)),
    ("auto_functionalized_v2", "_buf_base_index 1 of 1 base", setkw("auto_functionalized_v2", "_buf_base_index", 1)),
    ("auto_functionalized_v2", "_buf_base_index -1", setkw("auto_functionalized_v2", "_buf_base_index", -1)),
    ("auto_functionalized_v2", "_buf_base_index a string", setkw("auto_functionalized_v2", "_buf_base_index", "0")),
    ("auto_functionalized_v2", "_buf_base_index None", setkw("auto_functionalized_v2", "_buf_base_index", None)),
    ("auto_functionalized_v2", "_all_bases empty", setkw("auto_functionalized_v2", "_all_bases", L())),
    ("auto_functionalized_v2", "_all_bases missing", setkw("auto_functionalized_v2", "_all_bases", None, delete=True)),
    ("auto_functionalized_v2", "_all_bases two (x added)", setkw("auto_functionalized_v2", "_all_bases",
                                                                 L(N("b_buf"), N("x")))),
    ("auto_functionalized_v2", "_all_bases holds a number", setkw("auto_functionalized_v2", "_all_bases", L(1))),
    ("auto_functionalized_v2", "_all_bases x instead of buf",
     setkw("auto_functionalized_v2", "_all_bases", L(N("x")))),
    ("auto_functionalized_v2", "a view keyword (_buf_alias) added",
     setkw("auto_functionalized_v2", "_buf_alias", True)),
    ("auto_functionalized_v2", "_buf_size without stride/offset",
     setkw("auto_functionalized_v2", "_buf_size", L(3))),
    ("auto_functionalized_v2", "op not an operator (a number)", setarg("auto_functionalized_v2", 0, 3)),
    ("auto_functionalized_v2", "op a node", setarg("auto_functionalized_v2", 0, N("x"))),
    ("auto_functionalized_v2", "op aten.add.Tensor (writes nothing)",
     setarg("auto_functionalized_v2", 0, {"op": "aten::add.Tensor"})),
    ("auto_functionalized_v2", "no op", lambda p: hop(p, "auto_functionalized_v2").__setitem__("args", [])),
    ("auto_functionalized_v2", "a positional operand",
     lambda p: hop(p, "auto_functionalized_v2")["args"].append(N("x"))),
    ("auto_functionalized_v2", "item 2 of two outputs", item("auto_functionalized_v2", 2)),
    ("auto_functionalized_v2", "renamed auto_functionalized (v1) with v2 keywords",
     lambda p: hop(p, "auto_functionalized_v2").__setitem__("target", {"hop": "auto_functionalized"})),
    ("auto_functionalized_v2", "v1 form, well formed (x, buf, k)",
     retarget({"hop": "auto_functionalized_v2"}, {"hop": "auto_functionalized"}, [BUMP],
              {"x": N("x"), "buf": N("b_buf"), "k": 2})),
    ("auto_functionalized_v2", "v1 form, buf missing",
     retarget({"hop": "auto_functionalized_v2"}, {"hop": "auto_functionalized"}, [BUMP], {"x": N("x"), "k": 2})),
    ("auto_functionalized_v2", "v1 form, buf a number",
     retarget({"hop": "auto_functionalized_v2"}, {"hop": "auto_functionalized"}, [BUMP],
              {"x": N("x"), "buf": 1, "k": 2})),
    # flex_attention(q, k, v, score_mod, block_mask, scale, kernel_options, score_other, mask_other)
    ("flex_attention", "score_mod the mask_mod (4 inputs)", setarg("flex_attention", 3, N("sdpa_mask0"))),
    ("flex_attention", "score_mod a node", setarg("flex_attention", 3, N("q"))),
    ("flex_attention", "scale a string", setarg("flex_attention", 5, "0.35")),
    ("flex_attention", "scale None", setarg("flex_attention", 5, None)),
    ("flex_attention", "block_mask cut short", lambda p: hop(p, "flex_attention")["args"][4]["tuple"].pop(0)),
    ("flex_attention", "block_mask a number", setarg("flex_attention", 4, 1)),
    ("flex_attention", "kernel_options a list", setarg("flex_attention", 6, L())),
    ("flex_attention", "an extra score_mod buffer", setarg("flex_attention", 7, T(N("q")))),
    ("flex_attention", "q None", setarg("flex_attention", 0, None)),
    ("flex_attention", "q a number", setarg("flex_attention", 0, 1)),
    ("flex_attention", "arguments dropped", lambda p: hop(p, "flex_attention").__setitem__(
        "args", hop(p, "flex_attention")["args"][:7])),
    ("flex_attention", "item 3 of three outputs", item("flex_attention", 3)),
    # wrap_with_set_grad_enabled(flag, body, *operands)
    ("set_grad", "flag a string", setarg("wrap_with_set_grad_enabled", 0, "no")),
    ("set_grad", "flag None", setarg("wrap_with_set_grad_enabled", 0, None)),
    ("set_grad", "flag a tensor node", setarg("wrap_with_set_grad_enabled", 0, N("x"))),
    ("set_grad", "an operand dropped", lambda p: hop(p, "wrap_with_set_grad_enabled")["args"].pop()),
    ("set_grad", "an operand None", setarg("wrap_with_set_grad_enabled", 4, None)),
    ("set_grad", "body a node", setarg("wrap_with_set_grad_enabled", 1, N("x"))),
    ("set_grad", "item 1 of one output", item("wrap_with_set_grad_enabled", 1)),
    # wrap_with_autocast(device, dtype, enabled, cache, body, *operands)
    ("autocast", "device a number", setarg("wrap_with_autocast", 0, 0)),
    ("autocast", "device 'nowhere'", setarg("wrap_with_autocast", 0, "nowhere")),
    ("autocast", "dtype a string", setarg("wrap_with_autocast", 1, "bfloat16")),
    ("autocast", "enabled a string", setarg("wrap_with_autocast", 2, "yes")),
    ("autocast", "operand dropped", lambda p: hop(p, "wrap_with_autocast")["args"].pop()),
    ("autocast", "item 1 of one output", item("wrap_with_autocast", 1)),
    # calls graphcap never writes, hand-made on real programs
    ("cond", "invoke_subgraph(true_graph_0, 'r', x), well formed",
     retarget({"hop": "cond"}, {"hop": "invoke_subgraph"}, [N("true_graph_0"), "r", N("x")])),
    ("cond", "invoke_subgraph without operands",
     retarget({"hop": "cond"}, {"hop": "invoke_subgraph"}, [N("true_graph_0"), "r"])),
    ("cond", "invoke_subgraph of a node",
     retarget({"hop": "cond"}, {"hop": "invoke_subgraph"}, [N("x"), "r", N("x")])),
    ("cond", "with_effects(op, x): no token",
     retarget({"hop": "cond"}, {"hop": "with_effects"}, [{"op": "aten::sin.default"}, N("x")])),
    ("cond", "with_effects(x, op, x): a tensor for the token",
     retarget({"hop": "cond"}, {"hop": "with_effects"}, [N("x"), {"op": "aten::sin.default"}, N("x")])),
]


# -- real programs: must load and compute what they computed before the save --------------------

@torch.library.custom_op("load_hop_args::fill_list", mutates_args=("outs", "maybe"))
def fill_list(x: torch.Tensor, outs: list[torch.Tensor], maybe: Optional[torch.Tensor]) -> None:
    for i, o in enumerate(outs):
        o.copy_(x + i)
    if maybe is not None:
        maybe.mul_(2)


class MutList(torch.nn.Module):
    """A custom op writing a list of buffers, an Optional one given and left out, a buffer's slice."""
    def __init__(self):
        super().__init__()
        self.register_buffer("a", torch.zeros(3))
        self.register_buffer("b", torch.zeros(3))
        self.register_buffer("c", torch.ones(6))

    def forward(self, x):
        torch.ops.load_hop_args.fill_list(x, [self.a, self.b], self.c[1:4])
        torch.ops.load_hop_args.fill_list(x * 2, [self.a], None)
        torch.ops.load_hop_args.bump(x, self.c[::2], 1)
        return self.a + self.b + self.c[:3]


class CondNested(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        n = x.shape[0]

        def inner_true(x):
            return torch.cond(x.mean() > 0, lambda y: self.lin(y) * n, lambda y: y - n, (x,))
        return torch.cond(x.sum() > 0, inner_true, lambda x: x.cos() + n, (x,))


class ScanRich(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 3))

    def forward(self, x, y):
        from torch._higher_order_ops.scan import scan

        def f(carry, xs):
            a, b = xs
            c1, c2 = carry
            h = torch.tanh(a @ self.w + c1)
            return (h, c2 + b.sum()), (h * 2, b + 1)
        return scan(f, (torch.zeros(x.shape[1], 3), torch.zeros(())), (x, y), dim=0, reverse=True)


class WhileRich(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("step", torch.full((3,), 0.5))

    def forward(self, x, k):
        from torch._higher_order_ops.while_loop import while_loop
        return while_loop(lambda i, y: i < k.shape[0], lambda i, y: (i + 1, y + self.step), (torch.tensor(0), x))


class MapRich(torch.nn.Module):
    def forward(self, xs, y):
        from functorch.experimental.control_flow import map

        def body(x, y):
            return x.sin() + y, x.shape[0] * y
        return map(body, xs, y)


class FlexMask(torch.nn.Module):
    def forward(self, q, k, v):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        mask = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, q.shape[2], k.shape[2], device="cpu")
        return flex_attention(q, k, v, block_mask=mask)


def _dyn(*specs):
    return specs


LEGIT = [
    ("custom op writing a list, an Optional, views (decomposed)", MutList, lambda: (_x()[0],), None),
    ("cond nested, Linear, a SymInt operand (dynamic)", CondNested, lambda: (_x(),),
     ({0: torch.export.Dim("b", min=2, max=16)},)),
    ("scan two carries, two xs, reverse, a parameter (dynamic)", ScanRich, lambda: (_x(), _x() + 1),
     ({0: torch.export.Dim("t", min=2, max=16)}, {0: torch.export.Dim("t", min=2, max=16)})),
    ("while_loop over a dynamic count, a buffer", WhileRich, lambda: (_x()[0], _x()[1:3].reshape(-1)[:5]),
     (None, {0: torch.export.Dim("k", min=2, max=16)})),
    ("map two outputs, a size (dynamic)", MapRich, lambda: (_x(), torch.randn(3)),
     ({0: torch.export.Dim("m", min=2, max=16)}, None)),
    ("flex_attention with a causal block mask", FlexMask, lambda: _qkv(128),
     None),
    *[(f"{name} (probe program)", PROGRAMS[name][0], PROGRAMS[name][1], None) for name in PROGRAMS],
]


def legit(pattern=""):
    """Each real program exported by graphcap and by torch.export (through graphcap.from_torch),
    strict=False and True, as exported and decomposed, saved, loaded and run."""
    for label, cls, inputs, dynamic in LEGIT:
        if pattern not in label:
            continue
        for exporter in ("graphcap", "torch", "torch strict"):
            for decompose in (False, True):
                tag = f"{label} [{exporter}{', decomposed' if decompose else ''}]"
                try:
                    if exporter == "graphcap":
                        ep = graphcap.export(cls(), inputs(), dynamic_shapes=dynamic)
                    else:
                        ep = graphcap.from_torch(torch.export.export(cls(), inputs(), dynamic_shapes=dynamic,
                                                                     strict=exporter.endswith("strict")))
                    if decompose:
                        ep = ep.run_decompositions()
                    buf = io.BytesIO()
                    graphcap.save(ep, buf)
                except Exception as e:
                    print(f"{tag:90} (no file: {type(e).__name__}: {str(e).splitlines()[0][:100]})", flush=True)
                    continue
                try:
                    loaded = graphcap.load(io.BytesIO(buf.getvalue()))
                except SerializationError as e:
                    print(f"{tag:90} REFUSED    {str(e).splitlines()[0][:200]}", flush=True)
                    continue
                try:
                    want = run(ep, inputs())
                except Exception as e:
                    print(f"{tag:90} (the program fails before any save: {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:80]})", flush=True)
                    continue
                ok = same(want, run(loaded, inputs()))
                print(f"{tag:90} {'same' if ok else 'DIFFERENT'}", flush=True)


# -- the same damages in a torch.export.save file, loaded by torch.export.load --------------------

def _torch_inputs(node):
    return node["inputs"]


def _torch_hop(model_json, name):
    return next(n for n in model_json["graph_module"]["graph"]["nodes"]
                if n["target"] == f"torch.ops.higher_order.{name}")


def _torch_swap(name, i, j):
    def edit(m):
        ins = _torch_hop(m, name)["inputs"]
        ins[i]["arg"], ins[j]["arg"] = ins[j]["arg"], ins[i]["arg"]
    return edit


def _torch_set(name, key, arg=None, delete=False):
    def edit(m):
        ins = _torch_hop(m, name)["inputs"]
        if delete:
            ins[:] = [i for i in ins if i["name"] != key]
        elif any(i["name"] == key for i in ins):
            next(i for i in ins if i["name"] == key)["arg"] = arg
        else:
            ins.append({"name": key, "arg": arg, "kind": 2})
    return edit


def _torch_operands(name, position, tensors):
    def edit(m):
        _torch_hop(m, name)["inputs"][position]["arg"] = {"as_tensors": [{"name": t} for t in tensors]}
    return edit


TORCH_DAMAGES = [
    ("cond", "two operands for one-input branches", _torch_operands("cond", 3, ["x", "x"])),
    ("cond", "branches swapped", _torch_swap("cond", 1, 2)),
    ("scan", "init and xs swapped", _torch_swap("scan", 1, 2)),
    ("scan", "init moved to xs", lambda m: (_torch_operands("scan", 2, ["zeros", "x"])(m),
                                            _torch_operands("scan", 1, [])(m))),
    ("auto_functionalized_v2", "keyword k missing", _torch_set("auto_functionalized_v2", "k", delete=True)),
    ("auto_functionalized_v2", "k a string", _torch_set("auto_functionalized_v2", "k", {"as_string": "two"})),
    ("auto_functionalized_v2", "extra keyword", _torch_set("auto_functionalized_v2", "zz", {"as_int": 1})),
    ("auto_functionalized_v2", "_buf_base_index 1 of 1 base",
     _torch_set("auto_functionalized_v2", "_buf_base_index", {"as_int": 1})),
    ("auto_functionalized_v2", "_buf_base_index missing",
     _torch_set("auto_functionalized_v2", "_buf_base_index", delete=True)),
]


def torch_verdicts():
    """torch.export.save / torch.export.load of the same programs, the same damages made to its JSON."""
    import zipfile
    for program_name, label, edit in TORCH_DAMAGES:
        cls, inputs, decompose = PROGRAMS[program_name]
        ep = torch.export.export(cls(), inputs())
        if decompose:
            ep = ep.run_decompositions()
        buf = io.BytesIO()
        torch.export.save(ep, buf)
        want = run(torch.export.load(io.BytesIO(buf.getvalue())), inputs())
        src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as dst:
            for info in src.infolist():
                data = src.read(info)
                if info.filename.endswith("models/model.json"):
                    model = json.loads(data)
                    edit(model)
                    data = json.dumps(model).encode()
                dst.writestr(info, data)
        try:
            loaded = torch.export.load(io.BytesIO(out.getvalue()))
        except Exception as e:
            v, d = "refused", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        else:
            try:
                got = run(loaded, inputs())
                v, d = ("same", "") if same(want, got) else ("DIFFERENT", "")
            except Exception as e:
                v, d = "FAILS-CALL", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        print(f"torch.export {program_name:24} {label:40} {v:10} {d[:200]}", flush=True)


def verdict(program_name, edit):
    cls, inputs, _ = PROGRAMS[program_name]
    data = saved(program_name)
    want = run(graphcap.load(io.BytesIO(data)), inputs())
    try:
        ep = graphcap.load(edited(data, edit))
    except SerializationError as e:
        where = "Where:" in str(e)
        return "refused", (str(e).splitlines()[0] + ("" if where else " [no Where]"))
    except Exception as e:
        return "OTHER-ERR", f"{type(e).__name__}: {e}"
    try:
        got = run(ep, inputs())
    except Exception as e:
        return "FAILS-CALL", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return ("same", "") if same(want, got) else ("DIFFERENT", "")


def main(pattern=""):
    counts: dict[str, int] = {}
    for name in PROGRAMS:  # the real programs load and match
        if pattern and pattern not in name:
            continue
        v, d = verdict(name, lambda p: None)
        print(f"{name:24} {'(as saved)':52} {v:10} {d[:200]}", flush=True)
    for program_name, label, edit in DAMAGES:
        if pattern and pattern not in program_name and pattern not in label:
            continue
        v, d = verdict(program_name, edit)
        counts[v] = counts.get(v, 0) + 1
        print(f"{program_name:24} {label:52} {v:10} {d[:220]}", flush=True)
    print(counts)


if __name__ == "__main__":
    if sys.argv[1:2] == ["torch"]:
        torch_verdicts()
    elif sys.argv[1:2] == ["legit"]:
        legit(sys.argv[2] if len(sys.argv) > 2 else "")
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "")
