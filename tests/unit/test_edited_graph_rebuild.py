"""A program rebuilt from a graph the user edited (ep._update, from_torch) is normalised
before it is verified: new nodes get val / stack_trace / nn_module_stack / source_fn_stack
from the nodes they compute from, duplicate getitem nodes become one (the signature follows);
the verifier itself stays strict (validate() on the edited program still names the nodes)."""
import operator

import pytest
import torch

import graphcap
from graphcap.errors import VerificationError
from graphcap.signature import OutputKind, OutputSpec, TensorArgument


class Split(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        a, b = self.lin(x).split(2)
        return a.relu() + b


def _edit(ep):
    """Read the first half through two new getitem nodes, negate it, and also return it."""
    gm = ep.graph_module
    split = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.split.Tensor)
    relu = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.relu.default)
    with gm.graph.inserting_after(split):
        first = gm.graph.call_function(operator.getitem, (split, 0))
    with gm.graph.inserting_after(first):
        again = gm.graph.call_function(operator.getitem, (split, 0))
    with gm.graph.inserting_after(again):
        neg = gm.graph.call_function(torch.ops.aten.neg.default, (first,))
    relu.args = (neg,)
    out = next(n for n in gm.graph.nodes if n.op == "output")
    out.args = ((*out.args[0], again),)
    gm.recompile()
    sig = ep.graph_signature
    new_sig = type(sig)(sig.input_specs, [*sig.output_specs, OutputSpec(OutputKind.USER_OUTPUT,
                                                                         TensorArgument(again.name))])
    return gm, new_sig, split, neg, first


def test_update_normalises_a_user_edited_graph():
    x = torch.randn(4, 3)
    model = Split()
    ep = graphcap.export(model, (x,))
    gm, sig, split, neg, first = _edit(ep)
    with pytest.raises(VerificationError, match="getitem"):
        ep.validate()  # graphcap's verifier is not loosened
    new = ep._update(gm, sig)
    getitems = [n for n in new.graph.nodes if n.target is operator.getitem and n.args[1] == 0]
    assert len(getitems) == 1  # the reads of split[0] (two new, the traced one) are one node now
    (kept,) = getitems
    assert kept is first  # the first of the duplicates stays
    assert new.graph_signature.output_specs[-1].arg.name == kept.name
    for node in (kept, neg):
        assert node.meta["stack_trace"] == split.meta["stack_trace"]
        assert node.meta["nn_module_stack"] == split.meta["nn_module_stack"]
        assert isinstance(node.meta["val"], torch.Tensor) and node.meta["val"].shape == (2, 3)
    assert new.graph_module.code.count("split[") == 2  # the generated code follows the merge
    flat = new.graph_module(*[p for _, p in new.named_parameters()], x)
    a, b = model.lin(x).split(2)
    torch.testing.assert_close(flat[0], (-a).relu() + b)
    torch.testing.assert_close(flat[1], a)


def test_new_node_without_a_source_runs_in_the_root_module():
    ep = graphcap.export(Split(), (torch.randn(4, 3),))
    gm = ep.graph_module
    x = [n for n in gm.graph.nodes if n.op == "placeholder"][-1]
    add = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.add.Tensor)
    with gm.graph.inserting_before(add):
        doubled = gm.graph.call_function(torch.ops.aten.mul.Tensor, (x, 2))
        half = gm.graph.call_function(torch.ops.aten.slice.Tensor, (doubled, 0, 0, 2))
    add.args = (add.args[0], half)
    gm.recompile()
    ep._update(gm, ep.graph_signature)
    assert doubled.meta["stack_trace"] is None  # it reads only an input: no user line to claim
    assert [fqn for fqn, _ in doubled.meta["nn_module_stack"].values()] == [""]
    assert half.meta["val"].shape == (2, 3)


def test_from_torch_normalises_a_rebuilt_torch_program():
    x = torch.randn(4, 3)
    tep = torch.export.export(Split(), (x,))
    gm = tep.graph_module
    split = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.split.Tensor)
    relu = next(n for n in gm.graph.nodes if n.target is torch.ops.aten.relu.default)
    with gm.graph.inserting_after(split):
        first = gm.graph.call_function(operator.getitem, (split, 0))
    relu.args = (first,)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    ep = graphcap.from_torch(tep)
    node = next(n for n in ep.graph.nodes if n.target is operator.getitem and n.args[1] == 0)
    assert node.meta["nn_module_stack"] == split.meta["nn_module_stack"]
    torch.testing.assert_close(ep.module()(x), tep.module()(x))
