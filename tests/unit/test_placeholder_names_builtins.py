"""An input named like a Python builtin keeps its name, as torch.export keeps it.

``def forward(self, input)`` (nn.Sequential's own forward) gives the placeholder
``input``; fx's code generator binds it under a fresh local (``input_1 = input``)
so the printed forward runs. Names the generated code reads itself (``torch``,
``fx_pytree``...) are suffixed instead, so ``graph_module`` and ``module()``
still run (torch.export keeps ``torch`` and its ``module()`` fails).
"""
import copy

import pytest
import torch
from torch import nn

import graphcap


def _module_with_forward(params: str, body: str) -> nn.Module:
    scope = {"torch": torch}
    exec(f"def forward(self, {params}):\n    return {body}\n", scope)
    cls = type("M", (nn.Module,), {"forward": scope["forward"]})
    return cls()


def _user_input_names(ep) -> list[str]:
    return [s.arg.name for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]


@pytest.mark.parametrize("params, body", [
    ("input", "input + 1"),
    ("sum", "sum.sum(0) * sum"),
    ("min, max", "torch.minimum(min, max)"),
    ("list, id", "list.relu() + id"),
    ("len, range", "len * range"),
    ("float, int", "float - int"),
])
def test_builtin_named_inputs_keep_their_names_and_the_program_runs(params, body):
    m = _module_with_forward(params, body)
    names = [p.strip() for p in params.split(",")]
    args = tuple(torch.randn(3, 3) for _ in names)
    ep = graphcap.export(m, args)
    assert _user_input_names(ep) == names
    assert [n.name for n in ep.graph.nodes if n.op == "placeholder"] == names
    assert ep.graph_module.code.strip().startswith(f"def forward(self, {', '.join(names)}):")
    torch.testing.assert_close(ep.module()(*args), m(*args))
    torch.testing.assert_close(ep.graph_module(*args)[0], m(*args))
    assert f"{names[0]}: USER_INPUT" in str(ep)


def test_names_the_generated_code_reads_are_suffixed_and_everything_runs():
    m = _module_with_forward("torch, fx_pytree, pytree, inf", "torch + fx_pytree * pytree - inf")
    args = tuple(torch.randn(2) for _ in range(4))
    ep = graphcap.export(m, args)
    assert _user_input_names(ep) == ["torch_1", "fx_pytree_1", "pytree_1", "inf_1"]
    torch.testing.assert_close(ep.module()(*args), m(*args))
    torch.testing.assert_close(ep.graph_module(*args)[0], m(*args))


def test_sequential_input_keeps_its_name_in_the_call_signature():
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    x = torch.randn(4, 2)
    ep = graphcap.export(model, (x,), preserve_module_call_signature=("0",))
    sig0 = next(e.signature for e in ep.module_call_graph if e.fqn == "0")
    assert [a.name for a in sig0.inputs] == ["input"]
    assert _user_input_names(ep) == ["input"]
    torch.testing.assert_close(ep.module()(x), model(x))


def test_the_name_survives_decomposition_save_load_and_copies(tmp_path):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, input, sum):
            return torch.nn.functional.gelu(self.lin(input)) + sum

    m = M()
    args = (torch.randn(2, 3), torch.randn(2, 3))
    ep = graphcap.export(m, args)
    expected = m(*args)
    dec = ep.run_decompositions()
    assert _user_input_names(dec) == ["input", "sum"]
    torch.testing.assert_close(dec.module()(*args), expected)
    path = tmp_path / "m.pt2"
    graphcap.save(ep, path)
    loaded = graphcap.load(path)
    assert _user_input_names(loaded) == ["input", "sum"]
    torch.testing.assert_close(loaded.module()(*args), expected)
    assert _user_input_names(copy.deepcopy(ep)) == ["input", "sum"]


def test_cond_branch_inputs_take_a_builtin_named_operand():
    class M(nn.Module):
        def forward(self, input):
            return torch.cond(input.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (input,))

    x = torch.randn(3)
    ep = graphcap.export(M(), (x,))
    branch = ep.graph_module.true_graph_0
    assert [n.name for n in branch.graph.nodes if n.op == "placeholder"] == ["input"]
    torch.testing.assert_close(ep.module()(x), M()(x))
    torch.testing.assert_close(ep.module()(-x.abs()), M()(-x.abs()))


def test_an_input_named_like_a_builtin_the_graph_calls_is_suffixed_and_module_runs():
    import builtins

    class M(nn.Module):
        def forward(self, x, round):
            k = builtins.round(x.shape[0] / 3)  # recorded as a call of the builtin round
            return x * k + round

    args = (torch.randn(5), torch.randn(5))
    dims = ({0: graphcap.Dim("n")}, {0: graphcap.Dim("n")})
    ep = graphcap.export(M(), args, dynamic_shapes=dims)
    assert any(n.target is builtins.round for n in ep.graph.nodes)
    assert _user_input_names(ep) == ["x", "round_1"]
    for n in (5, 7):
        a = (torch.randn(n), torch.randn(n))
        torch.testing.assert_close(ep.module()(*a), M()(*a))
        torch.testing.assert_close(ep.graph_module(*a)[0], M()(*a))
