"""Export never writes the user's tensors: forward writing in place to a tensor that is not state is refused.

A tensor forward reaches that is neither a parameter, a buffer nor an input (held by a plain
object, a list or dict attribute, an unregistered attribute, a global) can only be a constant of
the program. torch's fake mode runs an in-place operator whose tensors are all real on the real
tensors, so torch.export changes the user's model while exporting; graphcap refuses the write
before it happens, naming the tensor, the line and the fix.
"""
from __future__ import annotations

import copy

import pytest
import torch

import graphcap
from graphcap.errors import ConstantMutationError


class Holder:
    def __init__(self):
        self.t = torch.zeros(3)


class WritesHeldTensor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.holder = Holder()

    def forward(self, x):
        self.holder.t.add_(1)
        return x + self.holder.t


class WritesListItem(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = [torch.zeros(3), torch.ones(3)]

    def forward(self, x):
        self.cache[1].mul_(2).add_(1)
        return x * self.cache[1]


class WritesDictItem(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.store = {"k": torch.zeros(3)}

    def forward(self, x):
        self.store["k"].copy_(x)  # the source is an input: only the destination is real
        return x + self.store["k"]


class WritesPlainAttribute(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.t = torch.zeros(3)  # not registered

    def forward(self, x):
        self.t.sub_(1)
        return x - self.t


class WritesThroughView(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.holder = Holder()

    def forward(self, x):
        self.holder.t[0].add_(1)  # the fake mode does not run this on the real tensor; the program would
        return x + self.holder.t


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.holder = Holder()

    def forward(self, x):
        self.holder.t.add_(x)
        return x + self.holder.t


class WritesInSubmodule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x) * 2


GLOBAL_COUNTER = torch.zeros(3)


class WritesGlobal(torch.nn.Module):
    def forward(self, x):
        GLOBAL_COUNTER.add_(5)
        return x + GLOBAL_COUNTER


CASES = [
    (WritesHeldTensor, lambda m: m.holder.t, "self.holder.t", "self.holder.t.add_(1)"),
    (WritesListItem, lambda m: m.cache[1], "self.cache[1]", "self.cache[1].mul_(2)"),
    (WritesDictItem, lambda m: m.store["k"], "self.store['k']", "self.store[\"k\"].copy_(x)"),
    (WritesPlainAttribute, lambda m: m.t, "self.t", "self.t.sub_(1)"),
    (WritesThroughView, lambda m: m.holder.t, "self.holder.t", "self.holder.t[0].add_(1)"),
    (WritesInSubmodule, lambda m: m.inner.holder.t, "self.inner.holder.t", "self.holder.t.add_(x)"),
    (WritesGlobal, lambda m: GLOBAL_COUNTER, "the global GLOBAL_COUNTER", "GLOBAL_COUNTER.add_(5)"),
]


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("cls, held, path, line", CASES, ids=[c[0].__name__ for c in CASES])
def test_a_write_to_a_tensor_that_is_not_state_is_refused_and_the_tensor_is_untouched(cls, held, path, line, strict):
    model = cls()
    tensor = held(model)
    before = tensor.clone()
    with pytest.raises(ConstantMutationError) as info:
        graphcap.export(model, (torch.ones(3),), strict=strict)
    assert held(model) is tensor and torch.equal(tensor, before)
    text = str(info.value)
    shown = path[len("self."):] if path.startswith("self.") else path.replace("the global ", "global ")
    assert f"Constant {shown} is written in place" in text and "not a parameter, buffer or input" in text
    held = path.replace("the global ", "")
    assert f"{held}.clone()" in text  # the fix names it as the user's code does
    assert line in text  # the user's line that writes
    assert "register_buffer(" in text and ".clone()" in text


def test_the_fix_the_error_suggests_exports_a_program_that_updates_its_buffer():
    class Fixed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.holder = Holder()
            self.register_buffer("holder_t", self.holder.t)

        def forward(self, x):
            self.holder_t.add_(1)
            return x + self.holder_t

    model = Fixed()
    ep = graphcap.export(copy.deepcopy(model), (torch.ones(3),))
    assert torch.equal(model.holder_t, torch.zeros(3))
    mod = ep.module()
    torch.testing.assert_close(mod(torch.ones(3)), model(torch.ones(3)))
    torch.testing.assert_close(mod(torch.ones(3)), model(torch.ones(3)))


def test_reading_such_a_tensor_and_writing_fresh_tensors_still_export():
    """Only writes are refused: a held tensor read, a copy of it written, a tensor made in forward
    written, and a registered buffer written are all fine, and the held tensor stays as it was."""
    class Fine(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.holder = Holder()
            self.register_buffer("steps", torch.zeros(1))

        def forward(self, x):
            t = self.holder.t.clone()
            t.add_(1)
            made = torch.tensor([1.0, 2.0, 3.0])
            made.mul_(2)
            self.steps.add_(1)
            return x + t + made + self.holder.t

    model = Fine()
    ep = graphcap.export(copy.deepcopy(model), (torch.ones(3),))
    torch.testing.assert_close(ep.module()(torch.ones(3)), model(torch.ones(3)))
    assert torch.equal(model.holder.t, torch.zeros(3))
    ep.run_decompositions()  # no constant written: the inference IR has no refusal either


def test_draft_export_refuses_too_and_leaves_the_tensor():
    model = WritesHeldTensor()
    with pytest.raises(ConstantMutationError):
        graphcap.draft_export(model, (torch.ones(3),))
    assert torch.equal(model.holder.t, torch.zeros(3))


class _BufferHolder:
    def __init__(self, tensor):
        self.tensor = tensor


class WritesBufferThroughHolder(torch.nn.Module):
    """A registered buffer also held by a plain object (as transformers' StaticCache holds its cache),
    written with no other tensor in the call: the write is the buffer's, in the program, not the model's."""

    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))
        self.counter = _BufferHolder(self.steps)

    def forward(self, x):
        self.counter.tensor.add_(1)
        return x + self.steps


@pytest.mark.parametrize("strict", [False, True])
def test_a_buffer_written_through_another_object_is_updated_by_the_program_not_by_export(strict):
    model, eager = WritesBufferThroughHolder(), WritesBufferThroughHolder()
    ep = graphcap.export(model, (torch.ones(2),), strict=strict)
    assert float(model.steps) == 0.0  # export wrote nothing (torch.export makes it 1)
    assert ep.run_decompositions().graph_signature.buffers_to_mutate  # the program updates it
    program = ep.module()
    for _ in range(3):
        torch.testing.assert_close(program(torch.ones(2)), eager(torch.ones(2)))
    assert float(program.steps) == float(eager.steps) == 3.0
