"""Node metadata survives the transformations a program goes through: exporting an existing
graph module (a program's module(), a make_fx graph) keeps each node's stack_trace,
nn_module_stack and custom annotations, and the graph module's meta["custom"];
run_decompositions keeps custom on the inputs and the output too; module()'s nodes name the
program node each was made from (meta["from_node"])."""
import torch
import torch.fx.traceback as fx_traceback
from torch.export import Dim
from torch.fx.experimental.proxy_tensor import make_fx

import graphcap


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x).relu()


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x, *, scale):
        return {"out": self.block(x) * scale, "rows": x.shape[0]}


def _annotated_program(dynamic=False):
    x, scale = torch.randn(4, 3), torch.tensor(2.0)
    shapes = {"x": {0: Dim("b", min=2, max=64)}, "scale": None} if dynamic else None
    ep = graphcap.export(Model(), (x,), {"scale": scale}, dynamic_shapes=shapes)
    for node in ep.graph.nodes:
        node.meta["custom"] = {"origin": node.name}
    ep.graph_module.meta["custom"] = {"model": "m1"}
    return ep, x, scale


def _ops(ep):
    return {n.name: n for n in ep.graph.nodes if n.op == "call_function"}


def test_reexported_module_keeps_node_metadata():
    ep, x, scale = _annotated_program()
    again = graphcap.export(ep.module(), (x,), {"scale": scale})
    before, after = _ops(ep), _ops(again)
    assert {"linear", "relu", "mul"} <= set(after)
    for name in ("linear", "relu", "mul"):
        assert after[name].meta["custom"] == {"origin": name}
        assert after[name].meta["stack_trace"] == before[name].meta["stack_trace"]
        fqns = [fqn for fqn, _ in after[name].meta["nn_module_stack"].values()]
        assert fqns == [fqn for fqn, _ in before[name].meta["nn_module_stack"].values()]
    assert [n.meta.get("custom") for n in again.graph.nodes if n.op == "placeholder"] == \
        [{"origin": n.name} for n in ep.graph.nodes if n.op == "placeholder"]
    assert again.graph_module.meta["custom"] == {"model": "m1"}
    out = again.module()(x, scale=scale)
    torch.testing.assert_close(out["out"], ep.module()(x, scale=scale)["out"])


class Checked(torch.nn.Module):
    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 2)
        torch._check(k <= x.shape[0])
        return x[:k] * 2, torch.zeros(k)


def test_reexport_with_runtime_checks_passes_graphcaps_own_verifier():
    x, n = torch.randn(8, 3), torch.tensor(3)
    shapes = {"x": {0: Dim("b", min=4, max=64)}, "n": None}
    ep = graphcap.export(Checked(), (x, n), dynamic_shapes=shapes)
    again = graphcap.export(ep.module(), (x, n), dynamic_shapes=shapes)  # verified on construction
    asserts = [m for m in again.graph.nodes if m.target is torch.ops.aten._assert_scalar.default]
    assert len(asserts) == 3 and all(m.meta.get("stack_trace") and m.meta.get("nn_module_stack") is not None
                                     for m in asserts)
    y = torch.randn(10, 3)
    torch.testing.assert_close(again.module()(y, torch.tensor(5))[0], y[:5] * 2)
    try:
        again.module()(y, torch.tensor(11))
    except RuntimeError as e:
        assert "u0 <= s" in str(e) or "11" in str(e)
    else:
        raise AssertionError("the re-exported program accepted n > x.shape[0]")


def test_exported_make_fx_graph_keeps_annotations():
    def f(a):
        with fx_traceback.annotate({"stage": "pre"}):
            b = a.sin()
        return (b * 2,)

    x = torch.randn(3)
    with fx_traceback.preserve_node_meta():
        gm = make_fx(f)(x)
    gm.meta["custom"] = {"source": "make_fx"}
    ep = graphcap.export(gm, (x,))
    ops = _ops(ep)
    assert ops["sin"].meta.get("custom") == {"stage": "pre"}
    assert not ops["mul"].meta.get("custom")
    assert ep.graph_module.meta["custom"] == {"source": "make_fx"}
    torch.testing.assert_close(ep.module()(x)[0], f(x)[0])


def test_run_decompositions_keeps_annotations_of_inputs_and_output():
    ep, x, scale = _annotated_program()
    decomposed = ep.run_decompositions()
    def ends(p):
        return [n.meta.get("custom") for n in p.graph.nodes if n.op in ("placeholder", "output")]
    assert ends(decomposed) == ends(ep)
    assert all(n.meta.get("custom", {}).get("origin") for n in decomposed.graph.nodes if n.op == "call_function")


def test_module_nodes_name_their_program_nodes():
    ep, x, scale = _annotated_program()
    module = ep.module()
    names = {n.name for n in ep.graph.nodes}
    graph_id = id(ep.graph)
    traced = [n for n in module.graph.nodes if n.op != "call_module"]
    assert traced
    for node in traced:
        (source,) = node.meta["from_node"]
        assert source.name in names and source.graph_id == graph_id
        assert source.pass_name == "ExportedProgram.module()"
    weight = next(n for n in module.graph.nodes if n.op == "get_attr" and n.target == "block.lin.weight")
    assert weight.meta["from_node"][0].name == "p_block_lin_weight"
    assert ep.graph.nodes and all("from_node" not in n.meta for n in ep.graph.nodes)  # the program is untouched


class Bar(torch.nn.Module):
    def forward(self, x):
        return x.cos()


class WithBar(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bar = Bar()

    def forward(self, x):
        return self.bar(x) + 1


def test_reexport_with_preserved_names_the_graph_module_does_not_call():
    import pytest
    x = torch.randn(3)
    ep = graphcap.export(WithBar(), (x,), preserve_module_call_signature=("bar",))
    with pytest.warns(UserWarning, match="does not call as submodules"):
        again = graphcap.export(ep.module(), (x,), preserve_module_call_signature=("bar",))
    assert all(e.signature is None for e in again.module_call_graph[1:])
    torch.testing.assert_close(graphcap.unflatten(again)(x), WithBar()(x))
    with pytest.raises(graphcap.errors.ExportInputError, match="not submodules"):
        graphcap.export(WithBar(), (x,), preserve_module_call_signature=("baz",))  # a module: still refused


def test_run_decompositions_keeps_the_graph_modules_annotations():
    ep, _, _ = _annotated_program()
    assert ep.run_decompositions().graph_module.meta["custom"] == {"model": "m1"}


def test_save_and_load_keep_annotations():
    import io
    import warnings

    ep, x, scale = _annotated_program(dynamic=True)
    ep.graph_module.meta["custom"] = {"model": "m1", "tags": ("a", 1), "opaque": object()}
    buf = io.BytesIO()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        graphcap.save(ep, buf)
    assert any("meta['custom']['opaque']" in str(w.message) for w in caught)
    loaded = graphcap.load(io.BytesIO(buf.getvalue()))
    assert [n.meta.get("custom") for n in loaded.graph.nodes] == [n.meta.get("custom") for n in ep.graph.nodes]
    assert loaded.graph_module.meta["custom"] == {"model": "m1", "tags": ("a", 1)}
    torch.testing.assert_close(loaded.module()(x, scale=scale)["out"], ep.module()(x, scale=scale)["out"])


def test_annotations_recorded_at_export_survive_save_and_load():
    import io

    class Annotated(torch.nn.Module):
        def forward(self, x):
            with fx_traceback.annotate({"stage": "pre"}):
                y = x.sin()
            return y * 2

    with fx_traceback.preserve_node_meta():
        ep = graphcap.export(Annotated(), (torch.randn(3),))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    loaded = graphcap.load(io.BytesIO(buf.getvalue()))
    assert _ops(loaded)["sin"].meta["custom"] == {"stage": "pre"}
    assert not _ops(loaded)["mul"].meta.get("custom")
