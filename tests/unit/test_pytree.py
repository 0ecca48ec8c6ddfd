"""Input/output flattening: dataclasses, unknown classes, paths and names."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.utils._pytree as pytree

import graphcap
from conftest import assert_same_outputs
from graphcap import pytree as gp


def test_input_path_strings():
    tree = ((torch.ones(1), [torch.ones(1)]), {"mask": {"a": torch.ones(1)}})
    paths = [gp.input_path_str(p) for p, _ in pytree.tree_flatten_with_path(tree)[0]]
    assert paths == ["*args[0]", "*args[1][0]", "**kwargs['mask']['a']"]


def test_placeholder_names():
    tree = ((torch.ones(1), [torch.ones(1)], torch.ones(1)), {"mask": {"a-b": torch.ones(1)}})
    paths = [p for p, _ in pytree.tree_flatten_with_path(tree)[0]]
    assert [gp.placeholder_name(p, ["x", "xs"]) for p in paths] == ["x", "xs_0", "args_2", "mask_a_b"]


def test_register_dataclass_rejects_non_dataclass():
    class NotADataclass:
        pass

    with pytest.raises(graphcap.ExportInputError, match="dataclass"):
        graphcap.register_dataclass(NotADataclass)


class Holder:
    """A plain class holding tensors: neither registered nor a dataclass."""

    def __init__(self, a, b, tag):
        self.a, self.b, self.tag = a, b, tag


def test_unknown_output_class_is_flattened_with_a_warning():
    def f(x):
        return Holder(x + 1, [x * 2], tag="t")

    with pytest.warns(UserWarning, match=r"test_pytree\.Holder.*register"):
        ep = graphcap.export(f, (torch.randn(3),))
    x = torch.randn(3)
    got = ep.module()(x)
    assert isinstance(got, Holder) and got.tag == "t"
    torch.testing.assert_close(got.a, x + 1)
    torch.testing.assert_close(got.b[0], x * 2)


class InputHolder:
    def __init__(self, t, k):
        self.t, self.k = t, k


def test_unknown_input_class_is_flattened():
    def f(h):
        return h.t * h.k

    h = InputHolder(torch.randn(2), 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = graphcap.export(f, (h,))
    assert ep.graph_signature.user_inputs == ("h_t",)
    h2 = InputHolder(torch.randn(2), 3)
    assert_same_outputs(f(h2), ep.module()(h2))
    with pytest.raises(graphcap.RuntimeInputError, match="structure"):
        ep.module()(InputHolder(torch.randn(2), 4))


def test_holds_tensor_handles_cycles():
    a = Holder(None, None, None)
    a.a = a
    assert not gp.holds_tensor(a)
    a.b = [torch.ones(1)]
    assert gp.holds_tensor(a)


def test_bind_inputs_errors_explain_the_signature():
    def f(x, *, y):
        return x + y

    with pytest.raises(graphcap.ExportInputError, match="signature"):
        graphcap.export(f, (torch.ones(1), torch.ones(1)))
    with pytest.raises(graphcap.ExportInputError, match="tuple"):
        graphcap.export(f, torch.ones(1))
    with pytest.raises(graphcap.ExportInputError, match="dict"):
        graphcap.export(f, (torch.ones(1),), [1])
