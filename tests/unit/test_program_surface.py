"""What code written against torch.export's ExportedProgram reads from graphcap's: the signature's
views and classes, the program's members, and torch's own utilities run on graphcap's program."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.export.graph_signature as tsig
from torch import nn

import graphcap
from graphcap.signature import (
    ConstantArgument,
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    TensorArgument,
)


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("count", torch.zeros(3))
        self.register_buffer("scratch", torch.ones(3), persistent=False)

    def forward(self, x, *, scale):
        self.count.add_(1)
        return self.lin(x) * scale + self.scratch


def _export():
    return graphcap.export(Counter(), (torch.randn(2, 3),), {"scale": torch.ones(3)})


def test_kinds_compare_equal_to_torchs_and_convert():
    assert InputKind.PARAMETER == tsig.InputKind.PARAMETER
    assert tsig.InputKind.PARAMETER == InputKind.PARAMETER
    assert InputKind.PARAMETER != tsig.InputKind.BUFFER
    assert OutputKind.BUFFER_MUTATION == tsig.OutputKind.BUFFER_MUTATION
    assert {tsig.OutputKind.USER_OUTPUT: "u"}[OutputKind.USER_OUTPUT] == "u"
    assert InputKind(tsig.InputKind.BUFFER) is InputKind.BUFFER
    assert InputKind.PARAMETER != OutputKind.BUFFER_MUTATION


def test_arguments_are_torchs_argument_classes():
    arg = TensorArgument("x")
    assert isinstance(arg, tsig.TensorArgument)
    assert arg == tsig.TensorArgument("x") and tsig.TensorArgument("x") == arg
    assert arg != tsig.TensorArgument("y")
    assert isinstance(ConstantArgument("", 3), tsig.ConstantArgument)


def test_specs_built_with_torchs_classes_become_graphcaps():
    sig = ExportGraphSignature(
        [tsig.InputSpec(tsig.InputKind.BUFFER, tsig.TensorArgument("b"), "b", True),
         InputSpec(tsig.InputKind.USER_INPUT, tsig.TensorArgument("x"))],
        [tsig.OutputSpec(tsig.OutputKind.USER_OUTPUT, tsig.TensorArgument("y"), None)])
    assert sig.input_specs[0].kind is InputKind.BUFFER
    assert type(sig.input_specs[1].arg) is TensorArgument
    assert type(sig.output_specs[0]) is OutputSpec
    assert sig.inputs_to_buffers == {"b": "b"}


def test_every_view_of_torchs_signature_exists():
    sig = _export().graph_signature
    torch_views = [n for n, v in vars(tsig.ExportGraphSignature).items() if isinstance(v, property)]
    missing = [n for n in torch_views if not hasattr(sig, n)]
    assert not missing
    assert sig.inputs_to_lifted_custom_objs == {}
    assert sig.parameters_to_mutate == {}
    assert sig.backward_signature is None and sig.input_tokens == () and sig.output_tokens == ()
    assert sig.buffers_to_mutate == {}  # training IR: count.add_ is in the graph, as in torch's
    assert sig.non_persistent_buffers == ("scratch",)
    assert _export().run_decompositions().graph_signature.buffers_to_mutate == {"add": "count"}


def test_replace_all_uses_renames_in_the_signature():
    sig = _export().graph_signature
    sig.replace_all_uses("b_count", "renamed")
    assert sig.input_specs[2].arg.name == "renamed"
    sig = _export().run_decompositions().graph_signature
    sig.replace_all_uses("add", "renamed")
    assert sig.buffers_to_mutate == {"renamed": "count"}


def test_printed_signature_lists_inputs_then_outputs():
    text = str(_export().graph_signature)
    assert text.startswith("\n# inputs\np_lin_weight: PARAMETER target='lin.weight'\n")
    assert "b_scratch: BUFFER target='scratch' persistent=False" in text
    assert text.endswith("\n\n# outputs\nadd: USER_OUTPUT\n")  # training IR: no mutation outputs
    text = str(_export().run_decompositions().graph_signature)
    assert "\n\n# outputs\nadd: BUFFER_MUTATION target='count'\nadd_1: USER_OUTPUT\n" in text


def test_program_members_torch_code_reads():
    ep = _export()
    assert ep.verifier.dialect == ep.dialect == "TRAINING" and ep.verifiers == [ep.verifier]
    assert ep.run_decompositions().dialect == "ATEN"
    assert ep.tensor_constants is ep.constants
    assert ep.call_spec.in_spec is ep.call_spec[0]
    for name in ("graph_module", "graph", "graph_signature", "state_dict", "constants", "range_constraints",
                 "module_call_graph", "call_spec", "verifier", "verifiers", "dialect", "tensor_constants"):
        with pytest.raises(RuntimeError, match="Unable to set"):
            setattr(ep, name, None)


def test_example_inputs_are_settable_with_the_program_structure():
    ep = _export()
    new = ((torch.zeros(2, 3),), {"scale": torch.zeros(3)})
    ep.example_inputs = new
    assert ep.example_inputs is new
    ep.example_inputs = None
    with pytest.raises(ValueError, match="Trying to flatten user inputs"):
        ep.example_inputs = ((torch.zeros(2, 3), torch.zeros(3)), {})
    with pytest.raises(ValueError):
        ep.example_inputs = [torch.zeros(2, 3)]


def test_update_makes_a_new_verified_program():
    ep = _export()
    gm = copy.deepcopy(ep.graph_module)
    new = ep._update(gm, ep.graph_signature)
    assert new is not ep and new.graph_module is gm and new.state_dict is ep.state_dict
    x = torch.randn(2, 3)
    torch.testing.assert_close(new.module()(x, scale=torch.ones(3)), ep.module()(x, scale=torch.ones(3)))


def test_torch_unflatten_reads_graphcaps_program():
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return self.lin(x).relu()

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.head = nn.Linear(3, 1)

        def forward(self, x):
            return self.head(self.inner(x))

    model = Outer()
    ep = graphcap.export(model, (torch.randn(2, 3),))
    unflat = torch.export.unflatten(ep)
    x = torch.randn(2, 3)
    torch.testing.assert_close(unflat(x), model(x))
    assert isinstance(unflat.inner, nn.Module) and hasattr(unflat.inner, "lin")


def test_run_decompositions_gives_the_new_program_its_own_state_tables():
    """A consumer that edits the result's tables in place (ExecuTorch drops unused parameters and
    lifts constants into them) leaves the program it came from as it was; the tensors are shared."""
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(5, 4)
            self.head = torch.nn.Linear(4, 5, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, ids):
            return self.head(self.emb(ids))

    ep = graphcap.export(Tied(), (torch.tensor([[1, 2]]),))
    new = ep.run_decompositions()
    assert new.state_dict is not ep.state_dict and new.constants is not ep.constants
    assert all(new.state_dict[k] is v for k, v in ep.state_dict.items())
    del new.state_dict["emb.weight"]
    new.constants["extra"] = torch.ones(1)
    assert "emb.weight" in ep.state_dict and "extra" not in ep.constants
