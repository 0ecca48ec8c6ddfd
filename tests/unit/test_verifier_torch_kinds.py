"""The verifier reads a signature edited with torch's own spec classes (torch.export's
InputSpec / InputKind, as torch-style code writes them into ep.graph_signature) the same as
graphcap's: a parameter or buffer spec naming missing state is a violation either way."""
import pytest
import torch
from torch.export.graph_signature import InputKind, InputSpec, OutputKind, OutputSpec, TensorArgument

import graphcap
from graphcap.errors import VerificationError


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(4))
        self.register_buffer("b", torch.zeros(4))

    def forward(self, x):
        self.b.add_(1)
        return x + self.a + self.b


def _program():
    return graphcap.export(M(), (torch.randn(4),))


def test_torch_parameter_spec_naming_missing_state_is_refused():
    ep = _program()
    ep.graph_signature.input_specs[0] = InputSpec(InputKind.PARAMETER, TensorArgument("p_a"), "bad_param")
    with pytest.raises(VerificationError, match="parameter 'bad_param' missing from state_dict"):
        ep.validate()
    ep.state_dict["bad_param"] = torch.nn.Parameter(torch.randn(4))
    ep.validate()


def test_torch_buffer_spec_naming_missing_state_is_refused():
    ep = _program()
    ep.graph_signature.input_specs[1] = InputSpec(InputKind.BUFFER, TensorArgument("b_b"), "nowhere", True)
    with pytest.raises(VerificationError, match="buffer 'nowhere' missing from state_dict"):
        ep.validate()


def test_torch_output_spec_is_checked_against_the_graph():
    ep = _program().run_decompositions()
    spec = ep.graph_signature.output_specs[0]
    assert spec.kind == OutputKind.BUFFER_MUTATION
    ep.graph_signature.output_specs[0] = OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument(spec.arg.name), "c")
    with pytest.raises(VerificationError, match="'c'"):
        ep.validate()
