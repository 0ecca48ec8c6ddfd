"""run_decompositions(decompose_custom_triton_ops=...): operators defined with torch.library.triton_op.

torch.export keeps such an operator whole by default and, with ``True``,
replaces it by its implementation. The implementations here call torch
operators only (no ``wrap_triton`` kernel: triton and a GPU are not needed to
define or run them), which is enough to see what each pipeline keeps; each
case compares graphcap's program with torch.export's on the same model.
"""
from __future__ import annotations

import io
from collections import Counter

import pytest
import torch
from torch.library import triton_op

import graphcap
from graphcap.errors import SerializationError
from graphcap.torch_private.functional import is_triton_op


@triton_op("gc_triton_test::scale_add", mutates_args={})
def scale_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * 2 + y


@triton_op("gc_triton_test::gated", mutates_args={})
def gated(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(x) * x.sigmoid()


@torch.library.custom_op("gc_triton_test::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    return x.cos()


@opaque.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Plain(torch.nn.Module):
    def forward(self, x, y):
        return gated(scale_add(x, y)).relu() + opaque(x)


class CountsCalls(torch.nn.Module):
    """Writes a buffer in place: the retrace functionalizes it."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x, y):
        self.calls.add_(1)
        return scale_add(x, y) * self.calls


class InBranch(torch.nn.Module):
    def forward(self, x, y):
        return torch.cond(x.sum() > 0, lambda a, b: scale_add(a, b), lambda a, b: a - b, (x, y))


def _ops(ep) -> Counter:
    """Every operator the program calls, its subgraphs included, by name."""
    return Counter(str(n.target) for sub in ep.graph_module.modules() if isinstance(sub, torch.fx.GraphModule)
                   for n in sub.graph.nodes if n.op == "call_function")


def _args(batch: int = 3):
    g = torch.Generator().manual_seed(batch)
    return torch.randn(batch, 4, generator=g), torch.randn(batch, 4, generator=g)


def test_triton_ops_are_recognised_by_their_registration():
    assert is_triton_op(torch.ops.gc_triton_test.scale_add.default)
    assert not is_triton_op(torch.ops.gc_triton_test.opaque.default)
    assert not is_triton_op(torch.ops.aten.add.Tensor)
    assert not is_triton_op(scale_add)  # the CustomOpDef, not an operator overload


@pytest.mark.parametrize("flag", [False, True])
@pytest.mark.parametrize("table", [None, {}], ids=["core-aten", "empty-table"])
def test_kept_or_decomposed_as_torch_does(flag, table):
    args = _args()
    theirs = torch.export.export(Plain(), args).run_decompositions(table, decompose_custom_triton_ops=flag)
    ours = graphcap.export(Plain(), args).run_decompositions(table, decompose_custom_triton_ops=flag)
    assert _ops(ours) == _ops(theirs)
    kept = "gc_triton_test.scale_add.default" in _ops(ours)
    assert kept is (not flag)
    assert "gc_triton_test.opaque.default" in _ops(ours)  # a plain custom op is never split
    a = _args(3)
    torch.testing.assert_close(ours.module()(*a), Plain()(*a))
    torch.testing.assert_close(ours.module()(*a), theirs.module()(*a))


def test_default_keeps_them():
    ours = graphcap.export(Plain(), _args()).run_decompositions()
    assert _ops(ours)["gc_triton_test.scale_add.default"] == 1
    assert _ops(ours)["gc_triton_test.gated.default"] == 1


@pytest.mark.parametrize("flag", [False, True])
def test_functionalized_program_follows_the_flag(flag):
    """A program that writes a buffer is retraced under functionalization, where the triton op's
    own splitting rule runs: it must still honour the flag (torch's default of that rule is to split)."""
    args = _args()
    theirs = torch.export.export(CountsCalls(), args).run_decompositions(decompose_custom_triton_ops=flag)
    ours = graphcap.export(CountsCalls(), args).run_decompositions(decompose_custom_triton_ops=flag)
    assert _ops(ours) == _ops(theirs)
    assert ("gc_triton_test.scale_add.default" in _ops(ours)) is (not flag)
    model, m = CountsCalls(), ours.module()
    for _ in range(2):
        torch.testing.assert_close(m(*args), model(*args))
    torch.testing.assert_close(m.calls, model.calls)


@pytest.mark.parametrize("flag", [False, True])
def test_inside_a_cond_branch(flag):
    args = _args()
    theirs = torch.export.export(InBranch(), args).run_decompositions(decompose_custom_triton_ops=flag)
    ours = graphcap.export(InBranch(), args).run_decompositions(decompose_custom_triton_ops=flag)
    assert _ops(ours)["gc_triton_test.scale_add.default"] == _ops(theirs)["gc_triton_test.scale_add.default"]
    for x, y in (args, (-args[0].abs(), args[1])):
        torch.testing.assert_close(ours.module()(x, y), InBranch()(x, y))


def test_dynamic_batch():
    batch = graphcap.Dim("batch", min=2, max=64)
    args = _args()
    ours = graphcap.export(Plain(), args, dynamic_shapes=({0: batch}, {0: batch}))
    split = ours.run_decompositions(decompose_custom_triton_ops=True)
    assert "gc_triton_test.scale_add.default" not in _ops(split)
    for n in (2, 9):
        a = _args(n)
        torch.testing.assert_close(split.module()(*a), Plain()(*a))


def test_the_flag_does_not_leak_into_torch():
    """The retrace sets torch's flag for its own duration only."""
    import torch._functorch.config as functorch_config
    before = functorch_config.decompose_custom_triton_ops
    graphcap.export(CountsCalls(), _args()).run_decompositions(decompose_custom_triton_ops=not before)
    assert functorch_config.decompose_custom_triton_ops == before


def test_multi_method_program_passes_the_flag():
    class Two(torch.nn.Module):
        def forward(self, x, y):
            return scale_add(x, y)

        def other(self, x):
            return gated(x)

    x, y = _args()
    progs = graphcap.export_methods(Two(), {"forward": (x, y), "other": (x,)})
    split = progs.run_decompositions(decompose_custom_triton_ops=True)
    kept = progs.run_decompositions()
    assert all(not any(str(op).startswith("gc_triton_test.") for op in _ops(ep)) for ep in split.values())
    assert _ops(kept["forward"])["gc_triton_test.scale_add.default"] == 1
    assert _ops(kept["other"])["gc_triton_test.gated.default"] == 1


# -- an implementation that launches a real triton kernel (triton installed; no GPU needed to trace) --

def _triton_kernel_op():
    """A triton_op whose implementation launches a triton kernel through wrap_triton; defined once."""
    import triton  # torch's Linux wheels (CI's, every line 2.10 to 2.15) depend on it
    if hasattr(_triton_kernel_op, "op"):
        return _triton_kernel_op.op
    from torch.library import wrap_triton
    from triton import language as tl

    @triton.jit
    def add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: "tl.constexpr"):
        offsets = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(a_ptr + offsets, mask=mask) + tl.load(b_ptr + offsets, mask=mask),
                 mask=mask)

    @triton_op("gc_triton_test::kernel_add", mutates_args={})
    def kernel_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(a)
        wrap_triton(add_kernel)[(triton.cdiv(a.numel(), 16),)](a, b, out, a.numel(), 16)
        return out

    _triton_kernel_op.op = kernel_add
    return kernel_add


def _kernel_model():
    kernel_add = _triton_kernel_op()

    class UsesKernel(torch.nn.Module):
        def forward(self, x, y):
            return kernel_add(x, y).relu()
    return UsesKernel()


@pytest.mark.parametrize("flag", [False, True])
def test_real_kernel_kept_or_split_as_torch_does(flag):
    """Tracing only (fake tensors): the kernel never launches, so no GPU is needed. Running the program
    needs one: test_real_kernel_runs_on_cuda."""
    model, args = _kernel_model(), _args()
    theirs = torch.export.export(model, args).run_decompositions(decompose_custom_triton_ops=flag)
    ours = graphcap.export(model, args).run_decompositions(decompose_custom_triton_ops=flag)
    assert _ops(ours) == _ops(theirs)
    assert ("gc_triton_test.kernel_add.default" in _ops(ours)) is (not flag)
    assert ("triton_kernel_wrapper_functional" in _ops(ours)) is flag


def test_a_split_kernel_call_is_not_saved():
    """The split call names its kernel by an index into this process's kernel table: a file cannot
    say which kernel runs (torch.export.save refuses it too). The kept operator saves."""
    model, args = _kernel_model(), _args()
    ep = graphcap.export(model, args)
    with pytest.raises(SerializationError) as info:
        graphcap.save(ep.run_decompositions(decompose_custom_triton_ops=True), io.BytesIO())
    assert "triton kernel" in info.value.what and "node triton_kernel_wrapper_functional" in info.value.where
    assert "decompose_custom_triton_ops=False" in info.value.fix
    buf = io.BytesIO()
    graphcap.save(ep.run_decompositions(), buf)  # the fix works
    buf.seek(0)
    assert "gc_triton_test.kernel_add.default" in _ops(graphcap.load(buf))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="launching a triton kernel needs a CUDA GPU")
def test_real_kernel_runs_on_cuda():
    """Kept and split, graphcap's program gives eager's numbers on the GPU, as torch.export's does."""
    model = _kernel_model()
    x, y = (t.cuda() for t in _args(40))
    expected = model(x, y)
    for flag in (False, True):
        ours = graphcap.export(model, (x, y)).run_decompositions(decompose_custom_triton_ops=flag)
        theirs = torch.export.export(model, (x, y)).run_decompositions(decompose_custom_triton_ops=flag)
        torch.testing.assert_close(ours.module()(x, y), expected)
        torch.testing.assert_close(theirs.module()(x, y), expected)
