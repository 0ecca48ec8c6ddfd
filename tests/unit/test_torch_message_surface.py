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
