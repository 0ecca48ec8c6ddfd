"""What graphcap reads from torch's messages and frames still reads right on the installed torch.

``graphcap.torch_private.messages`` parses a few of torch's error messages and reads the
locals of ``torch.cond``'s own frame (see its docstring). Neither is an API; each test
here provokes the message (or the frame) from the installed torch and checks that the
adapter function still finds what graphcap's errors quote, naming the function when a
torch release rewords or renames it.
"""
from __future__ import annotations

import pytest
import torch

from conftest import TORCH_LINE
from graphcap.torch_private import messages


def _raised(call):
    try:
        call()
    except Exception as e:  # the error is what the test reads
        return e
    pytest.fail("torch raised nothing where the message was expected")


def _where(function) -> str:
    return f"graphcap.torch_private.messages.{function.__name__} on torch {torch.__version__}"


def test_data_dependent_expression_is_found_in_torchs_guard_error():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    env = ShapeEnv()
    u0 = env.create_unbacked_symint()
    error = _raised(lambda: bool(u0 > 2))
    found = messages.data_dependent_expression(error)
    assert found is not None and "u0" in found, (
        f"{_where(messages.data_dependent_expression)}: no expression in {str(error)[:300]!r}")


def test_custom_op_without_fake_kernel_is_named_from_torchs_error():
    from graphcap.torch_private.fake import FakeTensorMode

    @torch.library.custom_op("graphcap_surface::no_fake_kernel", mutates_args=())
    def no_fake_kernel(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.ones(2))
        error = _raised(lambda: no_fake_kernel(x))
    named = None
    for err in (error, error.__cause__, error.__context__):
        named = named or (messages.custom_op_without_fake_kernel(err) if err is not None else None)
    assert named == "graphcap_surface::no_fake_kernel", (
        f"{_where(messages.custom_op_without_fake_kernel)}: found {named!r} in {str(error)[:300]!r}")


def test_cond_refusing_container_operands_is_recognized():
    from torch._higher_order_ops.cond import cond_op
    t = torch.ones(2)
    error = _raised(lambda: cond_op(torch.tensor(True), lambda d: d["a"], lambda d: d["a"], ({"a": t},)))
    assert messages.is_cond_container_operands_refusal(error), (
        f"{_where(messages.is_cond_container_operands_refusal)}: not recognized: {str(error)[:300]!r}")


@pytest.mark.skipif(TORCH_LINE >= (2, 14), reason="torch 2.14 on: cond accepts outputs whose strides hold Max(1, ...)")
def test_cond_refusing_outputs_it_cannot_tell_dense_is_recognized():
    import torch.nn.functional as F

    class Halving(torch.nn.Module):
        def forward(self, x, flag):
            def half(x):
                return F.interpolate(x, scale_factor=0.5, mode="bilinear")
            return torch.cond(flag.sum() > 0, half, half, (x,))

    h = torch.export.Dim("h", min=2, max=9)
    error = _raised(lambda: torch.export.export(Halving(), (torch.randn(1, 1, 6, 6), torch.ones(1)),
                                                dynamic_shapes={"x": {2: h}, "flag": None}))
    assert messages.is_cond_dense_stride_refusal(error), (
        f"{_where(messages.is_cond_dense_stride_refusal)}: not recognized: {str(error)[:300]!r}")


def test_cond_frame_locals_hold_the_branches():
    def true_fn(x):
        raise ValueError("in the branch")

    def false_fn(x):
        return x

    x = torch.ones(2)
    error = _raised(lambda: torch.cond(torch.tensor(True), true_fn, false_fn, (x,)))
    found = messages.cond_call_locals(error.__traceback__)
    assert found is not None and found.get("true_fn") is true_fn and found.get("false_fn") is false_fn, (
        f"{_where(messages.cond_call_locals)}: torch.cond's frame locals are now {sorted(found or {})}")


def test_fake_device_mismatch_names_the_operator_and_devices():
    """Where this torch's fake tensors refuse aten.embedding over meta weights and CPU indices
    (graphcap then names the release that takes them), the refusal is read from torch's text;
    where they take them, ``embedding_takes_meta_weights`` says so."""
    from graphcap.torch_private.fake import FakeTensorMode, embedding_takes_meta_weights
    with FakeTensorMode() as mode:
        weight = mode.from_tensor(torch.empty(10, 4, device="meta"))
        ids = mode.from_tensor(torch.zeros(3, dtype=torch.long))
        try:
            out = torch.ops.aten.embedding.default(weight, ids)
        except Exception as error:  # the error is what the test reads
            assert not embedding_takes_meta_weights(), f"torch {torch.__version__} refuses it: {error}"
            found = messages.fake_device_mismatch(error)
            assert found is not None and found[0].startswith("aten.embedding") and set(found[1:]) == {"cpu", "meta"}, (
                f"{_where(messages.fake_device_mismatch)}: found {found!r} in {str(error)[:300]!r}")
            return
    assert embedding_takes_meta_weights() and out.device.type == "meta", (
        f"torch {torch.__version__} takes meta weights with CPU indices: EMBEDDING_OF_META_WEIGHTS_SINCE is too late")


def test_data_dependence_is_told_from_torchs_guard_error():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    u0 = ShapeEnv().create_unbacked_symint()
    error = _raised(lambda: bool(u0 > 2))
    assert messages.is_data_dependent_failure(error), (
        f"{_where(messages.is_data_dependent_failure)}: not told from {str(error)[:300]!r}")
    wrapped = RuntimeError(f"While executing a node: {error}")  # a wrapper keeps torch's words only
    assert messages.is_data_dependent_failure(wrapped), (
        f"{_where(messages.is_data_dependent_failure)}: the words are gone from {str(error)[:300]!r}")
    assert not messages.is_data_dependent_failure(ValueError("shape mismatch"))


def test_a_real_tensor_under_fake_mode_is_told_from_torchs_refusal():
    from graphcap.torch_private.fake import FakeTensorMode
    mode = FakeTensorMode()
    real = torch.arange(4.0)
    with mode:
        fake = mode.from_tensor(torch.ones(4))
        error = _raised(lambda: torch.mul(real, fake))
    assert messages.is_real_tensor_under_fake_mode(error), (
        f"{_where(messages.is_real_tensor_under_fake_mode)}: not told from {str(error)[:300]!r}")
    assert not messages.is_real_tensor_under_fake_mode(AssertionError("some other assertion"))


def test_a_failed_runtime_assert_is_told_from_its_message():
    """The message is what torch's runtime-assert pass writes into the ``_assert_scalar`` node;
    ``module()`` may add graphcap's explanation after it, never before."""
    import graphcap

    class ReadsAValue(torch.nn.Module):
        def forward(self, x, n):
            k = n.item()
            torch._check(k <= 10)
            return x * k

    ep = graphcap.export(ReadsAValue(), (torch.ones(2), torch.tensor(3)))
    error = _raised(lambda: ep.module()(torch.ones(2), torch.tensor(30)))
    assert isinstance(error, RuntimeError) and messages.is_runtime_assert_failure(error), (
        f"{_where(messages.is_runtime_assert_failure)}: not told from {str(error)[:300]!r}")
    assert not messages.is_runtime_assert_failure(RuntimeError("shape mismatch"))


def test_a_branch_torch_cannot_capture_is_explained_from_torchs_message():
    touched = []

    def writes_outside(x):
        touched.append(x)
        return x * 2

    error = _raised(lambda: torch.cond(torch.tensor(True), writes_outside, lambda x: x + 1, (torch.ones(2),)))
    assert messages.blames_control_flow_capture(error), (
        f"{_where(messages.blames_control_flow_capture)}: not told from {str(error)[:300]!r}")
    reason = messages.uncapturable_branch_reason(error)
    # torch 2.10 says "(SideEffects)", later lines "side effect": either names the cause
    assert "sideeffect" in reason.lower().replace(" ", "") and "Got graph break" not in reason \
        and "Developer debug context" not in reason, (
        f"{_where(messages.uncapturable_branch_reason)}: read {reason!r} from {str(error)[:300]!r}")


def test_dynamos_graph_break_explanation_and_user_frame_are_read():
    def breaks(x):
        torch._dynamo.graph_break()
        return x + 1

    torch._dynamo.reset()
    error = _raised(lambda: torch.compile(breaks, backend="eager", fullgraph=True)(torch.ones(2)))
    explanation = messages.dynamo_explanation(error)
    assert "graph_break" in explanation and "from user code" not in explanation \
        and "TORCHDYNAMO_VERBOSE" not in explanation, (
        f"{_where(messages.dynamo_explanation)}: read {explanation!r}")
    frame = messages.dynamo_user_code_frame(error, skip="no such frame")
    assert frame is not None and frame.startswith('File "') and "in breaks" in frame \
        and "torch._dynamo.graph_break()" in frame, (
        f"{_where(messages.dynamo_user_code_frame)}: read {frame!r} from {str(error)[:400]!r}")
    assert messages.dynamo_user_code_frame(error, skip="in breaks") is None


def test_dynamos_side_effect_sources_are_read():
    def counts(x):
        global _CALLS
        _CALLS += 1
        return x + 1

    torch._dynamo.reset()
    with torch._dynamo.config.patch(side_effect_replay_policy="error"):
        error = _raised(lambda: torch.compile(counts, backend="eager", fullgraph=True)(torch.ones(2)))
    sources = messages.dynamo_side_effect_sources(error)
    assert sources == ["G['_CALLS']"], (
        f"{_where(messages.dynamo_side_effect_sources)}: read {sources!r} from {str(error)[:300]!r}")
    assert messages.dynamo_side_effect_sources(RuntimeError("a graph break")) is None


_CALLS = 0


def test_two_devices_are_read_from_an_operators_refusal():
    """An operator given tensors on two devices (the model on meta, the input on the CPU): the two
    devices are read from the text of fake tensors' refusal, which dynamo's explanation repeats."""
    from graphcap.torch_private.fake import FakeTensorMode
    with FakeTensorMode() as mode:
        weight = mode.from_tensor(torch.empty(3, 4, device="meta"))
        x = mode.from_tensor(torch.zeros(2, 4))
        error = _raised(lambda: torch.nn.functional.linear(x, weight))
    found = messages.two_devices(error)
    assert found is not None and set(found) == {"cpu", "meta"}, (
        f"{_where(messages.two_devices)}: found {found!r} in {str(error)[:300]!r}")


def test_a_branch_on_data_is_told_from_dynamos_graph_break():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x + 1
            return x - 1

    error = _raised(lambda: torch.export.export(Branchy(), (torch.randn(3),), strict=True))
    assert messages.is_data_dependent_branch(error), (
        f"{_where(messages.is_data_dependent_branch)}: not told from {str(error)[:300]!r}")
    assert not messages.is_data_dependent_branch(RuntimeError("Tensor device mismatch"))
