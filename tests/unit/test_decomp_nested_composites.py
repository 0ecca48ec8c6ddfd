"""run_decompositions keeps a composite the table keeps wherever the program calls it.

A composite operator (``aten.linear``, ``aten.conv2d``) that the table does not decompose
stays whole in the inference IR also when the program calls it only inside a grad-mode
region (``with torch.no_grad():`` / ``torch.enable_grad()``, recorded as
``wrap_with_set_grad_enabled``) or inside a ``torch.cond`` branch; the region itself is
inlined, as torch.export does.
"""
from __future__ import annotations

import torch

import graphcap

aten = torch.ops.aten


def _targets(gm: torch.fx.GraphModule) -> set:
    return {n.target for sub in gm.modules() if isinstance(sub, torch.fx.GraphModule)
            for n in sub.graph.nodes if n.op == "call_function"}


class OnlyUnderNoGrad(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        with torch.no_grad():
            y = self.lin(x)
        return y * 2


class ConvUnderEnableGrad(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3)

    def forward(self, x):
        with torch.enable_grad():
            y = self.conv(x)
        with torch.no_grad():
            z = y.relu()
        return z


class LinearInBranch(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.cond(x.sum() > 0, self.lin, torch.cos, (x,))


def test_composite_called_only_in_a_no_grad_region_stays_whole_with_an_empty_table():
    x = torch.randn(5, 4)
    ep = graphcap.export(OnlyUnderNoGrad(), (x,))
    assert torch.ops.higher_order.wrap_with_set_grad_enabled in _targets(ep.graph_module)
    dep = ep.run_decompositions({})
    ops = _targets(dep.graph_module)
    assert aten.linear.default in ops
    assert aten.addmm.default not in ops
    # the region is inlined, as in torch.export's inference IR
    assert torch.ops.higher_order.wrap_with_set_grad_enabled not in ops
    m = OnlyUnderNoGrad()
    m.load_state_dict(ep.state_dict)
    torch.testing.assert_close(dep.module()(x), m(x))


def test_composite_in_a_region_decomposes_with_the_default_table():
    x = torch.randn(5, 4)
    dep = graphcap.export(OnlyUnderNoGrad(), (x,)).run_decompositions()
    ops = _targets(dep.graph_module)
    assert aten.linear.default not in ops
    assert aten.addmm.default in ops


def test_table_that_keeps_one_composite_keeps_it_inside_enable_grad_region():
    x = torch.randn(1, 2, 6, 6)
    mod = ConvUnderEnableGrad()
    with torch.no_grad():  # exported under no_grad: the enable_grad block is a region
        ep = graphcap.export(mod, (x,))
    assert torch.ops.higher_order.wrap_with_set_grad_enabled in _targets(ep.graph_module)
    table = graphcap.default_decompositions()
    del table[aten.conv2d.default]
    ops = _targets(ep.run_decompositions(table).graph_module)
    assert aten.conv2d.default in ops
    assert aten.convolution.default not in ops
    torch.testing.assert_close(ep.run_decompositions(table).module()(x), mod(x))


def test_composite_called_only_in_a_cond_branch_stays_whole_with_an_empty_table():
    x = torch.randn(3, 4)
    mod = LinearInBranch()
    dep = graphcap.export(mod, (x,)).run_decompositions({})
    branch_ops = _targets(dep.graph_module.true_graph_0)
    assert aten.linear.default in branch_ops
    for sample in (x.abs(), -x.abs()):
        torch.testing.assert_close(dep.module()(sample), mod(sample))


def test_matches_torch_export_ops_for_a_no_grad_region():
    x = torch.randn(5, 4)
    ours = _targets(graphcap.export(OnlyUnderNoGrad(), (x,)).run_decompositions({}).graph_module)
    theirs = _targets(torch.export.export(OnlyUnderNoGrad(), (x,)).run_decompositions({}).graph_module)
    assert ours == theirs
