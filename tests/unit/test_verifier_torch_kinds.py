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
    with pytest.raises(VerificationError, match="parameter 'bad_param' is not in the state dict"):
        ep.validate()
    ep.state_dict["bad_param"] = torch.nn.Parameter(torch.randn(4))
    ep.validate()


def test_torch_buffer_spec_naming_missing_state_is_refused():
    ep = _program()
    ep.graph_signature.input_specs[1] = InputSpec(InputKind.BUFFER, TensorArgument("b_b"), "nowhere", True)
    with pytest.raises(VerificationError, match="buffer 'nowhere' is not in the state dict"):
        ep.validate()


def test_torch_output_spec_is_checked_against_the_graph():
    ep = _program().run_decompositions()
    spec = ep.graph_signature.output_specs[0]
    assert spec.kind == OutputKind.BUFFER_MUTATION
    ep.graph_signature.output_specs[0] = OutputSpec(OutputKind.BUFFER_MUTATION, TensorArgument(spec.arg.name), "c")
    with pytest.raises(VerificationError, match="'c'"):
        ep.validate()


def _torch_spec_violation():
    import sys

    import torch.export.exported_program as torch_program
    return sys.modules[torch_program.Verifier.__module__].SpecViolationError


def test_validate_raises_torchs_spec_violation_class():
    """Code written against torch.export catches its verifier's exception from ep.validate()."""
    ep = _program()
    ep.graph_signature.input_specs[0] = InputSpec(InputKind.PARAMETER, TensorArgument("p_a"), "gone")
    with pytest.raises(_torch_spec_violation()) as info:
        ep.validate()
    assert isinstance(info.value, graphcap.GraphcapError)
    assert "'gone' is not in the state dict" in str(info.value)


def test_output_node_count_differing_from_specs_is_refused():
    """An output list edited to hold more values than the signature describes names both counts."""
    ep = _program()
    out = next(n for n in reversed(ep.graph.nodes) if n.op == "output")
    first = next(iter(ep.graph.nodes))
    out.args = (tuple(out.args[0]) + (first,),)
    n = len(ep.graph_signature.output_specs)
    with pytest.raises(_torch_spec_violation(), match=rf"Number of output nodes \({n + 1}\).*\({n}\)"):
        ep.validate()


def test_non_persistent_buffer_missing_from_constants_is_refused():
    class NP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("nb", torch.ones(4), persistent=False)

        def forward(self, x):
            return x * self.nb

    ep = graphcap.export(NP(), (torch.randn(4),))
    ep.constants.pop("nb")
    with pytest.raises(VerificationError, match="buffer 'nb' is not in the constants"):
        ep.validate()


def test_a_parameter_spec_whose_state_is_a_plain_tensor_is_refused():
    ep = _program()
    ep.state_dict["a"] = torch.randn(4)  # a weight, but no longer a Parameter
    with pytest.raises(VerificationError, match="'a' in the state dict is a Tensor, not an instance of "
                                                "torch.nn.Parameter"):
        ep.validate()
    ep.state_dict["a"] = torch.nn.Parameter(torch.randn(4), requires_grad=False)
    ep.validate()  # a frozen Parameter is still a Parameter
