"""``ep.module()`` is a ``torch.fx.GraphModule`` whose graph is the whole behaviour: state read
through get_attr at its FQNs, updates written back with copy_, the user's own arguments in and the
original output structure out, inputs checked before any operator runs."""
from __future__ import annotations

import copy
import threading

import pytest
import torch
from torch import nn

import graphcap


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("steps", torch.zeros(3))
        self.offset = torch.full((3,), 0.5)  # a plain tensor attribute: a lifted constant

    def forward(self, x, *, scale):
        self.steps.add_(1)
        return {"out": self.lin(x) * scale + self.offset, "steps": [self.steps + 0]}


def _inputs():
    return (torch.randn(2, 3),), {"scale": torch.full((3,), 2.0)}


def _export(model=None):
    args, kwargs = _inputs()
    return graphcap.export(model or Model(), args, kwargs)


def test_module_is_a_graph_module_taking_the_users_arguments():
    m = _export().module()
    assert isinstance(m, torch.fx.GraphModule)
    code = m.code.strip()
    assert code.startswith("def forward(self, x, scale):\n    x, scale, = fx_pytree.tree_flatten_spec(")
    assert code.splitlines()[-1].startswith("    return pytree.tree_unflatten((")
    assert "lin_weight = self.lin.weight" in code and "self._guards_fn(x, scale)" in code
    assert not [n for n in m.graph.nodes if n.op == "placeholder" and n.name.startswith(("p_", "b_", "c_"))]
    assert "class GraphModule(torch.nn.Module)" in m.print_readable(print_output=False)


def test_state_lives_at_its_fqns_and_constants_are_plain_attributes():
    ep = _export()
    m = ep.module()
    assert set(m.state_dict()) == {"lin.weight", "lin.bias", "steps"}
    assert m.lin.weight is ep.state_dict["lin.weight"]  # parameters are shared
    const_fqn = ep.graph_signature.lifted_tensor_constants[0]
    torch.testing.assert_close(getattr(m, const_fqn), torch.full((3,), 0.5))
    m.double()  # constants move with the module
    assert getattr(m, const_fqn).dtype == torch.float64


def test_running_matches_eager_and_updates_the_programs_state():
    """module() holds the program's own buffers, as torch's does: a run updates ep.state_dict."""
    model = Model()
    ep = _export(copy.deepcopy(model))
    m = ep.module()
    args, kwargs = _inputs()
    for _ in range(2):
        expected, got = model(*args, **kwargs), m(*args, **kwargs)
        torch.testing.assert_close(got, expected)
        assert isinstance(got, dict) and isinstance(got["steps"], list)
    assert m.steps is ep.state_dict["steps"]
    assert torch.equal(ep.state_dict["steps"], torch.full((3,), 2.0))


def test_inference_ir_updates_are_copy_nodes_in_the_graph():
    ep = _export().run_decompositions()
    m = ep.module()
    copies = [n for n in m.graph.nodes if n.target is torch.ops.aten.copy_.default]
    assert [c.args[0].target for c in copies] == ["steps"]
    args, kwargs = _inputs()
    m(*args, **kwargs)
    assert torch.equal(m.steps, torch.ones(3)) and m.steps is ep.state_dict["steps"]


def test_graph_edits_take_effect_after_recompile():
    class Double(nn.Module):
        def forward(self, x):
            return x * 2

    m = graphcap.export(Double(), (torch.ones(2),)).module()
    mul = next(n for n in m.graph.nodes if n.target is torch.ops.aten.mul.Tensor)
    mul.target = torch.ops.aten.add.Tensor
    m.recompile()
    torch.testing.assert_close(m(torch.ones(2)), torch.full((2,), 3.0))


def test_reexport_keeps_state_as_state():
    ep = _export()
    args, kwargs = _inputs()
    expected = copy.deepcopy(ep.module())(*args, **kwargs)  # a copy: the runs below update ep's state
    ep2 = graphcap.export(ep.module(), args, kwargs)
    sig = ep2.graph_signature
    assert sig.parameters == ("lin.weight", "lin.bias") and sig.buffers == ("steps",)
    assert [s.arg.name for s in sig.input_specs if s.kind is graphcap.InputKind.USER_INPUT] == ["x", "scale"]
    torch.testing.assert_close(ep2.module()(*args, **kwargs), expected)
    assert ep2.state_dict["steps"] is ep.state_dict["steps"]  # the re-export holds the same state


def test_errors_are_graphcaps_and_torchs_types():
    class Add(nn.Module):
        def forward(self, x, y, mode):
            return torch.div(x, y, rounding_mode=mode)

    m = graphcap.export(Add(), (torch.randn(4, 4), torch.randn(4), "trunc")).module()
    with pytest.raises(AssertionError, match=r"Guard failed: mode == 'trunc'") as info:
        m(torch.randn(4, 4), torch.randn(4), "floor")
    assert isinstance(info.value, graphcap.RuntimeInputError)
    with pytest.raises(AssertionError, match=r"Guard failed: x.size\(\)\[0\] == 4"):
        m(torch.randn(5, 4), torch.randn(4), "trunc")
    with pytest.raises(ValueError, match="Trying to flatten user inputs") as info:
        m(torch.randn(4, 4), torch.randn(4))
    assert isinstance(info.value, graphcap.RuntimeInputError)


def test_checks_survive_deepcopy():
    m = copy.deepcopy(_export().module())
    args, kwargs = _inputs()
    m(*args, **kwargs)
    with pytest.raises(ValueError, match="Trying to flatten user inputs"):
        m(*args)
    with pytest.raises(AssertionError, match="Guard failed"):
        m(torch.randn(5, 3), **kwargs)


def test_dict_keys_in_another_order_are_read_by_key():
    class Pick(nn.Module):
        def forward(self, d):
            return d["a"] - d["b"]

    m = graphcap.export(Pick(), ({"a": torch.ones(2), "b": torch.zeros(2)},)).module()
    torch.testing.assert_close(m({"b": torch.zeros(2), "a": torch.ones(2)}), torch.ones(2))


def test_wider_integers_accepted_only_when_the_program_names_no_dtype():
    class ToList(nn.Module):
        def forward(self, x):
            return x.tolist()

    m = graphcap.export(ToList(), (torch.ones(3, dtype=torch.int32),)).module()
    assert m(torch.tensor([1, 2, 3])) == [1, 2, 3]

    class Cast(nn.Module):
        def forward(self, x):
            return x.to(torch.int32) + 1

    m = graphcap.export(Cast(), (torch.ones(3, dtype=torch.int32),)).module()
    with pytest.raises(graphcap.RuntimeInputError, match="dtype"):
        m(torch.ones(3, dtype=torch.int64))
    m = graphcap.export(ToList(), (torch.ones(3, dtype=torch.int64),)).module()
    with pytest.raises(graphcap.RuntimeInputError, match="dtype"):
        m(torch.ones(3, dtype=torch.int32))


def test_module_copies_run_from_threads_independently():
    """A thread that needs state of its own runs a copy (``copy.deepcopy``), as with torch's module()."""
    ep = _export()
    args, kwargs = _inputs()
    shared = ep.module()
    expected = copy.deepcopy(shared)(*args, **kwargs)
    results, errors = [], []

    def work():
        try:
            results.append(copy.deepcopy(shared)(*args, **kwargs))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4
    for r in results:
        torch.testing.assert_close(r, expected)
    assert torch.equal(ep.state_dict["steps"], torch.zeros(3))


def test_check_guards_false_checks_in_the_pre_hook_instead():
    m = _export().module(check_guards=False)
    assert not [n for n in m.graph.nodes if n.op == "call_module"]
    args, kwargs = _inputs()
    m(*args, **kwargs)
    with pytest.raises(AssertionError, match=r"Guard failed: x.size\(\)\[0\] == 2"):
        m(torch.randn(5, 3), **kwargs)


def test_validate_inputs_false_turns_off_the_hook_not_the_graphs_checks():
    """torch's switch on its module: off, the pre-hook checks nothing; the leaf checks a
    check_guards=True graph calls still run (a deepcopy keeps the switch)."""
    args, kwargs = _inputs()
    in_graph = _export().module()
    assert in_graph.validate_inputs is True
    in_graph.validate_inputs = False
    in_graph = copy.deepcopy(in_graph)
    assert in_graph.validate_inputs is False
    with pytest.raises(AssertionError, match="Guard failed"):
        in_graph(torch.randn(5, 3), **kwargs)
    in_hook = _export().module(check_guards=False)
    in_hook.validate_inputs = False
    in_hook(torch.randn(5, 3), **kwargs)  # no check left: the user asked for none; linear runs at 5
    in_hook.validate_inputs = True
    with pytest.raises(AssertionError, match="Guard failed"):
        in_hook(torch.randn(5, 3), **kwargs)


def test_graph_module_flat_inputs_feed_the_program_graph():
    model = Model()
    ep = _export(copy.deepcopy(model))
    args, kwargs = _inputs()
    flat = ep._graph_module_flat_inputs(args, kwargs)
    assert ep._num_lifted_params_buffers() == 4 and len(flat) == 6
    out = ep.graph_module(*flat)  # the user outputs; steps is updated in place by the graph
    torch.testing.assert_close(out[0], model(*args, **kwargs)["out"])
