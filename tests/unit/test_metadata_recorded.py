"""Node metadata is recorded where nodes are made, in exported and decomposed programs alike.

Every placeholder and operator node carries ``val``; every operator node of a
module's program carries the user's ``stack_trace`` (a line of this file) and a
module stack starting at the root; the size reads torch's runtime-assert pass adds
take the line of the operation that needed the size. Nothing is filled in with a
default: a node without metadata would fail the verifier
(tests/unit/test_verifier_every_rule.py).
"""
from __future__ import annotations

import warnings

import torch

import graphcap

SIZE_READS = {torch.ops.aten.sym_size.int, torch.ops.aten.sym_numel.default, torch.ops.aten.sym_stride.int}


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()


class Model(torch.nn.Module):
    """A submodule, a dynamic batch, a data-dependent size, a cond and a constant."""

    def __init__(self):
        super().__init__()
        self.block = Block()
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x, n):
        self.steps.add_(1)
        h = self.block(x)
        k = n.item()
        torch._check(k >= 1)
        torch._check(k <= 8)
        h = torch.cond(h.sum() > 0, lambda t: t * 2, lambda t: t - torch.tensor([1.0, 2.0, 3.0, 4.0]), (h,))
        return h[: x.shape[0] // 2].sum(0) + torch.ones(k).sum(), x.to(torch.float64)


def _programs():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(Model(), (torch.randn(6, 4), torch.tensor(3)),
                             dynamic_shapes=({0: graphcap.Dim("b", min=2, max=32)}, None))
    return {"exported": ep, "decomposed": ep.run_decompositions()}


def _graphs(ep):
    return [gm for gm in ep.graph_module.modules() if isinstance(gm, torch.fx.GraphModule)]


def test_every_placeholder_and_operator_node_has_its_val():
    for stage, ep in _programs().items():
        for gm in _graphs(ep):
            for node in gm.graph.nodes:
                if node.op in ("placeholder", "call_function"):
                    assert "val" in node.meta, f"{stage}: {node.name}"
                if node.op == "call_function" and node.target is torch.ops.aten._assert_scalar.default:
                    assert node.meta["val"] is None, f"{stage}: {node.name}"


def test_operator_nodes_carry_the_users_line_and_module_stack():
    for stage, ep in _programs().items():
        for node in ep.graph.nodes:
            if node.op != "call_function":
                continue
            stack = node.meta.get("nn_module_stack")
            assert stack, f"{stage}: {node.name} has no module stack"
            assert next(iter(stack.values()))[0] == "", f"{stage}: {node.name} stack does not start at the root"
            trace = node.meta.get("stack_trace")
            assert isinstance(trace, str) and "test_metadata_recorded.py" in trace, \
                f"{stage}: {node.name} ({node.target}) has stack trace {trace!r}"


def test_subgraph_operator_nodes_carry_the_users_line():
    for stage, ep in _programs().items():
        for gm in _graphs(ep):
            if gm is ep.graph_module:
                continue
            for node in gm.graph.nodes:
                if node.op == "call_function" and node.target not in SIZE_READS:
                    trace = node.meta.get("stack_trace")
                    assert isinstance(trace, str) and "test_metadata_recorded.py" in trace, \
                        f"{stage}: {node.name} in a subgraph has stack trace {trace!r}"


def test_submodule_nodes_name_their_submodule():
    ep = _programs()["exported"]
    linear = next(n for n in ep.graph.nodes if n.target is torch.ops.aten.linear.default)
    paths = [path for path, _ in linear.meta["nn_module_stack"].values()]
    assert paths == ["", "block", "block.lin"]


def test_no_user_frame_is_carried_through_run_decompositions():
    """A program traced from generated code (an fx GraphModule: no user frame) records stack_trace
    None on its operators, and the operators run_decompositions makes of them record it too."""
    gm = torch.fx.symbolic_trace(lambda x, y: x + y)
    ep = graphcap.export(gm, (torch.randn(3, 3), torch.randn(3, 3)))
    ops = [n for n in ep.graph.nodes if n.op == "call_function"]
    assert ops and all("stack_trace" in n.meta for n in ops)
    decomposed = ep.run_decompositions()  # verified on the way out
    for node in decomposed.graph.nodes:
        if node.op == "call_function":
            assert "stack_trace" in node.meta and node.meta["stack_trace"] != "<graphcap: no user frame>"
    x, y = torch.randn(3, 3), torch.randn(3, 3)
    torch.testing.assert_close(decomposed.module()(x, y), x + y)


def test_an_int_an_operator_returns_beside_a_tensor_has_its_value_recorded():
    lib = torch.library.Library("graphcap_meta_test", "FRAGMENT")
    lib.define("tensor_and_rows(Tensor x) -> (Tensor, SymInt)")
    lib.impl("tensor_and_rows", lambda x: (x * 2, x.shape[0]), "CompositeExplicitAutograd")
    lib.impl("tensor_and_rows", lambda x: (torch.empty_like(x), x.shape[0]), "Meta")

    class M(torch.nn.Module):
        def forward(self, x):
            a, n = torch.ops.graphcap_meta_test.tensor_and_rows(x)
            return a, n

    ep = graphcap.export(M(), (torch.randn(4, 4),))
    getitems = [n for n in ep.graph.nodes if n.op == "call_function" and n.target.__name__ == "getitem"]
    assert [n.meta["val"] for n in getitems][1] == 4
    out, rows = ep.module()(torch.randn(4, 4))
    assert rows == 4 and out.shape == (4, 4)


class DisabledForward(torch.nn.Module):
    @torch._dynamo.disable()
    def forward(self, x, y):
        torch._check(x.shape[0] + y.shape[0] != 15)
        return x * 2, y * 2


class AnnotatedBody(torch.nn.Module):
    def forward(self, x, y):
        with torch.fx.traceback.annotate({"stage": "body"}):
            torch._check(x.shape[0] + y.shape[0] != 15)
            return x * 2, y * 2


def _export_two_dims(model):
    dims = {"x": (torch.export.Dim("dx"),), "y": (torch.export.Dim("dy"),)}
    with torch.fx.traceback.preserve_node_meta():
        return graphcap.export(model, (torch.randn(5), torch.randn(3)), dynamic_shapes=dims,
                               prefer_deferred_runtime_asserts_over_guards=True)


def test_a_disabled_forward_marks_the_size_reads_made_for_it_too():
    ep = _export_two_dims(DisabledForward())
    reads = [n for n in ep.graph.nodes if n.target in SIZE_READS]
    assert reads, "the assert needs both input sizes"
    for gm in (ep.graph_module, ep.module()):
        for node in gm.graph.nodes:
            if node.op == "call_function":
                assert node.meta.get("custom", {}).get("_torchdynamo_disable_method") == "forward", node.format_node()


def test_a_users_annotation_stays_on_the_lines_it_covers():
    ep = _export_two_dims(AnnotatedBody())
    reads = [n for n in ep.graph.nodes if n.target in SIZE_READS]
    assert reads and all("custom" not in n.meta for n in reads)
    muls = [n for n in ep.graph.nodes if n.target is torch.ops.aten.mul.Tensor]
    assert muls and all(n.meta["custom"] == {"stage": "body"} for n in muls)
