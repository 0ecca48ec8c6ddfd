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

import ast
import re
import types
from typing import Optional

RELIES_ON = {
    # the parameter names read from the frames of torch.cond / torch._higher_order_ops.while_loop
    "torch._higher_order_ops.cond.cond": ("pred", "true_fn", "false_fn", "operands"),
    "torch._higher_order_ops.while_loop.while_loop": ("cond_fn", "body_fn", "carried_inputs"),
}

__all__ = ["data_dependent_expression", "custom_op_without_fake_kernel", "is_cond_container_operands_refusal",
           "is_cond_dense_stride_refusal",
           "cond_call_locals", "while_loop_call_locals", "fake_device_mismatch", "two_devices",
           "is_data_dependent_failure",
           "is_real_tensor_under_fake_mode", "is_runtime_assert_failure", "blames_control_flow_capture",
           "uncapturable_branch_reason", "dynamo_explanation", "dynamo_user_code_frame",
           "dynamo_side_effect_sources", "is_data_dependent_branch"]

# "Could not guard on data-dependent expression Eq(u0, 1) (unhinted: Eq(u0, 1)). ..."
_DATA_DEPENDENT_EXPRESSION = re.compile(r"data-dependent expression (.+?) \(unhinted")

# a custom op (torch.library.custom_op) without register_fake, or a TORCH_LIBRARY op without a
# Meta kernel, called on fake tensors
_NO_FAKE_KERNEL = re.compile(r"no fake impl registered for <CustomOpDef\((\w+::\w+)\)>|"
                             r"(\w+::\w+)(?:\.\w+)?: attempted to run this operator with Meta tensors")

# a fake tensor refusing an operator whose tensors are on two devices (a RuntimeError before torch 2.14)
_FAKE_DEVICE_MISMATCH = re.compile(r"Unhandled FakeTensor Device Propagation for (\S+), found two different devices "
                                   r"([\w:]+), ([\w:]+)")  # (in dynamo's text the quote of the repr follows)

# an operator refusing tensors on two devices: fake tensors' and eager's check ("... but found at
# least two devices, cpu and meta!"), also in dynamo's explanation of the same refusal
_TWO_DEVICES = re.compile(r"found at least two devices,? (\S+?),? and (\S+?)!")

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
    return (found.group(1), found.group(2), found.group(3)) if found else None


def two_devices(error: BaseException) -> tuple[str, str] | None:
    """The two devices an operator refused to mix (``("cpu", "meta")``), from ``error``'s text or
    the text of ``fake_device_mismatch``'s older message, or None."""
    found = _TWO_DEVICES.search(str(error))
    if found:
        return found.group(1), found.group(2)
    older = fake_device_mismatch(error)
    return (older[1], older[2]) if older else None


def is_cond_container_operands_refusal(error: BaseException) -> bool:
    """Whether ``error`` is torch.cond refusing operands that hold a container."""
    return bool(_COND_CONTAINER_OPERANDS.search(str(error)))


# torch 2.10-2.13's cond, when a branch output's strides are not the plain running products of its
# sizes as far as the ShapeEnv can tell (Max(1, s) from a size that may be 0)
_COND_DENSE_STRIDES = re.compile(r"cond's output stride is not a simple accumulative multiplication of sizes")


def is_cond_dense_stride_refusal(error: BaseException) -> bool:
    """Whether ``error`` (or one it wraps) is torch.cond refusing a branch output it cannot tell dense."""
    seen: set[int] = set()
    current: Optional[BaseException] = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if _COND_DENSE_STRIDES.search(str(current)):
            return True
        current = current.__cause__ or current.__context__
    return False


def is_data_dependent_failure(error: BaseException) -> bool:
    """Whether ``error`` says a value read from data was needed: one of torch's types for it
    (``GuardOnDataDependentSymNode``, fake tensors' ``DataDependentOutputException``, told by
    name, as their modules are private and vary by release), or an error whose message keeps the
    words of one it wraps (dynamo's, functionalization's), whose type says nothing."""
    return "DataDependent" in type(error).__name__ or "data-dependent" in str(error).lower()


def is_real_tensor_under_fake_mode(error: BaseException) -> bool:
    """Whether ``error`` is a fake mode refusing a real tensor among an operator's inputs (an
    ``AssertionError``, the type of many other failures too: only its words tell this one)."""
    text = str(error)
    return "Please convert all Tensors to FakeTensors" in text or "non-Fake Tensor" in text


def is_runtime_assert_failure(error: BaseException) -> bool:
    """Whether ``error`` is a graph's runtime assert failing: ``aten._assert_scalar`` raises a
    plain ``RuntimeError`` with the message torch's runtime-assert pass wrote into the node
    (``Runtime assertion failed for expression u0 <= 10 on node 'le_1'``)."""
    return str(error).startswith("Runtime assertion failed")


def blames_control_flow_capture(error: BaseException) -> bool:
    """Whether ``error``'s message blames the capture of a higher-order operator (``torch.cond``,
    ``while_loop``) or dynamo, which torch's own operators use to capture their branches."""
    text = str(error).lower()
    return "higher order operator" in text or "dynamo" in text


_DEBUG_BOILERPLATE = ("Developer debug context", "For more details", "from user code", "Set TORCHDYNAMO_VERBOSE")


def uncapturable_branch_reason(error: BaseException) -> str:
    """The explanation torch gave for a branch or loop body it could not capture, on one line,
    without its wrapper sentence and debug boilerplate (at most 600 characters)."""
    text = str(error)
    if "Got graph break/error:" in text:
        text = text.split("Got graph break/error:", 1)[1]
    keep = []
    for line in text.strip().splitlines():
        if line.strip().startswith(_DEBUG_BOILERPLATE):
            break
        if line.strip():
            keep.append(line.strip())
    return " ".join(keep)[:600]


def dynamo_explanation(error: BaseException) -> str:
    """dynamo's own explanation of a refusal, without the user-code section (graphcap's ``where``
    says it) and the closing note on debug flags; continuation lines indented for a message."""
    text = re.split(r"\n\s*from user code:", str(error))[0]
    text = re.split(r"\n\s*Set TORCHDYNAMO_VERBOSE", text)[0]
    return "\n  ".join(line.rstrip() for line in text.strip().splitlines() if line.strip())


# dynamo's graph break at a Python branch on a tensor's value (`if x.sum() > 0:`); the older wording first
_DATA_DEPENDENT_BRANCH = re.compile(r"Dynamic control flow is not supported|Data-dependent branching")


def is_data_dependent_branch(error: BaseException) -> bool:
    """Whether ``error`` is dynamo refusing a Python ``if``/``while`` on a tensor's value."""
    return bool(_DATA_DEPENDENT_BRANCH.search(str(error)))


def dynamo_user_code_frame(error: BaseException, skip: str) -> Optional[str]:
    """The innermost frame (``File "...", line N, in f`` and its source line) that dynamo's message
    lists under ``from user code:``, leaving out frames that mention ``skip``; None without one.
    For errors that carry no ``real_stack``: the message is then the only record of the frame."""
    text = str(error)
    section = text.split("from user code:", 1)[-1] if "from user code:" in text else ""
    found = [f for f in re.findall(r"(File \"[^\n]+\n[^\n]+)", section) if skip not in f]
    return found[-1].rstrip() if found else None


def dynamo_side_effect_sources(error: BaseException) -> Optional[list[str]]:
    """The sources (``G['counter']``, ``L['self'].cache``) dynamo lists when it refuses (or, as a
    warning, reports) side effects it would have to replay after the graph; None when ``error`` is
    neither."""
    found = re.search(r"side effects happened.*?sources you can double check: (\[.*\])\s*$", str(error),
                      re.S | re.M)
    if not found:
        return None
    try:
        return [str(n) for n in ast.literal_eval(found.group(1))]
    except (ValueError, SyntaxError):
        return [found.group(1)]


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
