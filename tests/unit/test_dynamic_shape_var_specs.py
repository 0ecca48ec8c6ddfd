"""torch's ShapesSpec / ParamsSpec as dynamic_shapes: sizes become unbacked symbols (never
specialized), derived sizes are checked, ranges come from ShapeVar min/max; non-strict too."""
from __future__ import annotations

import pytest
import torch

from conftest import TORCH_LINE

if TORCH_LINE >= (2, 13):
    from torch.fx.experimental.dynamic_spec import STATIC, IntVar, ParamsSpec, SeqSpec, ShapesSpec, ShapeVar, TensorSpec
else:  # torch 2.10 to 2.12 have no such spec objects (no user can pass one): the module is skipped
    STATIC = IntVar = ParamsSpec = SeqSpec = ShapesSpec = ShapeVar = TensorSpec = None
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

import graphcap

pytestmark = pytest.mark.skipif(TORCH_LINE < (2, 13), reason="torch.fx.experimental.dynamic_spec ships with torch 2.13")


class Sum0(torch.nn.Module):
    def forward(self, x):
        return x.sum(0)


class Pair(torch.nn.Module):
    def forward(self, x, y):
        return x.sum(0) + y.sum(0)


class Scale(torch.nn.Module):
    def forward(self, x, n):
        return x.sum(0) * n


class ListIn(torch.nn.Module):
    def forward(self, xs):
        return xs[0].sum(0) + xs[1].sum(0)


def _placeholder_sizes(ep, name):
    (node,) = [n for n in ep.graph.nodes if n.op == "placeholder" and n.name == name]
    return node.meta["val"].shape


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("wrap", [lambda p: p, ShapesSpec])
def test_shape_var_is_an_unbacked_size(strict, wrap):
    spec = wrap(ParamsSpec({"x": TensorSpec([ShapeVar("batch"), STATIC])}))
    ep = graphcap.export(Sum0(), (torch.randn(8, 3),), dynamic_shapes=spec, strict=strict)
    size = _placeholder_sizes(ep, "x")[0]
    assert isinstance(size, torch.SymInt) and free_unbacked_symbols(size)
    for n in (0, 1, 50):
        x = torch.randn(n, 3)
        torch.testing.assert_close(ep.module()(x), x.sum(0))


def test_min_max_become_the_range_and_are_checked():
    spec = ParamsSpec({"x": TensorSpec([ShapeVar("b", min=10, max=100), STATIC])})
    ep = graphcap.export(Sum0(), (torch.randn(20, 3),), dynamic_shapes=spec)
    ((lo, hi),) = [(int(v.lower), int(v.upper)) for v in ep.range_constraints.values()]
    assert (lo, hi) == (10, 100)
    for bad in (9, 101):
        with pytest.raises(graphcap.RuntimeInputError):
            ep.module()(torch.randn(bad, 3))


def test_derived_size_is_the_expression_and_checked_before_computing():
    b = ShapeVar("b", min=1, max=64)
    spec = ParamsSpec({"x": TensorSpec([b, STATIC]), "y": TensorSpec([b * 2 + 1, STATIC])})
    ep = graphcap.export(Pair(), (torch.randn(4, 3), torch.randn(9, 3)), dynamic_shapes=spec)
    assert "2*u0 + 1" in str(_placeholder_sizes(ep, "y")[0])
    x, y = torch.randn(6, 3), torch.randn(13, 3)
    torch.testing.assert_close(ep.module()(x, y), Pair()(x, y))
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()(torch.randn(6, 3), torch.randn(12, 3))


class Triple(torch.nn.Module):
    def forward(self, x, y, z):
        return x.sum() + y.sum() + z.sum()


@pytest.mark.parametrize("strict", [False, True])
def test_a_broken_relation_of_spec_sizes_names_the_input_and_the_graphs_assertion(strict):
    """A ShapesSpec relation lives in the graph as an assert (its sizes are unbacked): module()
    checks it first, naming the input and the size it must have, in torch's words for that assert
    (a RuntimeError); a Dim relation is a guard and keeps torch's guard words."""
    a, b = ShapeVar("a"), ShapeVar("b")
    spec = ParamsSpec({"x": TensorSpec([a, STATIC]), "y": TensorSpec([b, STATIC]),
                       "z": TensorSpec([a * b + 1, STATIC])})
    ep = graphcap.export(Triple(), (torch.randn(3, 2), torch.randn(4, 2), torch.randn(13, 2)),
                         dynamic_shapes=spec, strict=strict)
    assert any("_assert_scalar" in str(n.target) for n in ep.graph.nodes)
    args = (torch.randn(5, 2), torch.randn(2, 2), torch.randn(11, 2))
    torch.testing.assert_close(ep.module()(*args), Triple()(*args))
    with pytest.raises(RuntimeError) as caught:
        ep.module()(torch.randn(5, 2), torch.randn(2, 2), torch.randn(12, 2))
    text = str(caught.value)
    assert "*args[2].shape[0] to be equal to 11, but got 12" in text
    assert "Runtime assertion failed for expression" in text and "Guard failed" not in text
    d = graphcap.Dim("d")
    ep = graphcap.export(Pair(), (torch.randn(4, 3), torch.randn(8, 3)),
                         dynamic_shapes={"x": {0: d}, "y": {0: 2 * d}}, strict=strict)
    with pytest.raises(AssertionError, match="Guard failed: 2\\*x.size\\(\\)\\[0\\] == y.size\\(\\)\\[0\\]"):
        ep.module()(torch.randn(4, 3), torch.randn(6, 3))


def test_a_branch_on_an_unbacked_size_is_a_data_dependent_error():
    class Branch(torch.nn.Module):
        def forward(self, x):
            if x.shape[0] > 5:
                return x + 1
            return x - 1

    from graphcap.errors import DataDependentError
    with pytest.raises(DataDependentError):
        graphcap.export(Branch(), (torch.randn(8, 3),),
                        dynamic_shapes=ParamsSpec({"x": TensorSpec([ShapeVar("b"), STATIC])}))
    # bounds that decide the branch make it exportable
    ep = graphcap.export(Branch(), (torch.randn(8, 3),),
                         dynamic_shapes=ParamsSpec({"x": TensorSpec([ShapeVar("b", min=6, max=64), STATIC])}))
    x = torch.randn(30, 3)
    torch.testing.assert_close(ep.module()(x), x + 1)


@pytest.mark.parametrize("strict", [False, True])
def test_int_var_makes_an_int_input_a_symint(strict):
    ep = graphcap.export(Scale(), (torch.randn(8, 3), 5), strict=strict,
                         dynamic_shapes=ParamsSpec({"x": TensorSpec([ShapeVar("B"), STATIC]), "n": IntVar("n")}))
    n_placeholder = [n for n in ep.graph.nodes if n.op == "placeholder"][1]
    assert isinstance(n_placeholder.meta["val"], torch.SymInt)
    x = torch.randn(20, 3)
    for n in (42, 0, 1, -3):  # values other than the example's: computed with, not baked in
        torch.testing.assert_close(ep.module()(x, n), x.sum(0) * n)


def test_seq_spec_and_unlisted_parameters_stay_static():
    spec = ParamsSpec({"xs": SeqSpec([TensorSpec([ShapeVar("A"), STATIC])])})
    ep = graphcap.export(ListIn(), ([torch.randn(8, 3), torch.randn(5, 3)],), dynamic_shapes=spec)
    out = ep.module()([torch.randn(11, 3), torch.randn(5, 3)])
    assert out.shape == (3,)
    with pytest.raises(graphcap.RuntimeInputError):
        ep.module()([torch.randn(11, 3), torch.randn(6, 3)])


def test_tensor_spec_on_a_list_input_is_a_user_error():
    from torch._dynamo.exc import UserError
    with pytest.raises(UserError, match="not a Tensor"):
        graphcap.export(ListIn(), ([torch.randn(8, 3), torch.randn(8, 3)],),
                        dynamic_shapes=ParamsSpec({"xs": TensorSpec([ShapeVar("B"), STATIC])}))


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("wrap", [lambda p: p, lambda p: ShapesSpec(p)])
def test_static_entry_that_differs_from_the_example_is_a_user_error(strict, wrap):
    from torch._dynamo.exc import UserError
    with pytest.raises(UserError) as caught:
        graphcap.export(Pair(), (torch.randn(4, 3), torch.randn(2, 5)), strict=strict,
                        dynamic_shapes=wrap(ParamsSpec({"x": TensorSpec([ShapeVar("a"), 3]),
                                                        "y": TensorSpec([ShapeVar("b"), 3])})))
    assert isinstance(caught.value, ValueError)  # torch raises a ValueError here
    text = str(caught.value)
    # graphcap's words name the input; torch's sentence for a ShapesSpec is there for code matching it
    assert "dynamic_shapes['y'] fixes dim 1 to 3, but the example input has size 5" in text
    assert "shapes_spec declares dim 1 as static with value 3, but got 5" in text


def test_a_dict_spec_static_mismatch_does_not_speak_of_a_shapes_spec():
    with pytest.raises(ValueError) as caught:
        graphcap.export(Sum0(), (torch.randn(4, 5),), dynamic_shapes={"x": {1: 3}})
    assert "fixes dim 1 to 3" in str(caught.value) and "shapes_spec" not in str(caught.value)


@pytest.mark.parametrize("strict", [False, True])
def test_assumptions_are_known_to_the_trace_and_asserted(strict):
    """``ShapesSpec(assumptions=[b % 2 == 0])``: the program holds for every even b and refuses an
    odd one before computing, after run_decompositions and a save/load round trip as well."""
    import io
    b = ShapeVar("b", min=2, max=64)
    spec = ShapesSpec(ParamsSpec({"x": TensorSpec([b, 3]), "y": TensorSpec([b * 2, 3])}), assumptions=[b % 2 == 0])
    model = Pair()
    ep = graphcap.export(model, (torch.randn(4, 3), torch.randn(8, 3)), dynamic_shapes=spec, strict=strict)
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    for program in (ep, ep.run_decompositions(), graphcap.load(buf)):
        x, y = torch.randn(6, 3), torch.randn(12, 3)
        torch.testing.assert_close(program.module()(x, y), model(x, y))
        with pytest.raises(RuntimeError, match=r"x.size\(\)\[0\] % 2 == 0"):
            program.module()(torch.randn(5, 3), torch.randn(10, 3))


def test_an_assumption_over_a_variable_the_params_do_not_use_is_refused():
    b, c = ShapeVar("b"), ShapeVar("c")
    for params in (ParamsSpec({"x": TensorSpec([b, STATIC])}), None):  # a ShapesSpec without params too
        with pytest.raises(graphcap.ExportInputError, match=r"assumptions\[0\] \(c > 2\) is over c, which no"):
            graphcap.export(Sum0(), (torch.randn(8, 3),), dynamic_shapes=ShapesSpec(params, assumptions=[c > 2]))


@pytest.mark.parametrize("case", ["below min", "expression", "assumption"])
def test_examples_that_break_the_spec_are_refused_at_export(case):
    """The program asserts each of these, so it would refuse the inputs it was exported with:
    refused at export, naming the input (torch exports the program)."""
    b = ShapeVar("b", min=6)
    x, y = torch.randn(4, 3), torch.randn(8, 3)
    if case == "below min":
        spec, text = ParamsSpec({"x": TensorSpec([b, 3]), "y": None}), "size 4 at *args[0].shape[0]"
    elif case == "expression":
        b = ShapeVar("b")
        spec, text = ParamsSpec({"x": TensorSpec([b, 3]), "y": TensorSpec([b * 3, 3])}), "3*b = 12"
    else:
        b = ShapeVar("b")
        x, y = torch.randn(5, 3), torch.randn(10, 3)
        spec = ShapesSpec(ParamsSpec({"x": TensorSpec([b, 3]), "y": TensorSpec([b * 2, 3])}), assumptions=[b % 2 == 0])
        text = "(b = 5)"
    with pytest.raises(graphcap.ExportInputError) as caught:
        graphcap.export(Pair(), (x, y), dynamic_shapes=spec)
    assert text in str(caught.value)


def test_params_spec_programs_decompose():
    """The spec's own range checks (no user line of theirs) keep that record through
    run_decompositions, whose verifier refused them before."""
    b = ShapeVar("b")
    ep = graphcap.export(Pair(), (torch.randn(4, 3), torch.randn(8, 3)),
                         dynamic_shapes=ParamsSpec({"x": TensorSpec([b, 3]), "y": TensorSpec([b * 2, 3])}))
    decomposed = ep.run_decompositions()
    x, y = torch.randn(7, 3), torch.randn(14, 3)
    torch.testing.assert_close(decomposed.module()(x, y), Pair()(x, y))
    asserts = [n for n in decomposed.graph.nodes if n.target is torch.ops.aten._assert_scalar.default]
    assert asserts and all(n.meta["stack_trace"] == "" for n in asserts)


@pytest.mark.parametrize("strict", [False, True])
def test_each_input_placeholder_binds_the_symbols_of_its_sizes(strict):
    """The symbol of a ShapeVar is bound where it enters: the placeholder of the first input that
    carries it (``unbacked_bindings``: ``x.size()[0]``, the int itself for an IntVar); a second use
    (``xs_1``, ``2*u0``) binds nothing new. Every line writes the same bindings (torch 2.13's
    make_fx refuses to bind placeholders; graphcap writes them itself)."""
    b = ShapeVar("b")
    spec = ParamsSpec({"x": TensorSpec([STATIC, b]), "n": IntVar("n")})
    ep = graphcap.export(Scale(), (torch.randn(3, 5), 4), dynamic_shapes=spec, strict=strict)
    bound = {n.name: n.meta.get("unbacked_bindings") for n in ep.graph.nodes if n.op == "placeholder"}
    (x_sym, x_path), = bound["x"].items()
    (n_sym, n_path), = bound["n"].items()
    assert x_sym == _placeholder_sizes(ep, "x")[1].node.expr
    assert str(x_path) == "(CallMethodKey(name='size'), SequenceKey(idx=1))"
    assert n_path == () and x_sym != n_sym
    spec = ParamsSpec({"xs": SeqSpec([TensorSpec([b, STATIC]), TensorSpec([b * 2, STATIC])])})
    ep = graphcap.export(ListIn(), ([torch.randn(5, 3), torch.randn(10, 3)],), dynamic_shapes=spec, strict=strict)
    bound = {n.name: n.meta.get("unbacked_bindings") for n in ep.graph.nodes if n.op == "placeholder"}
    assert len(bound["xs_0"]) == 1 and not bound["xs_1"]
    xs = [torch.randn(7, 3), torch.randn(14, 3)]
    torch.testing.assert_close(ep.module()(xs), ListIn()(xs))


def test_each_thread_translates_its_own_specs_variables():
    """The ShapeVar objects of the spec being translated are kept per thread: a spec translated in
    another thread at the same time neither sees nor replaces this thread's."""
    import threading

    from graphcap.dynamic import shape_var_specs
    mine, theirs = ShapeVar("mine", min=1, max=8), ShapeVar("theirs", min=1, max=8)
    shape_var_specs._collect_spec_variables(ParamsSpec({"x": TensorSpec([mine, STATIC])}))
    seen_there = {}

    def other_thread():
        seen_there["before"] = dict(shape_var_specs._variables())
        shape_var_specs._collect_spec_variables(ParamsSpec({"x": TensorSpec([theirs, STATIC])}))
        seen_there["after"] = dict(shape_var_specs._variables())

    worker = threading.Thread(target=other_thread)
    worker.start()
    worker.join()
    assert seen_there["before"] == {}
    assert list(seen_there["after"].values()) == [theirs]
    assert list(shape_var_specs._variables().values()) == [mine]
    # and exports in two threads at once each get their own program
    x = torch.randn(4, 3)
    results = {}

    def export_with(name, var):
        results[name] = graphcap.export(Sum0(), (x,), dynamic_shapes=ParamsSpec({"x": TensorSpec([var, STATIC])}))

    threads = [threading.Thread(target=export_with, args=(n, v)) for n, v in (("a", mine), ("b", theirs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for ep in results.values():
        torch.testing.assert_close(ep.module()(torch.ones(7, 3)), torch.full((3,), 7.0))
