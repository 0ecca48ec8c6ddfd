"""Audit ``load_hop_args`` (2026-11-27 afternoon): a damaged call of a higher-order operator in a
saved file is refused at load, naming the node and what does not fit, where it loaded before and
failed at its first call inside torch or computed other numbers; real programs still load.

``bench/probes/load_hop_args.py`` is the probe; docs/torch-suite.md has the table.
"""
from __future__ import annotations

import functools
import io
from typing import Optional

import pytest
import torch

import graphcap
from conftest import program_json_edited
from graphcap.errors import SerializationError


@torch.library.custom_op("test_load_hop_args::bump", mutates_args=("buf",))
def _bump(x: torch.Tensor, buf: torch.Tensor, k: int) -> torch.Tensor:
    buf.add_(k)
    return x * 2


@_bump.register_fake
def _(x, buf, k):
    return torch.empty_like(x)


@torch.library.custom_op("test_load_hop_args::fill", mutates_args=("outs", "maybe"))
def _fill(x: torch.Tensor, outs: list[torch.Tensor], maybe: Optional[torch.Tensor]) -> None:
    for i, o in enumerate(outs):
        o.copy_(x + i)
    if maybe is not None:
        maybe.mul_(2)


class _Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


class _Scan(torch.nn.Module):
    def forward(self, x):
        from torch._higher_order_ops.scan import scan

        def step(c, xs):
            return c + xs, c * xs
        return scan(step, torch.zeros(x.shape[1]), x)


class _While(torch.nn.Module):
    def forward(self, x):
        from torch._higher_order_ops.while_loop import while_loop
        return while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2), (torch.zeros((), dtype=torch.int64), x))


class _Map(torch.nn.Module):
    def forward(self, x, y):
        from functorch.experimental.control_flow import map
        return map(lambda a, b: a - b * 2, x, y)


class _Writes(torch.nn.Module):
    """A custom op writing a buffer, a list of buffers, an Optional left out, a slice and a strided view."""
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(3))
        self.register_buffer("a", torch.zeros(3))
        self.register_buffer("c", torch.ones(6))

    def forward(self, x):
        y = torch.ops.test_load_hop_args.bump(x, self.buf, 2)
        torch.ops.test_load_hop_args.fill(x, [self.a], self.c[1:4])
        torch.ops.test_load_hop_args.fill(y, [self.a], None)
        torch.ops.test_load_hop_args.bump(x, self.c[::2], 1)
        return y + self.buf + self.a + self.c[:3]


class _Grad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        with torch.no_grad():
            y = self.lin(x)
        return y + 1


class _Sort(torch.nn.Module):
    def forward(self, x):
        values, indices = torch.sort(x)
        return values + indices


def _x():
    torch.manual_seed(0)
    return torch.randn(4, 3)


_PROGRAMS = {
    "cond": (_Cond, lambda: (_x(),)),
    "scan": (_Scan, lambda: (_x(),)),
    "while_loop": (_While, lambda: (_x(),)),
    "map": (_Map, lambda: (_x(), _x() + 1)),
    "writes": (_Writes, lambda: (_x()[0],)),
    "set_grad": (_Grad, lambda: (_x(),)),
    "sort": (_Sort, lambda: (_x(),)),
}


@functools.cache
def _saved(name: str) -> bytes:
    cls, inputs = _PROGRAMS[name]
    ep = graphcap.export(cls(), inputs())
    if name == "writes":
        ep = ep.run_decompositions()  # auto_functionalized_v2 calls
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    return buf.getvalue()


def _call(program, target, nth=0):
    found = [n for n in program["graph_module"]["nodes"] if n["op"] == "call_function" and n["target"] == target]
    return found[nth]


def _hop(program, name, nth=0):
    return _call(program, {"hop": name}, nth)


def _run(data, name):
    cls, inputs = _PROGRAMS[name]
    module = graphcap.load(io.BytesIO(data) if isinstance(data, bytes) else data).module()
    return module(*inputs()), [b.clone() for b in module.buffers()]


N = lambda name: {"node": name}  # noqa: E731
T = lambda *xs: {"tuple": list(xs)}  # noqa: E731
L = lambda *xs: {"list": list(xs)}  # noqa: E731


def _args(hop, **positions):
    def edit(program):
        for i, value in positions.items():
            _hop(program, hop)["args"][int(i[1:])] = value
    return edit


def _kw(value=None, delete=False, nth=0):
    """An edit of the ``nth`` auto_functionalized_v2 call's keyword (given next): set, or deleted."""
    def make(key):
        def edit(program):
            kwargs = _hop(program, "auto_functionalized_v2", nth)["kwargs"]
            if delete:
                del kwargs[key]
            else:
                kwargs[key] = value
        return edit
    return make


@pytest.mark.parametrize("program, edit, match", [
    # cond: a subgraph argument that is no subgraph, operands of another count or kind, its arity
    ("cond", _args("cond", a1=N("x")), "passes node x \\(FakeTensor\\) to cond where a subgraph goes"),
    ("cond", _args("cond", a3=T(N("x"), N("x"))), "binds 2 operands to the subgraph true_graph_0 of cond, but the "
                                                 "subgraph takes 1 input"),
    ("cond", _args("cond", a3=T(None)), "binds NoneType to the input x of the subgraph true_graph_0 of cond, "
                                        "which is a tensor"),
    ("cond", _args("cond", a3=T(2.5)), "binds float to the input x .* which is a tensor"),
    ("cond", _args("cond", a3=T(N("gt"))), "takes a tensor of 2 dimensions \\(the operand has 0\\)"),
    ("cond", _args("cond", a0=N("x")), "of 12 elements as cond's predicate, which is a bool or a one-element"),
    ("cond", lambda p: _hop(p, "cond")["args"].append(T()), "passes 5 positional arguments to cond, which takes 4"),
    ("cond", lambda p: _hop(p, "cond")["kwargs"].update(extra=1), "passes the keyword 'extra' \\(int\\) to cond, "
                                                                  "which takes none"),
    # while_loop: the condition and the body swapped, carried values of another count or kind
    ("while_loop", _args("while_loop", a0=N("while_loop_body_graph_0"), a1=N("while_loop_cond_graph_0")),
     "as while_loop's condition, which returns 2 values, not one"),
    ("while_loop", _args("while_loop", a2=T(N("zeros")), a3=T(N("x"))),
     "saved value holds 2 results, but while_loop returns its 1 carried value"),
    ("while_loop", _args("while_loop", a2=T(0, N("x"))), "binds int to the input zeros .* which is a tensor"),
    # scan: init and xs moved into one another (a scanned input is sliced along its first dimension)
    ("scan", _args("scan", a1=T(), a2=T(N("zeros"), N("x"))),
     "binds node zeros \\(FakeTensor\\) to the input zeros .* which takes a tensor of 1 dimension, sliced along its "
     "first dimension \\(the operand has 1\\)"),
    ("scan", _args("scan", a1=T(N("zeros"), N("x")), a2=T()), "binds node x .* takes a tensor of 1 dimension "
                                                              "\\(the operand has 2\\)"),
    ("scan", _args("scan", a1=T(N("x")), a2=T(N("zeros"))), "binds node x \\(FakeTensor\\) to the input zeros"),
    ("scan", _args("scan", a1=T(0.0)), "binds float to the input zeros .* which is a tensor"),
    # map: the scanned inputs empty, or holding what the body takes whole
    ("map", _args("map_impl", a1=T(N("x"), N("y")), a2=T()), "binds node y .* sliced along its first dimension"),
    ("map", _args("map_impl", a1=T(2)), "binds int to the input x .* which is a tensor"),
    # wrap_with_set_grad_enabled: its flag, an operand None (bias left out: other numbers)
    ("set_grad", _args("wrap_with_set_grad_enabled", a0="no"), "passes str as wrap_with_set_grad_enabled's flag, "
                                                               "which is a bool"),
    ("set_grad", _args("wrap_with_set_grad_enabled", a4=None), "binds NoneType to the input p_lin_bias"),
])
def test_a_damaged_control_flow_call_is_refused_at_load_naming_node_and_argument(program, edit, match):
    # before the audit each loaded, then failed at the first call inside torch ("cond operands ... can only
    # be of", "Boolean value of Tensor with more than one value is ambiguous") or computed other numbers
    # (scan with its carry moved into its scanned inputs, a None bias inside a no_grad region)
    with pytest.raises(SerializationError, match=match) as info:
        graphcap.load(program_json_edited(_saved(program), edit))
    assert "Where: program.json graph_module.nodes[" in str(info.value)


@pytest.mark.parametrize("key, change, match", [
    ("x", _kw(delete=True), "does not pass test_load_hop_args.bump.default's required argument 'x'"),
    ("zz", _kw(1), "passes the keyword 'zz' to test_load_hop_args.bump.default, which has no such argument"),
    ("k", _kw("two"), "passes str as test_load_hop_args.bump.default's argument 'k', which is a int"),
    ("k", _kw(N("x")), "passes node x \\(FakeTensor\\) as test_load_hop_args.bump.default's argument 'k'"),
    ("x", _kw(None), "passes NoneType as test_load_hop_args.bump.default's argument 'x', which is a Tensor"),
    ("buf", _kw(N("b_buf")), "passes test_load_hop_args.bump.default's written argument 'buf' itself"),
    ("_buf_base_index", _kw(delete=True), "does not pass '_buf_base_index', the base in '_all_bases'"),
    ("_buf_base_index", _kw(1), "passes 1 as '_buf_base_index', which indexes its 1 '_all_bases'"),
    ("_buf_base_index", _kw(-1), "passes -1 as '_buf_base_index'"),
    ("_buf_base_index", _kw(True), "passes True as '_buf_base_index'"),
    ("_buf_base_index", _kw(None), "passes NoneType as test_load_hop_args.bump.default's argument 'buf', which is a "
                                   "Tensor"),
    ("_all_bases", _kw(L()), "passes 0 as '_buf_base_index', which indexes its 0 '_all_bases'"),
    ("_all_bases", _kw(delete=True), "passes NoneType as auto_functionalized_v2's '_all_bases'"),
    ("_all_bases", _kw(L(N("b_buf"), N("x"))), "saved value holds 2 results, but auto_functionalized_v2 of "
                                               "test_load_hop_args.bump.default returns 3"),
    ("_all_bases", _kw(L(1.5)), "lists float in auto_functionalized_v2's '_all_bases', which holds tensor nodes"),
    ("_buf_size", _kw(L(3)), "describes the view test_load_hop_args.bump.default writes through 'buf' with "
                             "\\['_buf_size'\\], not one whole form"),
    # the list-writing call: its length keyword, an element's base index, a half-described slice
    ("_outs_length", _kw(delete=True, nth=1), "does not pass '_outs_length'"),
    ("_outs_length", _kw(2, nth=1), "does not pass '_outs_1_base_index'"),
    ("_maybe_slice_end", _kw(delete=True, nth=1), "describes the view .* through 'maybe'"),
])
def test_auto_functionalized_keywords_are_checked_against_the_custom_ops_schema(key, change, match):
    # before the audit each loaded, then failed inside torch at the first call (KeyError: '_buf_base_index',
    # IndexError: list index out of range, "bump() is missing value for argument 'x'") or computed other numbers
    with pytest.raises(SerializationError, match=match) as info:
        graphcap.load(program_json_edited(_saved("writes"), change(key)))
    assert "Where: program.json graph_module.nodes[" in str(info.value)


@pytest.mark.parametrize("op, match", [
    (3, "passes int as auto_functionalized_v2's operator, which is an operator overload"),
    ({"op": "aten::add.Tensor"}, "passes aten.add.Tensor to auto_functionalized_v2, which writes none of its "
                                 "arguments"),
])
def test_auto_functionalized_of_no_writing_operator_is_refused(op, match):
    def edit(program):
        _hop(program, "auto_functionalized_v2")["args"][0] = op
    with pytest.raises(SerializationError, match=match):
        graphcap.load(program_json_edited(_saved("writes"), edit))


@pytest.mark.parametrize("program, producer, index", [
    ("cond", {"hop": "cond"}, 1), ("cond", {"hop": "cond"}, -2), ("scan", {"hop": "scan"}, 2),
    ("writes", {"hop": "auto_functionalized_v2"}, 2), ("set_grad", {"hop": "wrap_with_set_grad_enabled"}, 1),
    ("sort", {"op": "aten::sort.default"}, 2),  # an ordinary operator's results too
])
def test_an_item_read_past_the_results_is_refused(program, producer, index):
    # before the audit it loaded, then the call failed with "IndexError: tuple index out of range"
    def edit(p):
        name = _call(p, producer)["name"]
        read = next(n for n in p["graph_module"]["nodes"] if n["op"] == "call_function"
                    and n["target"] == {"python": "_operator.getitem"} and n["args"][0] == N(name))
        read["args"][1] = index
    with pytest.raises(SerializationError, match=f"reads item {index} of .*, whose saved value holds") as info:
        graphcap.load(program_json_edited(_saved(program), edit))
    assert "Where: program.json graph_module.nodes[" in str(info.value)


def test_an_item_read_from_the_end_inside_the_results_still_loads():
    def edit(p):
        read = next(n for n in p["graph_module"]["nodes"] if n["target"] == {"python": "_operator.getitem"})
        read["args"][1] = -1
    got, _ = _run(program_json_edited(_saved("cond"), edit), "cond")
    assert torch.equal(got, _Cond()(_x()))


@pytest.mark.parametrize("program", list(_PROGRAMS))
def test_real_programs_with_each_call_still_load_and_match(program):
    cls, inputs = _PROGRAMS[program]
    got, buffers = _run(_saved(program), program)
    model = cls()
    if program == "set_grad":  # the same weights as the saved program's
        model.load_state_dict(graphcap.load(io.BytesIO(_saved(program))).state_dict)
    want = model(*inputs())
    for g, w in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)):
        torch.testing.assert_close(g, w)
    if program == "writes":
        torch.testing.assert_close(buffers, [b for b in model.buffers()])


class _Dynamic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 3))

    def forward(self, x, y):
        from functorch.experimental.control_flow import map
        from torch._higher_order_ops.scan import scan
        n = x.shape[0]

        def step(carry, xs):
            a, b = xs
            h = torch.tanh(a @ self.w + carry[0])
            return (h, carry[1] + b.sum()), (h * 2, b + n)
        carry, ys = scan(step, (torch.zeros(x.shape[1], 3), torch.zeros(())), (x, y), reverse=True)
        z = torch.cond(carry[0].sum() > 0, lambda h: h * n, lambda h: h - n, (carry[0],))
        return z, map(lambda r, s: r.sin() + s.sum(), carry[0], ys[0])  # a symbolic operand passed whole


@pytest.mark.parametrize("exporter", ["graphcap", "torch"])
def test_dynamic_programs_with_symbolic_operands_still_load(exporter):
    # symbolic sizes in operands, sliced inputs and a SymInt operand: nothing a real program binds is refused
    torch.manual_seed(0)
    model = _Dynamic()
    args = (torch.randn(5, 2, 3), torch.randn(5, 4))
    t = torch.export.Dim("t", min=2, max=16)
    spec = ({0: t}, {0: t})
    if exporter == "graphcap":
        ep = graphcap.export(model, args, dynamic_shapes=spec)
    else:
        ep = graphcap.from_torch(torch.export.export(model, args, dynamic_shapes=spec))
    for program in (ep, ep.run_decompositions()):
        buf = io.BytesIO()
        graphcap.save(program, buf)
        loaded = graphcap.load(io.BytesIO(buf.getvalue())).module()
        other = (torch.randn(7, 2, 3), torch.randn(7, 4))
        for inputs in (args, other):
            for g, w in zip(loaded(*inputs), model(*inputs)):
                torch.testing.assert_close(g, w)


def test_well_formed_calls_graphcap_does_not_write_load_and_damaged_ones_are_refused():
    # invoke_subgraph and with_effects are never in a graphcap file (nested_compile_region is inlined, an
    # effectful operator stays a plain call); a hand-made one of the right form loads and runs
    def retarget(target, args):
        def edit(p):
            node = _hop(p, "cond")
            node["target"], node["args"] = target, args
        return edit
    invoke = retarget({"hop": "invoke_subgraph"}, [N("true_graph_0"), "r", N("x")])
    got, _ = _run(program_json_edited(_saved("cond"), invoke), "cond")
    assert torch.equal(got, _x().sin())
    for target, args, match in [
        ({"hop": "invoke_subgraph"}, [N("true_graph_0"), "r"], "binds 0 operands to the subgraph true_graph_0"),
        ({"hop": "invoke_subgraph"}, [N("true_graph_0"), 3, N("x")], "as invoke_subgraph's identifier"),
        ({"hop": "with_effects"}, [{"op": "aten::sin.default"}, N("x")], "as with_effects' token, which is an empty"),
        ({"hop": "with_effects"}, [N("x"), {"op": "aten::sin.default"}, N("x")], "node x .* as with_effects' token"),
    ]:
        with pytest.raises(SerializationError, match=match):
            graphcap.load(program_json_edited(_saved("cond"), retarget(target, args)))


def test_a_loop_keyword_torch_writes_from_2_14_still_loads():
    # torch 2.14's while_loop, scan and map_impl take mutated_arg_indices (a string) by keyword
    def edit(p):
        _hop(p, "scan")["kwargs"]["mutated_arg_indices"] = ""
    graphcap.load(program_json_edited(_saved("scan"), edit))
    with pytest.raises(SerializationError, match="passes the keyword 'mutated_arg_indices' \\(int\\) to scan"):
        graphcap.load(program_json_edited(_saved("scan"), lambda p: _hop(p, "scan")["kwargs"].update(
            mutated_arg_indices=1)))


def test_every_operator_with_an_arity_has_its_form_check():
    """A higher-order operator given an argument count in hop_calls also has its form checked."""
    from graphcap.serialize import hop_calls
    assert set(hop_calls._ARITY) == set(hop_calls._FORMS)
