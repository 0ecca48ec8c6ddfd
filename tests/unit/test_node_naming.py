"""Names users read follow torch.export's: a control-flow subgraph's inputs take
the names of the values bound to them and its other nodes move aside; region
submodules are numbered as torch numbers them; the printed program is laid
out byte for byte as torch's."""
from __future__ import annotations

import torch

import graphcap


def _names(graph):
    return [(n.name, n.op) for n in graph.nodes]


def test_subgraph_placeholders_take_operand_names_and_their_nodes_move_aside():
    class Foo(torch.nn.Module):
        def forward(self, x, y):
            m = x * x
            n = y * 2
            return torch.cond(m.sum() > 0, lambda a, b, c: a * b * c, lambda a, b, c: a + b + c, [m, n, x])

    inputs = (torch.randn(4), torch.randn(4))
    ep = graphcap.export(Foo(), inputs)
    assert [n.name for n in ep.graph.nodes if n.op == "call_function"][:2] == ["mul", "mul_1"]
    # the branch's own mul / mul_1 move past the highest suffix its inputs hold
    assert _names(ep.graph_module.true_graph_0.graph) == [
        ("mul", "placeholder"), ("mul_1", "placeholder"), ("x", "placeholder"),
        ("mul_2", "call_function"), ("mul_3", "call_function"), ("output", "output")]
    torch.testing.assert_close(ep.module()(*inputs), Foo()(*inputs))


def test_grad_region_is_numbered_by_its_piece():
    class Model(torch.nn.Module):
        def forward(self, x, y):
            def true_fn(x, y):
                with torch.enable_grad():
                    return x - 1 + y

            return torch.cond(x.sum() > 0, true_fn, lambda x, y: x + 1 - y, [x, y])

    with torch.no_grad():
        ep = graphcap.export(Model(), (torch.tensor(10.0), torch.tensor(12.0)))
    assert ep.graph_module.true_graph_0.code.strip() == """\
def forward(self, x, y):
    submod_3 = self.submod_1
    add = torch.ops.higher_order.wrap_with_set_grad_enabled(True, submod_3, x, y);  submod_3 = x = y = None
    getitem = add[0];  add = None
    return (getitem,)"""
    with torch.no_grad():
        assert ep.module()(torch.tensor(10.0), torch.tensor(12.0)) == torch.tensor(21.0)


def test_region_with_several_outputs_keeps_their_names():
    class Foo(torch.nn.Module):
        def forward(self, x):
            with torch.enable_grad():
                a = x.sin()
                b = a.cos()
            return a + b

    with torch.no_grad():
        ep = graphcap.export(Foo(), (torch.randn(3),))
    calls = [n for n in ep.graph.nodes if n.op == "call_function"]
    assert [n.name for n in calls] == ["wrap_with_set_grad_enabled", "sin", "cos", "add"]
    assert hasattr(ep.graph_module, "submod_1")


def test_printed_program_indents_every_line_as_torch_does():
    class M(torch.nn.Module):
        def forward(self, x):
            y = x.sin()
            return y.cos()

    text = str(graphcap.export(M(), (torch.randn(2),)))
    lines = text.split("\n")
    assert "Graph signature:" in lines and "Graph signature: " not in text
    inside = lines[1:lines.index("Graph signature:")]
    assert all(line.startswith("    ") for line in inside)
    assert text.endswith("Range constraints: {}\n")


def test_regions_read_as_torch_prints_them():
    """Outputs in order of first use after the region; a one-output region's
    getitem numbered after those the cut made for several-output pieces."""
    class Bar(torch.nn.Module):
        def forward(self, x):
            a = x.sin()
            with torch.no_grad():
                b = a * 2
            c = b + 1
            with torch.no_grad():
                d = c * 3
                e = d - 1
            return e, d

    ep = graphcap.export(Bar(), (torch.randn(3),))
    assert ep.graph_module.code.strip() == """\
def forward(self, x):
    sin = torch.ops.aten.sin.default(x);  x = None
    submod_5 = self.submod_1
    mul = torch.ops.higher_order.wrap_with_set_grad_enabled(False, submod_5, sin);  submod_5 = sin = None
    getitem_2 = mul[0];  mul = None
    add = torch.ops.aten.add.Tensor(getitem_2, 1);  getitem_2 = None
    submod_6 = self.submod_3
    wrap_with_set_grad_enabled = torch.ops.higher_order.wrap_with_set_grad_enabled(False, submod_6, add);  submod_6 = add = None
    sub = wrap_with_set_grad_enabled[0]
    mul_1 = wrap_with_set_grad_enabled[1];  wrap_with_set_grad_enabled = None
    return (sub, mul_1)"""  # noqa: E501 (the program's code as torch prints it)
    x = torch.randn(3)
    torch.testing.assert_close(ep.module()(x), Bar()(x))
