"""``.item()`` (and other value reads) inside a torch.cond branch on a tensor the branch closes
over instead of receiving as an operand: the read is recorded in the branch, the tensor becomes
an operand, and the program follows the tensor's value at run time (nothing baked in)."""
from __future__ import annotations

import pytest
import torch

import graphcap


class ItemOfInput(torch.nn.Module):
    def forward(self, x, y):
        def t(x):
            return x + y.item()

        def f(x):
            return x - 1

        return torch.cond(x.sum() > 0, t, f, (x,))


class ItemOfBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.tensor(3))

    def forward(self, x):
        def t(x):
            return x * self.k.item()

        def f(x):
            return x - self.k.item()

        return torch.cond(x.sum() > 0, t, f, (x,))


class ItemOfComputed(torch.nn.Module):
    def forward(self, x, y):
        z = y * 2

        def t(x):
            return x + z.item()

        def f(x):
            return x - z.sum().item()

        return torch.cond(x.sum() > 0, t, f, (x,))


class SizeFromItem(torch.nn.Module):
    def forward(self, x, n):
        def t(x):
            k = n.item()
            torch._check(k >= 0)
            torch._check(k <= x.shape[0])
            return x + x[:k].sum()

        def f(x):
            return x * 2

        return torch.cond(x.sum() > 0, t, f, (x,))


class TolistOfInput(torch.nn.Module):
    def forward(self, x, y):
        def t(x):
            a, b = y.tolist()
            return x * a + b

        def f(x):
            return x.clone()

        return torch.cond(x.sum() > 0, t, f, (x,))


CASES = [
    (ItemOfInput, lambda: (torch.ones(3), torch.tensor(2.0)), lambda: [(torch.ones(3), torch.tensor(7.0)),
                                                                      (-torch.ones(3), torch.tensor(7.0))]),
    (ItemOfBuffer, lambda: (torch.ones(3),), lambda: [(torch.ones(3),), (-torch.ones(3),)]),
    (ItemOfComputed, lambda: (torch.ones(3), torch.tensor(2.0)), lambda: [(torch.ones(3), torch.tensor(-4.0)),
                                                                         (-torch.ones(3), torch.tensor(5.0))]),
    (SizeFromItem, lambda: (torch.ones(4), torch.tensor(2)), lambda: [(torch.ones(4), torch.tensor(3)),
                                                                     (-torch.ones(4), torch.tensor(1))]),
    (TolistOfInput, lambda: (torch.ones(3), torch.tensor([2, 1])),
     lambda: [(torch.ones(3), torch.tensor([9, -3]))]),
]


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("cls, example, others", CASES, ids=[c[0].__name__ for c in CASES])
def test_value_read_of_a_closed_over_tensor_in_a_branch(cls, example, others, strict):
    m = cls()
    ep = graphcap.export(m, example(), strict=strict)
    for args in others():
        torch.testing.assert_close(ep.module()(*args), m(*args))


def test_closed_over_tensor_becomes_an_operand_of_the_cond():
    ep = graphcap.export(ItemOfInput(), (torch.ones(3), torch.tensor(2.0)))
    (cond,) = [n for n in ep.graph.nodes if n.op == "call_function" and "cond" in str(n.target)]
    operand_names = {a.name for a in cond.args[3]}
    assert "y" in operand_names
    true_graph = getattr(ep.graph_module, cond.args[1].target).graph
    assert any(str(n.target) in ("aten.item.default", "aten._local_scalar_dense.default") for n in true_graph.nodes)
    decomposed = ep.run_decompositions()
    torch.testing.assert_close(decomposed.module()(torch.ones(3), torch.tensor(5.0)), torch.ones(3) + 5)
