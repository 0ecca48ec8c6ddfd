"""``graphcap.register_flattenable(cls, with_torch=True, serialized_type_name=...)``.

What a process that loads torch's files made from a graphcap program calls
(tests/e2e/test_consumers_other_process.py runs that across processes): the
class joins torch's pytree registry for good, with the node functions and
name a program's hand-over gives it, so torch's ``treespec_loads`` reads the
structure those files hold.
"""
from __future__ import annotations

import io
import json
import warnings

import pytest
import torch
import torch.utils._pytree as torch_pytree

import graphcap
from graphcap import auto_flatten
from graphcap.torch_private import pytree as private_pytree


def _registered(cls) -> bool:
    return cls in private_pytree.pytree_registry_snapshot()["nodes"]


@pytest.fixture
def fresh_class():
    """A new plain class per test, out of torch's registry afterwards."""
    class State:
        def __init__(self, key, value, dtype):
            self.key, self.value, self.dtype = key, value, dtype

    yield State
    if _registered(State):
        private_pytree.deregister_python_node(State)


class Returns(torch.nn.Module):
    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def forward(self, x):
        return self.cls(x + 1, x * 2, x.dtype)


def test_with_torch_registers_what_a_hand_over_registers(fresh_class):
    State = fresh_class
    graphcap.register_flattenable(State, with_torch=True)
    assert _registered(State) and auto_flatten.registered_as_own(State)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a known class: no auto-flattening warning
        ep = graphcap.export(Returns(State), (torch.ones(2),))
    assert _registered(State)  # the trace's end leaves the user's request in place
    spec = ep.call_spec.out_spec
    text = torch_pytree.treespec_dumps(spec)
    node = json.loads(text)[1]  # [protocol, root]
    assert node["type"] == f"{State.__module__}.{State.__qualname__}" and node["context"] is not None
    assert torch_pytree.treespec_loads(text) == spec  # the context (a dtype) reads back through graphcap's text
    rebuilt = torch_pytree.tree_unflatten([torch.zeros(2), torch.ones(2)], spec)
    assert isinstance(rebuilt, State) and rebuilt.dtype == torch.float32
    graphcap.register_flattenable(State, with_torch=True)  # again: nothing changes


def test_a_serialized_type_name_is_the_name_in_torchs_and_graphcaps_files(fresh_class):
    State = fresh_class
    graphcap.register_flattenable(State, serialized_type_name="my_project.State")
    assert not _registered(State)  # without with_torch, torch's registry is left as it is
    ep = graphcap.export(Returns(State), (torch.ones(2),))
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    assert b"my_project.State" in buf.getvalue()
    out = graphcap.load(io.BytesIO(buf.getvalue())).module()(torch.ones(2))
    assert isinstance(out, State) and torch.equal(out.value, torch.full((2,), 2.0))
    graphcap.register_flattenable(State, with_torch=True)
    assert json.loads(torch_pytree.treespec_dumps(ep.call_spec.out_spec))[1]["type"] == "my_project.State"


def test_renaming_a_class_torch_already_knows_is_refused(fresh_class):
    State = fresh_class
    graphcap.register_flattenable(State, with_torch=True)
    with pytest.raises(graphcap.ExportInputError, match="cannot be renamed") as info:
        graphcap.register_flattenable(State, serialized_type_name="elsewhere.State")
    assert "graphcap.register_flattenable(State, serialized_type_name='elsewhere.State') first" in info.value.fix
    graphcap.register_flattenable(State, serialized_type_name=auto_flatten.serialized_name(State))  # same name: fine
    with pytest.raises(graphcap.ExportInputError, match="non-empty string"):
        graphcap.register_flattenable(State, serialized_type_name="")


def test_a_class_registered_with_torch_by_other_code_is_left_alone(fresh_class):
    State = fresh_class
    graphcap.register_flattenable(State)
    torch_pytree.register_pytree_node(State, lambda s: ([s.key, s.value], s.dtype),
                                      lambda c, d: State(c[0], c[1], d), serialized_type_name="user.State")
    with pytest.raises(graphcap.ExportInputError, match="registered with torch's pytree by other code") as info:
        graphcap.register_flattenable(State, with_torch=True)
    assert "graphcap.register_flattenable(State, with_torch=True)" in info.value.fix
    assert torch_pytree.SUPPORTED_SERIALIZED_TYPES[State].serialized_type_name == "user.State"
