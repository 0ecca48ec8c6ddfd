"""TorchScript modules in the exported model's tree.

A ScriptModule's parameter, buffer and submodule registries are TorchScript
wrappers, not dicts (no ``get``, no iteration): graphcap reads every registry
through ``torch_private.modules.registry_view``. torch.export refuses a
ScriptModule at the root and traces a ScriptModule subclass's Python
``forward`` below the root; graphcap does the same, and its program has the
signature torch.export's has and eager's results.
"""
from __future__ import annotations

import pytest
import torch

import graphcap
from conftest import quiet_warnings
from graphcap.errors import ExportInputError, TraceError
from graphcap.torch_private.modules import buffers_of, children_of, parameters_of, registry_view


class Scaled(torch.jit.ScriptModule):
    """A ScriptModule subclass with a parameter and a buffer, a Python forward and a script method."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 4))
        self.shift = torch.nn.Parameter(torch.randn(4))

    @torch.jit.script_method
    def _act(self, x: torch.Tensor):
        return x.relu()

    def forward(self, x):
        return self._act(x * self.scale + self.shift)


class CountsInPlace(Scaled):
    """Updates its buffer in place every call."""

    def forward(self, x):
        self.scale.add_(1)
        return self._act(x * self.scale + self.shift)


class Reassigns(Scaled):
    """Gives its buffer a new tensor every call."""

    def forward(self, x):
        self.scale = self.scale * 2
        return self._act(x * self.scale + self.shift)


class Holder(torch.nn.Module):
    """A plain module holding ``inner`` beside a parameter and a buffer of its own."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner
        self.weight = torch.nn.Parameter(torch.randn(4))
        self.register_buffer("offset", torch.ones(4))

    def forward(self, x):
        return self.inner(x) * self.weight + self.offset


class Nested(torch.nn.Module):
    """A plain module whose plain submodule holds the scripted one."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.block = Holder(inner)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.head(self.block(x))


def _signature(ep) -> list:
    sig = ep.graph_signature
    return ([(s.kind.name, s.target, getattr(s, "persistent", None)) for s in sig.input_specs],
            [(s.kind.name, s.target) for s in sig.output_specs])


def _built(build):
    """A fresh instance, the same weights each time (a ScriptModule does not survive deepcopy)."""
    torch.manual_seed(0)
    return build()


def _exported_by_both(build, args, **kwargs):
    with quiet_warnings():
        ours = graphcap.export(_built(build), args, **kwargs)
        theirs = torch.export.export(_built(build), args, **kwargs)
    return ours, theirs


@pytest.mark.parametrize("build", [lambda: Holder(Scaled()), lambda: Nested(Scaled())], ids=["holder", "nested"])
def test_a_scripted_submodules_state_is_lifted_as_torch_export_lifts_it(build):
    model = _built(build)
    x = torch.randn(3, 4)
    spec = ({0: torch.export.Dim("batch", min=1, max=16)},)
    ours, theirs = _exported_by_both(build, (x,), dynamic_shapes=spec)
    assert _signature(ours) == _signature(theirs)
    assert any(target.endswith("inner.scale") for _, target, _ in _signature(ours)[0])
    for batch in (3, 7):
        y = torch.randn(batch, 4)
        torch.testing.assert_close(ours.module()(y), model(y))


@pytest.mark.parametrize("inner", [CountsInPlace, Reassigns], ids=["add_", "reassigned"])
def test_a_scripted_submodule_updating_its_buffer_runs_as_eager_call_after_call(inner):
    x = torch.randn(2, 4)
    with quiet_warnings():
        exported = _built(lambda: Nested(inner()))
        ours = graphcap.export(exported, (x,))
        theirs = torch.export.export(_built(lambda: Nested(inner())), (x,))
    assert _signature(ours) == _signature(theirs)
    torch.testing.assert_close(exported.block.inner.scale, torch.linspace(0.5, 2.0, 4))  # export left it alone
    eager, program = _built(lambda: Nested(inner())), ours.module()
    for _ in range(3):
        torch.testing.assert_close(program(x), eager(x))
    torch.testing.assert_close(program.block.inner.scale, eager.block.inner.scale)


def test_a_scripted_root_is_refused_as_torch_export_refuses_it():
    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.register_buffer("scale", torch.full((4,), 2.0))

        def forward(self, x):
            return self.lin(x) * self.scale

    with quiet_warnings():
        scripted = torch.jit.script(Plain())
    for root in (scripted, Scaled()):
        with pytest.raises(ValueError, match="ScriptModule"):
            torch.export.export(root, (torch.randn(2, 4),))
        with pytest.raises(ExportInputError, match="TS2EPConverter"):
            graphcap.export(root, (torch.randn(2, 4),))


def test_a_compiled_submodule_fails_with_the_error_torch_export_gives():
    """``torch.jit.script(module)`` below the root: calling its compiled forward cannot be traced,
    in torch.export as in graphcap. graphcap's error is that TypeError (restoring the module's
    TorchScript registries after the failed trace used to replace it with one of its own)."""
    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("scale", torch.full((4,), 2.0))

        def forward(self, x):
            return x * self.scale

    with quiet_warnings():
        model = Holder(torch.jit.script(Plain()))
    x = torch.randn(2, 4)
    with pytest.raises(Exception) as theirs:
        torch.export.export(model, (x,))
    with pytest.raises(TraceError) as ours:
        graphcap.export(model, (x,))
    assert type(ours.value.__cause__) is type(theirs.value)
    assert str(ours.value.__cause__) == str(theirs.value)


def test_registry_views_read_torchscripts_registries_as_mappings():
    with quiet_warnings():
        scripted = torch.jit.script(Holder(torch.nn.Linear(4, 4)))
    assert not isinstance(vars(scripted)["_buffers"], dict)
    assert dict(buffers_of(scripted)) == {"offset": scripted.offset}
    assert list(parameters_of(scripted)) == ["weight"]
    assert buffers_of(scripted).get("missing") is None and 0 not in buffers_of(scripted)
    assert list(children_of(scripted)) == ["inner"] and children_of(scripted)["inner"] is scripted.inner
    assert list(parameters_of(children_of(scripted)["inner"])) == ["weight", "bias"]
    view = registry_view(vars(scripted)["_buffers"])
    replacement = torch.zeros(4)
    view["offset"] = replacement  # writes reach the compiled module
    assert scripted.offset is replacement
    plain = {"a": 1}
    assert registry_view(plain) is plain
