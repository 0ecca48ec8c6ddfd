"""run_decompositions carries the module call graph through the retrace: every signature names
the node that now holds its value (``ones`` is ``full`` after decomposition), so a preserved
submodule of a decomposed program stays swappable, as it does in torch."""
from __future__ import annotations

import copy
import io
import warnings

import pytest
import torch

import graphcap
from graphcap import ir_checks
from graphcap.hierarchy import SubmoduleSignatureError

aten = torch.ops.aten


from preserved_block_models import Net  # noqa: E402


class OneOutput(torch.nn.Module):
    def forward(self, x, *, mask=None):
        return x


def _linear_as_mm(x, w, b=None):
    out = aten.mm.default(x, aten.t.default(w))
    return out if b is None else aten.add.Tensor(out, b)


def _custom_table():
    table = graphcap.default_decompositions()
    table[aten.linear.default] = _linear_as_mm
    return table


def _decomposed(table):
    model, x = Net(), torch.randn(2, 4)
    ep = graphcap.export(model, (x,), preserve_module_call_signature=("block", "other"))
    dep = ep.run_decompositions() if table == "default" else ep.run_decompositions(_custom_table())
    return model, x, dep


def _names(ep):
    return {n.name for n in ep.graph.nodes}


def _check_swappable(model, x, dep):
    names = _names(dep)
    for entry in dep.module_call_graph:
        if entry.signature is not None:
            for arg in [*entry.signature.inputs, *entry.signature.outputs]:
                assert getattr(arg, "value", None) is not None or arg.name in names, (entry.fqn, arg)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "rebuilt without its recorded signature"
        unf = graphcap.unflatten(dep)
    expected = copy.deepcopy(model)(x)
    torch.testing.assert_close(unf(x), expected)
    unf.block = copy.deepcopy(model.block)
    unf.set_submodule("other", copy.deepcopy(model.other))
    torch.testing.assert_close(unf(x), expected)
    assert unf.block.steps.item() == 1  # the swapped-in module ran
    unf.block = OneOutput()
    with pytest.raises(SubmoduleSignatureError):
        unf(x)


@pytest.mark.parametrize("table", ["default", "custom"])
def test_preserved_submodule_stays_swappable_after_decomposition(table):
    model, x, dep = _decomposed(table)
    assert "ones" not in _names(dep)
    block = next(e for e in dep.module_call_graph if e.fqn == "block")
    assert block.signature.inputs[1].name.startswith("full")
    _check_swappable(model, x, dep)


@pytest.mark.parametrize("table", ["default", "custom"])
def test_preserved_submodule_stays_swappable_after_save_and_load(table):
    model, x, dep = _decomposed(table)
    buf = io.BytesIO()
    graphcap.save(dep, buf)
    buf.seek(0)
    _check_swappable(model, x, graphcap.load(buf))


def test_torch_unflatten_of_the_decomposed_program():
    model, x, dep = _decomposed("default")
    unf = torch.export.unflatten(graphcap.to_torch(dep))
    torch.testing.assert_close(unf(x), copy.deepcopy(model)(x))
    unf.block = copy.deepcopy(model.block)
    torch.testing.assert_close(unf(x), copy.deepcopy(model)(x))


def test_call_graph_naming_a_missing_node_is_reported():
    _, _, dep = _decomposed("default")
    assert ir_checks.violations(dep) == []
    block = next(e for e in dep.module_call_graph if e.fqn == "block")
    block.signature.inputs[1].name = "ones"
    with pytest.raises(graphcap.VerificationError, match=r"\[call-graph-names-nodes\] node ones"):
        dep.validate()
