"""Custom and higher-order operators (the audit of docs/torch-suite.md, 2026-11-27).

- A control-flow subgraph (cond branch, while_loop condition or body, map body, scan's
  combine function) that writes one of its operands in place (an input, a buffer, a
  closed-over intermediate; directly, through a view, or in a nested call) is refused at
  export, naming the state, the operator and the fix: torch's operators refuse such a
  subgraph when the program runs, so the program would fail on its first call.
- A branch that writes a tensor it made itself decomposes to a functional program (the
  retrace functionalizes when a subgraph still writes, not only the top graph).
- Branches returning a symbolic size that this torch's cond cannot merge: an
  UnsupportedError with the fix, not an "error inside graphcap".
- ``flex_attention`` exports non-strict (its own ``torch.compile(fullgraph=True)`` runs
  eagerly while graphcap records), with a ``score_mod`` closing over a parameter passed in
  as ``score_mod_other_buffers`` (the parameter's placeholder), as torch.export records it.
"""
from __future__ import annotations

import warnings

import pytest
import torch
from torch.export import Dim

import graphcap
from conftest import TORCH_LINE
from graphcap.errors import UnsupportedError


def _export(model, args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return graphcap.export(model, args, **kw)


def _positive(x):
    return x.sum() > 0


class _WritesBufferInBranch(torch.nn.Module):
    def __init__(self, through_view: bool = False):
        super().__init__()
        self.register_buffer("hits", torch.zeros(4))
        self.through_view = through_view

    def forward(self, x):
        def yes(y):
            (self.hits[1:3] if self.through_view else self.hits).add_(1)
            return y + 1

        return torch.cond(_positive(x), yes, lambda y: y - 1, (x,))


class _WritesInputInLoop(torch.nn.Module):
    def forward(self, x, total):
        def cond_fn(i, y):
            return i < 3

        def body_fn(i, y):
            total.mul_(2)
            return i + 1, y * 2

        from torch._higher_order_ops.while_loop import while_loop
        return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


class _WritesIntermediateInMap(torch.nn.Module):
    def forward(self, xs):
        acc = xs.sum(0) * 0

        def body(row):
            acc.add_(row)
            return row * 2

        from torch._higher_order_ops.map import map as hop_map
        return hop_map(body, xs), acc


class _WritesInNestedCondUnderNoGrad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        def inner(y):
            with torch.no_grad():
                self.steps.add_(1)
            return y * 3

        def outer(y):
            return torch.cond(y.mean() > 1, inner, lambda z: z * 2, (y,))

        return torch.cond(_positive(x), outer, lambda y: y - 1, (x,))


@pytest.mark.parametrize("model, args, state, side", [
    (_WritesBufferInBranch(), (torch.randn(4),), "buffer `self.hits`", "true branch"),
    (_WritesBufferInBranch(through_view=True), (torch.randn(4),), "buffer `self.hits`", "true branch"),
    (_WritesInputInLoop(), (torch.randn(3), torch.ones(2)), "input `total`", "loop body"),
    (_WritesIntermediateInMap(), (torch.randn(3, 2),), "a tensor forward computed", "map body"),
    (_WritesInNestedCondUnderNoGrad(), (torch.full((3,), 2.0),), "buffer `self.steps`", "true branch"),
], ids=["buffer", "buffer-view", "while-input", "map-intermediate", "nested-no-grad"])
def test_a_subgraph_writing_its_operands_is_refused_at_export_naming_the_state(model, args, state, side):
    with pytest.raises(UnsupportedError) as info:
        _export(model, args)
    err = info.value
    assert state in err.what and side in err.what
    assert err.where is not None and "test_ops_audit.py" in err.where
    assert ".copy_(new)" in err.fix


def test_the_refusal_names_the_users_input_in_the_fix():
    with pytest.raises(UnsupportedError) as info:
        _export(_WritesInputInLoop(), (torch.randn(3), torch.ones(2)))
    assert "total.copy_(new)" in info.value.fix


class _WritesItsOwnCopy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("base", torch.arange(4.0))

    def forward(self, x):
        def yes(y):
            z = self.base.clone()
            z.add_(y)
            z[0:2].mul_(3)
            return z

        def loop_body(i, y):
            t = y.clone()
            t.mul_(0.5)
            return i + 1, t

        out = torch.cond(_positive(x), yes, lambda y: y - self.base, (x,))
        from torch._higher_order_ops.while_loop import while_loop
        _, looped = while_loop(lambda i, y: i < 2, loop_body, (torch.zeros((), dtype=torch.int64), out))
        return looped


@pytest.mark.parametrize("x", [torch.randn(4), -torch.ones(4), torch.ones(4)])
def test_branches_writing_their_own_tensors_export_and_decompose_to_a_functional_program(x):
    model = _WritesItsOwnCopy()
    ep = _export(model, (torch.randn(4),))
    torch.testing.assert_close(ep.module()(x), model(x))
    dec = ep.run_decompositions()
    writes = [n for sub in dec.graph_module.modules() if isinstance(sub, torch.fx.GraphModule)
              for n in sub.graph.nodes if n.op == "call_function" and str(n.target).endswith("_.Tensor")]
    assert writes == []
    torch.testing.assert_close(dec.module()(x), model(x))


class _SizeFromBranches(torch.nn.Module):
    def forward(self, x):
        return torch.cond(_positive(x), lambda y: (y + 1, y.shape[0] * 2), lambda y: (y - 1, y.shape[0] * 2), (x,))


class _SizeAsTensor(torch.nn.Module):
    def forward(self, x):
        return torch.cond(_positive(x), lambda y: (y + 1, torch.full((), y.shape[0] * 2)),
                          lambda y: (y - 1, torch.full((), y.shape[0] * 2)), (x,))


def test_a_symbolic_size_returned_by_branches_is_refused_with_the_fix_that_works():
    n = Dim("n", min=2, max=16)
    try:
        ep = _export(_SizeFromBranches(), (torch.randn(4),), dynamic_shapes=({0: n},))
    except UnsupportedError as e:  # this torch's cond cannot merge symbolic sizes (torch.export fails too)
        assert "output[1] of the true branch" in e.what and "symbolic" in e.what
        assert "test_ops_audit.py" in (e.where or "")
        assert "torch.full((), y.shape[0] * 2)" in e.fix
    else:  # a torch whose cond returns symbolic sizes: the program must be right
        for x in (torch.randn(7), -torch.ones(3)):
            assert ep.module()(x)[1] == x.shape[0] * 2
    # the suggested form exports and is right at other sizes
    ep = _export(_SizeAsTensor(), (torch.randn(4),), dynamic_shapes=({0: n},))
    for x in (torch.randn(9), -torch.ones(2)):
        out, size = ep.module()(x)
        torch.testing.assert_close(out, _SizeAsTensor()(x)[0])
        assert int(size) == x.shape[0] * 2


class _Flex(torch.nn.Module):
    def __init__(self, with_mask: bool):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(16))
        self.with_mask = with_mask

    def forward(self, q, k, v):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def score_mod(score, b, h, qi, ki):
            return score * 0.5 + self.bias[ki]

        def causal(b, h, qi, ki):
            return qi >= ki

        mask = (create_block_mask(causal, None, None, q.shape[2], k.shape[2], device="cpu")
                if self.with_mask else None)
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=mask)


def _qkv(n: int = 16):
    return tuple(torch.randn(1, 2, n, 8) for _ in range(3))


@pytest.mark.parametrize("with_mask", [False, True], ids=["score_mod", "score_mod+block_mask"])
def test_flex_attention_exports_non_strict_with_its_closed_over_parameter_as_an_operand(with_mask):
    model = _Flex(with_mask)
    ep = _export(model, _qkv())
    node = next(n for n in ep.graph.nodes if n.op == "call_function" and "flex_attention" in str(n.target))
    assert [a.name for a in node.args[7]] == ["p_bias"]
    for args in (_qkv(), _qkv()):
        torch.testing.assert_close(ep.module()(*args), model(*args))
    dec = ep.run_decompositions()
    args = _qkv()
    torch.testing.assert_close(dec.module()(*args), model(*args))


def test_flex_attention_without_mods_survives_save_and_load(tmp_path):
    class Plain(torch.nn.Module):
        def forward(self, q, k, v):
            from torch.nn.attention.flex_attention import flex_attention
            return flex_attention(q, k, v)

    ep = _export(Plain(), _qkv())
    graphcap.save(ep, tmp_path / "flex.pt2")
    loaded = graphcap.load(tmp_path / "flex.pt2")
    args = _qkv()
    torch.testing.assert_close(loaded.module()(*args), Plain()(*args))


_LIB = torch.library.Library("graphcap_ops_audit", "DEF")
_LIB.define("shift_(Tensor(a!) x, float s) -> Tensor(a!)")
_LIB.impl("shift_", lambda x, s: x.add_(s), "CompositeExplicitAutograd")
torch.library.register_fake("graphcap_ops_audit::shift_", lambda x, s: x, lib=_LIB)


class _ShiftsInPlace(torch.nn.Module):
    def forward(self, x):
        return torch.ops.graphcap_ops_audit.shift_(x.clone(), 2.0) * 2


def test_a_custom_op_returning_its_written_argument_exports_and_its_decomposition_says_how_to_fix():
    ep = _export(_ShiftsInPlace(), (torch.randn(3),))
    x = torch.randn(3)
    torch.testing.assert_close(ep.module()(x), (x + 2) * 2)  # the training IR runs it
    with pytest.raises(RuntimeError) as info:  # torch.export's run_decompositions raises RuntimeError too
        ep.run_decompositions()
    err = info.value
    assert isinstance(err, graphcap.GraphcapError)
    assert "torch.ops.graphcap_ops_audit.shift_" in err.what and "returns the argument it writes" in err.what
    assert "-> ()" in err.fix and "mutates_args" in err.fix
    assert "node shift_" in err.where


def test_flex_attention_score_mod_indexing_a_tensor_saves_as_the_inference_ir_the_error_names(tmp_path):
    from graphcap.errors import SerializationError
    model = _Flex(with_mask=False)
    ep = _export(model, _qkv())
    with pytest.raises(SerializationError) as info:
        graphcap.save(ep, tmp_path / "training.pt2")
    assert "ModIndex" in info.value.what and "tensor subclass" not in info.value.what
    assert "run_decompositions()" in info.value.fix
    graphcap.save(ep.run_decompositions(), tmp_path / "inference.pt2")
    loaded = graphcap.load(tmp_path / "inference.pt2")
    args = _qkv()
    torch.testing.assert_close(loaded.module()(*args), model(*args))


@torch.compile(fullgraph=True, backend="eager")
def _compiled_whole(x):
    return x.sin() * 2


class _CallsACompiledFunction(torch.nn.Module):
    def forward(self, x):
        return _compiled_whole(x) + 1


@pytest.mark.skipif(TORCH_LINE == (2, 13), reason="torch 2.13: a user's torch.compile(fullgraph=True) function "
                    "called in forward fails while recording ('found no compiled frames'); flex_attention's works")
def test_a_fullgraph_compiled_function_called_in_forward_is_recorded_inline_as_torch_export_does():
    model = _CallsACompiledFunction()
    ep = _export(model, (torch.randn(3),), dynamic_shapes=({0: Dim("n", max=9)},))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert targets == ["aten.sin.default", "aten.mul.Tensor", "aten.add.Tensor"]
    for x in (torch.randn(3), torch.randn(9)):
        torch.testing.assert_close(ep.module()(x), model(x))
    torch.testing.assert_close(_compiled_whole(torch.ones(2)), torch.ones(2).sin() * 2)  # still callable after


_CALLS: list[float] = []


@torch.library.custom_op("graphcap_ops_audit::note_sum", mutates_args=())
def _note_sum(x: torch.Tensor) -> None:
    _CALLS.append(float(x.sum()))


@_note_sum.register_fake
def _(x):
    return None


class _Notes(torch.nn.Module):
    def forward(self, x):
        _note_sum(x * 2)
        with torch.no_grad():
            _note_sum(x + 1)
        return x - 1


@pytest.mark.parametrize("strict", [False, True])
def test_a_custom_op_returning_nothing_runs_in_every_form_of_the_program(strict, tmp_path):
    """An operator that returns nothing is only called for its effect: the inference IR keeps it
    (torch.export's run_decompositions drops it as dead)."""
    ep = _export(_Notes(), (torch.randn(3),), strict=strict)
    dec = ep.run_decompositions()
    graphcap.save(dec, tmp_path / "p.pt2")
    for program in (ep, dec, graphcap.load(tmp_path / "p.pt2")):
        _CALLS.clear()
        program.module()(torch.ones(3))
        assert _CALLS == [6.0, 6.0]
