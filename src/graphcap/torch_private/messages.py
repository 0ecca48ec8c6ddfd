"""What graphcap reads from torch's error messages and from the frames of torch's functions.

Some of what graphcap explains after a failed trace is only in torch's text
(the data-dependent expression a guard needed, the custom operator that has no
fake kernel, why ``torch.cond`` refused its operands) or in the locals of
torch's own function on the traceback (the branch functions ``torch.cond`` and
``while_loop`` were called with). Neither is an API: a release may reword a
message or rename a parameter. Every such reading is here, one function each;
``tests/unit/test_torch_message_surface.py`` provokes each message from the
installed torch and checks that its function still finds what it looks for,
naming the function when a release moves it.
"""
from __future__ import annotations

import re
import types
from typing import Optional

RELIES_ON = {
    # the parameter names read from the frames of torch.cond / torch._higher_order_ops.while_loop
    "torch._higher_order_ops.cond.cond": ("pred", "true_fn", "false_fn", "operands"),
    "torch._higher_order_ops.while_loop.while_loop": ("cond_fn", "body_fn", "carried_inputs"),
}

__all__ = ["data_dependent_expression", "custom_op_without_fake_kernel", "is_cond_container_operands_refusal",
           "cond_call_locals", "while_loop_call_locals", "fake_device_mismatch"]

# "Could not guard on data-dependent expression Eq(u0, 1) (unhinted: Eq(u0, 1)). ..."
_DATA_DEPENDENT_EXPRESSION = re.compile(r"data-dependent expression (.+?) \(unhinted")

# a custom op (torch.library.custom_op) without register_fake, or a TORCH_LIBRARY op without a
# Meta kernel, called on fake tensors
_NO_FAKE_KERNEL = re.compile(r"no fake impl registered for <CustomOpDef\((\w+::\w+)\)>|"
                             r"(\w+::\w+)(?:\.\w+)?: attempted to run this operator with Meta tensors")

# a fake tensor refusing an operator whose tensors are on two devices (a RuntimeError before torch 2.14)
_FAKE_DEVICE_MISMATCH = re.compile(r"Unhandled FakeTensor Device Propagation for (\S+), found two different devices "
                                   r"(\S+), (\S+)")

# torch.cond's check of its operands (a dict / list / tuple among them, with cond bound before export)
_COND_CONTAINER_OPERANDS = re.compile(
    r"can only be of \(<class 'torch\.Tensor'>, <class 'int'>, <class 'torch\.SymInt'>\) but got")


def data_dependent_expression(error: BaseException) -> Optional[str]:
    """The expression a data-dependent guard needed (``Eq(u0, 1)``), as torch's message spells it, or None."""
    found = _DATA_DEPENDENT_EXPRESSION.search(str(error))
    return found.group(1) if found else None


def custom_op_without_fake_kernel(error: BaseException) -> Optional[str]:
    """``ns::name`` of the custom operator whose missing fake kernel ``error``'s message reports, or None."""
    found = _NO_FAKE_KERNEL.search(str(error))
    return (found.group(1) or found.group(2)) if found else None


def fake_device_mismatch(error: BaseException) -> tuple[str, str, str] | None:
    """``(operator, device, device)`` when ``error`` is a fake tensor refusing an operator whose
    tensors lie on two devices (``aten.embedding.default``, ``meta``, ``cpu``), else None."""
    found = _FAKE_DEVICE_MISMATCH.search(str(error))
    return (found.group(1), found.group(2).rstrip(","), found.group(3)) if found else None


def is_cond_container_operands_refusal(error: BaseException) -> bool:
    """Whether ``error`` is torch.cond refusing operands that hold a container."""
    return bool(_COND_CONTAINER_OPERANDS.search(str(error)))


def _frame_locals(tb: Optional[types.TracebackType], func_name: str, file_suffix: str) -> Optional[dict]:
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == func_name and code.co_filename.endswith(file_suffix):
            return dict(tb.tb_frame.f_locals)
        tb = tb.tb_next
    return None


def cond_call_locals(tb: Optional[types.TracebackType]) -> Optional[dict]:
    """The locals of ``torch.cond``'s own frame on traceback ``tb`` (``pred``, ``true_fn``,
    ``false_fn``, ``operands``), or None when the failure did not pass through it."""
    return _frame_locals(tb, "cond", "_higher_order_ops/cond.py")


def while_loop_call_locals(tb: Optional[types.TracebackType]) -> Optional[dict]:
    """The locals of ``while_loop``'s own frame on traceback ``tb`` (``cond_fn``, ``body_fn``,
    ``carried_inputs``), or None."""
    return _frame_locals(tb, "while_loop", "_higher_order_ops/while_loop.py")
