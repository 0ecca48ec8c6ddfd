"""Symbolic tracing against the spec: the torch.export tutorial's dynamic-shape
scenarios and docs/architecture.md's specialization facts — symbols and their ranges,
constraint violations with suggested fixes and the refine round trip,
Dim.AUTO/DYNAMIC, sizes 0 and 1, module() range and relation checks."""
from __future__ import annotations

import io
import logging

import pytest
import torch
import torch.export as te

import graphcap
from graphcap import Dim
from graphcap import refine_dynamic_shapes_from_suggested_fixes as refine
from graphcap.dynamic.suggested_fixes import parse_suggested_fixes


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class SliceAdd(torch.nn.Module):
    def forward(self, x, y):
        return x[1:] + y


class MatMul(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


class Branch(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 4:
            return x + 1
        return x - 1


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.lin(x).relu().view(x.shape[0], -1)


def _export_refined(model, args, spec):
    """export → ConstraintViolationError → refine → export."""
    with pytest.raises(graphcap.ConstraintViolationError) as info:
        graphcap.export(model, args, dynamic_shapes=spec)
    msg = str(info.value)
    assert "\nSuggested fixes:\n" in msg
    return msg, graphcap.export(model, args, dynamic_shapes=refine(msg, spec))


def _symbols(ep):
    return {str(k): (int(v.lower), v.upper) for k, v in ep.range_constraints.items()}


# -- tutorial scenarios ----------------------------------------------------------

def test_batch_dim_one_symbol_with_range_and_sym_size():
    model = Linear()
    ep = graphcap.export(model, (torch.randn(4, 8),), dynamic_shapes=({0: Dim("batch", min=1, max=32)},))
    (sym, (lo, hi)), = _symbols(ep).items()
    assert (lo, hi) == (1, 32)
    x = next(n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "x")
    assert str(x.meta["val"].shape[0]) == sym
    assert any(n.target is torch.ops.aten.sym_size.int for n in ep.graph.nodes)
    for node in ep.graph.nodes:  # symbols survive into every node's val
        if node.op == "call_function" and isinstance(node.meta.get("val"), torch.Tensor):
            assert str(node.meta["val"].shape[0]) == sym
    for b in (1, 5, 32):
        x = torch.randn(b, 8)
        torch.testing.assert_close(ep.module()(x), model(x))


def test_derived_dims_print_like_torch_export():
    dx = te.Dim("dx", min=3, max=6)
    spec = ({0: dx + 1}, {0: dx})
    args = (torch.randn(5, 4), torch.randn(4, 4))
    ep = graphcap.export(SliceAdd(), args, dynamic_shapes=spec)
    ref = te.export(SliceAdd(), args, dynamic_shapes=spec)
    assert str(ep).split("Range constraints: ")[1].strip() == "{s17 + 1: VR[4, 7], s17: VR[3, 6]}"
    assert str(ref).split("Range constraints: ")[1].strip() == "{s17 + 1: VR[4, 7], s17: VR[3, 6]}"
    m = ep.module()
    torch.testing.assert_close(m(torch.ones(7, 4), torch.ones(6, 4)), torch.full((6, 4), 2.0))
    with pytest.raises(graphcap.RuntimeInputError, match=r"\*args\[0\].shape\[0\] to be equal to 6, but got 5"):
        m(torch.ones(5, 4), torch.ones(5, 4))
    # Checked in input order, as torch does: the derived size of the first input is out of its range.
    with pytest.raises(graphcap.RuntimeInputError, match=r"to be >= 4, but got 3\nGuard failed: x.size\(\)\[0\] >= 4"):
        m(torch.ones(3, 4), torch.ones(2, 4))


def test_inner_matmul_dim_shared_by_two_inputs():
    k = Dim("k", min=2, max=32)
    ep = graphcap.export(MatMul(), (torch.randn(3, 5), torch.randn(5, 7)),
                         dynamic_shapes=({0: Dim("m", max=16), 1: k}, {0: k, 1: Dim("n", max=16)}))
    a_val, b_val = [n.meta["val"] for n in ep.graph.nodes if n.op == "placeholder"]
    assert a_val.shape[1].node.expr == b_val.shape[0].node.expr
    a, b = torch.randn(4, 9), torch.randn(9, 2)
    torch.testing.assert_close(ep.module()(a, b), a @ b)
    with pytest.raises(graphcap.RuntimeInputError, match=r"\*args\[1\].shape\[0\] to be equal to 9, but got 8"):
        ep.module()(a, torch.randn(8, 2))
    with pytest.raises(graphcap.RuntimeInputError, match=r"\*args\[0\].shape\[0\] to be <= 16, but got 20"):
        ep.module()(torch.randn(20, 9), b)


def test_shape_branch_needs_suggested_fix_and_round_trips():
    spec = ({0: Dim("x", min=2, max=16)},)
    msg, ep = _export_refined(Branch(), (torch.randn(6, 4),), spec)
    assert "Not all values of x" in msg and "the program needs 5 <= x <= 16" in msg
    assert "if x.shape[0] > 4" in msg  # the user's source line
    assert msg.rstrip().endswith("x = Dim('x', min=5, max=16)")
    assert list(_symbols(ep).values()) == [(5, 16)]
    with pytest.raises(graphcap.RuntimeInputError, match="to be >= 5, but got 4"):
        ep.module()(torch.randn(4, 4))


def test_relation_between_dims_is_suggested_and_refined():
    spec = {"x": {0: te.Dim("dx", max=32)}, "y": {0: te.Dim("dy", max=32)}}
    msg, ep = _export_refined(SliceAdd(), (torch.randn(5, 4), torch.randn(4, 4)), spec)
    fixes = parse_suggested_fixes(msg)
    assert fixes == {"dx": "dy + 1", "dy": "Dim('dy', max=31)"}
    assert _symbols(ep) == {"s17 + 1": (1, 32), "s17": (0, 31)}
    assert ep.module()(torch.ones(9, 4), torch.ones(8, 4)).shape == (8, 4)


def test_equal_dims_suggest_one_dim():
    spec = ({0: Dim("dx", max=20)}, {0: Dim("dy", max=20)})
    msg, ep = _export_refined(Add(), (torch.randn(4, 3), torch.randn(4, 3)), spec)
    assert "The program needs dx = dy" in msg and parse_suggested_fixes(msg) == {"dx": "dy"}
    assert "in forward: return x + y" in msg  # the user's line, not the torch operator that guarded
    x_val, y_val = [n.meta["val"] for n in ep.graph.nodes if n.op == "placeholder"]
    assert x_val.shape[0].node.expr == y_val.shape[0].node.expr
    with pytest.raises(graphcap.RuntimeInputError, match="to be equal to 5, but got 6"):
        ep.module()(torch.ones(5, 3), torch.ones(6, 3))


def test_specialization_suggests_a_static_size():
    class Sp(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.shape[0] == 4 else x

    msg, ep = _export_refined(Sp(), (torch.randn(4, 3),), ({0: Dim("b", min=2, max=16)},))
    assert "only works for b = 4" in msg and parse_suggested_fixes(msg) == {"b": "4"}
    assert ep.range_constraints == {}


def test_refine_reads_torch_export_messages_too():
    spec = ({0: te.Dim("x", min=2, max=16)},)
    with pytest.raises(Exception) as info:
        te.export(Branch(), (torch.randn(6, 4),), dynamic_shapes=spec)
    refined = refine(str(info.value), spec)
    assert (refined[0][0].min, refined[0][0].max) == (5, 16)
    graphcap.export(Branch(), (torch.randn(6, 4),), dynamic_shapes=refined)


def test_refine_without_fixes_is_an_error():
    with pytest.raises(graphcap.ExportInputError, match="no 'Suggested fixes:'"):
        refine("nothing here", ({0: Dim("x")},))


# -- AUTO / DYNAMIC ------------------------------------------------------------------

def test_auto_finds_relations_without_error(caplog):
    with caplog.at_level(logging.INFO, logger="graphcap.dynamic"):
        ep = graphcap.export(Add(), (torch.randn(4, 3), torch.randn(4, 3)),
                             dynamic_shapes=({0: Dim.AUTO}, {0: Dim.AUTO}))
    assert len(ep.range_constraints) == 1
    assert "was found to equal" in caplog.text
    assert ep.module()(torch.ones(7, 3), torch.ones(7, 3)).shape == (7, 3)


class CompareDims(torch.nn.Module):
    def forward(self, x, y):
        if x.shape[0] <= y.shape[0]:
            return x.sum(0)
        return y.sum(0) * 2


def test_auto_relation_between_dims_is_asserted_and_checked_before_compute():
    """Specialized on x.shape[0] <= y.shape[0]: inputs on the other side are refused, not
    silently run through the branch the example took (a range per dim cannot say this)."""
    model = CompareDims()
    ep = graphcap.export(model, (torch.randn(3, 2), torch.randn(4, 2)), dynamic_shapes=({0: Dim.AUTO}, {0: Dim.AUTO}))
    asserts = [n for n in ep.graph.nodes if n.target is torch.ops.aten._assert_scalar.default]
    assert len(asserts) == 1
    for a, b in [(3, 4), (4, 4), (1, 9)]:
        x, y = torch.randn(a, 2), torch.randn(b, 2)
        torch.testing.assert_close(ep.module()(x, y), model(x, y))
    with pytest.raises(graphcap.RuntimeInputError,
                       match=r"satisfy \*args\[0\]\.shape\[0\] <= \*args\[1\]\.shape\[0\], but got "
                             r"\*args\[0\]\.shape\[0\] = 5, \*args\[1\]\.shape\[0\] = 4"):
        ep.module()(torch.randn(5, 2), torch.randn(4, 2))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    with pytest.raises(graphcap.RuntimeInputError, match="satisfy"):
        graphcap.load(buf).module()(torch.randn(5, 2), torch.randn(4, 2))
    with pytest.raises(RuntimeError, match="Runtime assertion failed"):  # the graph itself refuses too
        ep.graph_module(torch.randn(5, 2), torch.randn(4, 2))


def test_dynamic_specialization_is_logged_with_the_source_line(caplog):
    with caplog.at_level(logging.INFO, logger="graphcap.dynamic"):
        ep = graphcap.export(Branch(), (torch.randn(6, 4),), dynamic_shapes=({0: Dim.DYNAMIC},))
    (lo, hi), = _symbols(ep).values()
    assert lo == 5  # the range found is the one used
    with caplog.at_level(logging.INFO, logger="graphcap.dynamic"):
        graphcap.export(Add(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=({0: Dim.AUTO}, None))
    assert "was specialized to 4" in caplog.text
    # Dim.DYNAMIC says "this must stay dynamic": specializing it is an error, as in torch.export
    with pytest.raises(graphcap.ConstraintViolationError, match=r"specialized it to be a constant \(4\)"):
        graphcap.export(Add(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=({0: Dim.DYNAMIC}, None))


# -- sizes 0 and 1 ----------------------------------------------------------------------

def test_example_size_one_stays_symbolic_over_the_declared_range():
    model = Linear()
    ep = graphcap.export(model, (torch.randn(1, 8),), dynamic_shapes=({0: Dim("batch", min=1, max=16)},))
    assert list(_symbols(ep).values()) == [(1, 16)]
    for b in (1, 2, 16):
        x = torch.randn(b, 8)
        torch.testing.assert_close(ep.module()(x), model(x))


def test_example_size_zero_stays_symbolic():
    ep = graphcap.export(Add(), (torch.randn(0, 3), torch.randn(0, 3)),
                         dynamic_shapes=({0: Dim("b", max=8)}, {0: Dim("b", max=8)}))
    assert list(_symbols(ep).values()) == [(0, 8)]
    assert ep.module()(torch.ones(0, 3), torch.ones(0, 3)).shape == (0, 3)
    assert ep.module()(torch.ones(5, 3), torch.ones(5, 3)).shape == (5, 3)


def test_declared_min_one_is_kept_for_larger_examples():
    ep = graphcap.export(Add(), (torch.randn(4, 3), torch.randn(1, 3)),
                         dynamic_shapes=({0: Dim("b", min=1, max=8)}, None))
    assert list(_symbols(ep).values()) == [(1, 8)]
    assert ep.module()(torch.ones(1, 3), torch.ones(1, 3)).shape == (1, 3)  # broadcasting at the low end


def test_code_that_needs_size_one_is_a_clear_error():
    class Squeeze(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] == 1:
                return x.squeeze(0)
            return x

    spec = ({0: Dim("b", min=1, max=8)},)
    msg, ep = _export_refined(Squeeze(), (torch.randn(1, 3),), spec)
    assert "only works for b = 1" in msg and "if x.shape[0] == 1" in msg
    assert ep.module()(torch.ones(1, 3)).shape == (3,)
