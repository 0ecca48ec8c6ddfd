"""Node names follow torch.export's rule where users read them: inputs get the
name they are owed, other nodes move aside; region submodules are numbered as
torch numbers them; the printed program is laid out byte for byte as torch's."""
from __future__ import annotations

import torch

import graphcap
from graphcap.trace.node_names import NameAllocator


def _names(graph):
    return [(n.name, n.op) for n in graph.nodes]


def test_input_keeps_its_name_when_an_operator_had_it():
    class Div(torch.nn.Module):
        def forward(self, x, y, div="floor"):
            return torch.div(x, y, rounding_mode=div)

    ep = graphcap.export(Div(), (torch.randn(4), torch.randn(4), "floor"))
    spec = ep.graph_signature.input_specs[2]
    assert (spec.arg.name, spec.arg.value) == ("div", "floor")
    assert [n.name for n in ep.graph.nodes if n.op == "call_function"] == ["div_1"]
    x, y = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(ep.module()(x, y, "floor"), torch.div(x, y, rounding_mode="floor"))


def test_operators_move_aside_with_the_next_free_suffix():
    class Foo(torch.nn.Module):
        def forward(self, mul, add, add_1):
            return mul * mul + add * add_1

    ep = graphcap.export(Foo(), (torch.randn(4, 4), torch.randn(4, 4), torch.randn(4, 4)))
    assert _names(ep.graph) == [("mul", "placeholder"), ("add", "placeholder"), ("add_1", "placeholder"),
                                ("mul_1", "call_function"), ("mul_2", "call_function"),
                                ("add_2", "call_function"), ("output", "output")]


def test_user_inputs_win_over_state_names():
    class Foo(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.param = torch.nn.Parameter(torch.randn(4))

        def forward(self, p):
            return p["param"] + self.param

    ep = graphcap.export(Foo(), ({"param": torch.randn(4)},))
    assert [s.arg.name for s in ep.graph_signature.input_specs] == ["p_param_1", "p_param"]


def test_builtin_names_are_kept_and_survive_save_load_and_decompositions(tmp_path):
    class Foo(torch.nn.Module):
        def forward(self, input, true_graph):
            x = input + true_graph[0]
            return torch.cond(x.sum() > 0, lambda x: x * 2.0, lambda x: x + 2.0, [x])

    inputs = (torch.randn(3, 4), (torch.randn(4),))
    ep = graphcap.export(Foo(), inputs)
    assert [s.arg.name for s in ep.graph_signature.input_specs] == ["input", "true_graph_0"]
    # the control-flow submodule's get_attr node moves aside; its attribute keeps its name
    assert [(n.name, n.target) for n in ep.graph.nodes if n.op == "get_attr"] == \
        [("true_graph_1", "true_graph_0"), ("false_graph_0", "false_graph_0")]
    expected = Foo()(*inputs)
    torch.testing.assert_close(ep.module()(*inputs), expected)
    path = tmp_path / "p.pt2"
    graphcap.save(ep, path)
    loaded = graphcap.load(path)
    assert [s.arg.name for s in loaded.graph_signature.input_specs] == ["input", "true_graph_0"]
    torch.testing.assert_close(loaded.module()(*inputs), expected)
    decomposed = ep.run_decompositions()
    assert [s.arg.name for s in decomposed.graph_signature.input_specs] == ["input", "true_graph_0"]
    torch.testing.assert_close(decomposed.module()(*inputs), expected)


def test_subgraph_placeholders_take_operand_names_and_their_nodes_move_aside():
    class Foo(torch.nn.Module):
        def forward(self, x, mul, mul_1):
            m = x * x
            return torch.cond(m.sum() > 0, lambda a, b, c: a * b * c, lambda a, b, c: a + b + c, [m, mul, mul_1])

    ep = graphcap.export(Foo(), (torch.randn(4), torch.randn(4), torch.randn(4)))
    assert _names(ep.graph_module.true_graph_0.graph) == [
        ("mul_2", "placeholder"), ("mul", "placeholder"), ("mul_1", "placeholder"),
        ("mul_3", "call_function"), ("mul_4", "call_function"), ("output", "output")]


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


def test_allocator_counts_from_the_highest_suffix_seen():
    names = NameAllocator()
    assert names.claim("mul_1", keep_whole=True) == "mul_1"
    assert names.claim("mul") == "mul"
    assert names.claim("mul") == "mul_2"
    assert names.claim("mul_2") == "mul_3"
    assert names.claim("x_1", keep_whole=True) == "x_1"
    assert names.claim("x_1", keep_whole=True) == "x_1_1"


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
