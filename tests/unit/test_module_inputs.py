"""An nn.Module passed as an input to forward: its tensors are user inputs of the program."""
import io

import pytest
import torch
import torch.utils._pytree as pytree

import graphcap
from graphcap.errors import GraphcapError, InputGuardError, InputStructureError


class Scaler(torch.nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.linear = torch.nn.Linear(n, n)

    def forward(self, x, y):
        return self.linear(x) * y


class WithBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))
        self.register_buffer("offset", torch.randn(3))

    def forward(self, x):
        return x * self.w + self.offset


class Nested(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = WithBuffer()
        self.scale = torch.nn.Linear(3, 3)
        self.shift = torch.randn(3)  # a plain tensor attribute: an input too, not baked in

    def forward(self, x):
        return self.scale(self.inner(x)) + self.shift


class Caller(torch.nn.Module):
    def forward(self, x, m):
        return m(x) + x


class CallerTwo(torch.nn.Module):
    def forward(self, x, y, m):
        return m(x, y) + x + y


def _export(model, args):
    return graphcap.export(model, args, strict=False)


def test_parameters_become_user_inputs_and_other_instance_gives_eager_result():
    ep = _export(CallerTwo(), (torch.randn(3), torch.randn(3), Scaler()))
    kinds = [(s.kind.name, s.arg.name) for s in ep.graph_signature.input_specs]
    assert kinds == [("USER_INPUT", "x"), ("USER_INPUT", "y"), ("USER_INPUT", "m_linear_weight"),
                     ("USER_INPUT", "m_linear_bias")]
    assert ep.state_dict == {} and not ep.constants
    other = Scaler()
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(ep.module()(x, y, other), CallerTwo()(x, y, other))


def test_same_instance_and_buffers():
    m = WithBuffer()
    ep = _export(Caller(), (torch.randn(3), m))
    names = [s.arg.name for s in ep.graph_signature.input_specs]
    assert names == ["x", "m_w", "m_offset"]
    x = torch.randn(3)
    torch.testing.assert_close(ep.module()(x, m), Caller()(x, m))
    other = WithBuffer()
    torch.testing.assert_close(ep.module()(x, other), Caller()(x, other))


def test_nested_submodules_and_tensor_attributes():
    ep = _export(Caller(), (torch.randn(3), Nested()))
    names = [s.arg.name for s in ep.graph_signature.input_specs]
    assert names == ["x", "m_inner_w", "m_scale_weight", "m_scale_bias", "m_inner_offset", "m_shift"]
    other = Nested()
    x = torch.randn(3)
    torch.testing.assert_close(ep.module()(x, other), Caller()(x, other))


def test_exported_instance_is_left_untouched_and_no_registration_lasts():
    m = Scaler()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    _export(CallerTwo(), (torch.randn(3), torch.randn(3), m))
    for k, v in m.state_dict().items():
        assert torch.equal(v, before[k]) and not isinstance(v, torch._subclasses.FakeTensor)
    assert Scaler not in pytree.SUPPORTED_NODES
    assert pytree.tree_leaves(m) == [m]  # still a leaf for torch's pytree


def test_wrongly_shaped_instance_is_refused_before_computing():
    ep = _export(CallerTwo(), (torch.randn(3), torch.randn(3), Scaler()))
    with pytest.raises(InputStructureError, match="in_features"):
        ep.module()(torch.randn(4), torch.randn(4), Scaler(4))


def test_same_settings_other_tensor_shape_is_refused_by_the_leaf_checks():
    ep = _export(Caller(), (torch.randn(3), WithBuffer()))
    bad = WithBuffer()
    bad.offset = torch.randn(5)
    with pytest.raises(InputGuardError, match="offset"):
        ep.module()(torch.randn(3), bad)


def test_module_of_another_class_is_refused():
    class Other(WithBuffer):
        pass

    ep = _export(Caller(), (torch.randn(3), WithBuffer()))
    with pytest.raises(InputStructureError, match="Other"):
        ep.module()(torch.randn(3), Other())


def test_training_flag_is_part_of_the_structure():
    m = WithBuffer()
    ep = _export(Caller(), (torch.randn(3), m))
    with pytest.raises(InputStructureError, match="training"):
        ep.module()(torch.randn(3), WithBuffer().eval())


def test_in_place_update_of_input_buffer_reaches_the_given_module():
    class Bump(torch.nn.Module):
        def forward(self, x, m):
            m.offset.add_(1)
            return x + m.offset

    m = WithBuffer()
    ep = _export(Bump(), (torch.randn(3), m))
    other = WithBuffer()
    start = other.offset.clone()
    x = torch.randn(3)
    out = ep.module()(x, other)
    torch.testing.assert_close(other.offset, start + 1)
    torch.testing.assert_close(out, x + start + 1)


def test_save_and_load_keep_module_inputs_runnable():
    ep = _export(Caller(), (torch.randn(3), WithBuffer()))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    loaded = graphcap.load(buf)
    other = WithBuffer()
    x = torch.randn(3)
    torch.testing.assert_close(loaded.module()(x, other), Caller()(x, other))
    with pytest.raises(GraphcapError):
        loaded.module()(x, Scaler())


class Activated(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.conv = torch.nn.Conv1d(2, 2, kernel_size=3, padding=1)
        self.act = act

    def forward(self, x):
        return self.act(self.conv(x))


def test_python_settings_of_any_kind_are_checked():
    ep = _export(Caller(), (torch.randn(1, 2, 5), Activated(torch.relu)))
    x = torch.randn(1, 2, 5)
    other = Activated(torch.relu)
    torch.testing.assert_close(ep.module()(x, other), Caller()(x, other))
    with pytest.raises(InputStructureError, match="act"):  # the traced code called relu
        ep.module()(x, Activated(torch.tanh))
    wider = Activated(torch.relu)
    wider.conv.padding = (2,)
    with pytest.raises(InputStructureError, match="conv.padding"):
        ep.module()(x, wider)


def test_loaded_program_compares_the_settings_a_file_holds():
    ep = _export(Caller(), (torch.randn(1, 2, 5), Activated(torch.relu)))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    buf.seek(0)
    loaded = graphcap.load(buf)
    x = torch.randn(1, 2, 5)
    other = Activated(torch.relu)
    torch.testing.assert_close(loaded.module()(x, other), Caller()(x, other))
    bad = Activated(torch.relu)
    bad.conv.padding = (2,)
    with pytest.raises(InputStructureError, match="conv.padding"):
        loaded.module()(x, bad)
