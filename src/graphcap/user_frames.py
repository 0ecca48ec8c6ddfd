"""Whose code a frame is: the user's, graphcap's or torch's; and the user's line to name in a message.

Errors say where in the user's program they come from: the innermost frame of
user code (outside torch, graphcap and the standard helpers the tracer goes
through), printed by :func:`describe_frame`. :func:`raised_internally` tells a
bug of graphcap's or of torch's tracing machinery from an error the user's code
or an operator's own input check raised.
"""
from __future__ import annotations

import os
import sys
import traceback
from types import TracebackType
from typing import Optional

import torch

# torch's and graphcap's frames are told by the directories the packages were imported from,
# not by a path part: a user's project in a folder named "graphcap" or "torch" (a clone of this
# repository, for one) is user code, and its lines belong in messages.
ENGINE_PACKAGE_DIRS = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(__file__) + os.sep)
_INTERNAL_PATH_PARTS = ENGINE_PACKAGE_DIRS + ("/site-packages/torch/", "<frozen ", "/contextlib.py",
                                               "/functools.py")


# the case catalogue's programs ship inside the package but are user code
_USER_PROGRAM_DIR = os.path.join(os.path.dirname(__file__), "cases") + os.sep


def is_user_file(filename: str) -> bool:
    """Whether code in ``filename`` is the user's: outside torch, graphcap and the standard
    helpers the tracer goes through (library code such as transformers counts as the user's)."""
    return filename.startswith(_USER_PROGRAM_DIR) or not any(p in filename for p in _INTERNAL_PATH_PARTS)


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` that points a warning at the innermost frame of user
    code calling in (the user's ``export`` call), however deep in graphcap it is raised."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        level, frame = level + 1, frame.f_back
    return level


def user_traceback_entry(tb: Optional[TracebackType]) -> Optional[TracebackType]:
    """The innermost entry of a traceback whose frame belongs to user code (its live
    frame, ``.tb_frame``, holds the user's locals).

    User code is anything outside torch, graphcap and the standard helpers the
    tracer goes through; library code such as transformers counts as user code,
    since that is where the line the user can change (or report) lives.
    """
    found = None
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            found = tb
        tb = tb.tb_next
    return found


def user_frame(tb: Optional[TracebackType]) -> Optional[traceback.FrameSummary]:
    """The innermost frame of a traceback that belongs to user code (file, line, source)."""
    entry = user_traceback_entry(tb)
    return traceback.extract_tb(entry, limit=1)[0] if entry is not None else None


_GRAPHCAP_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# graphcap files whose frames stand for the user's own call: the builtins it
# replaces while tracing and the attribute reads of tensor subclasses it records
# re-raise what the user's own call raised
GRAPHCAP_TRANSPARENT_FILES = tuple("trace" + os.sep + name for name in ("python_overrides.py", "subclass_access.py"))
# torch's tracing machinery (mode stacks, tracers, fake tensors, operator
# dispatch, control-flow operators), as opposed to the operators' own input checks
# (meta kernels, references, decompositions, nn.functional), which speak for the user
_TORCH_MACHINERY = ("/torch/utils/_python_dispatch.py", "/torch/_ops.py", "/torch/fx/", "/torch/_subclasses/",
                    "/torch/_dynamo/", "/torch/_higher_order_ops/", "/torch/_guards.py", "/torch/_functorch/",
                    "/torch/utils/_pytree.py", "/torch/_library/")
# what a broken invariant or a bug looks like (torch checks a user's values with
# torch._check and friends, which raise RuntimeError/ValueError/IndexError)
_BUG_TYPES = (AssertionError, AttributeError, NameError, UnboundLocalError)
# the hooks of torch's mode classes, through which graphcap's modes call each operator
_MODE_HOOKS = ("__torch_function__", "__torch_dispatch__")


def raised_internally(e: BaseException) -> bool:
    """Whether ``e`` comes from graphcap itself or from torch's tracing machinery.

    Decided by the innermost frame of its traceback: graphcap's own code
    (whatever the type), or torch's tracing machinery raising a type that means
    a broken invariant (an assertion, a missing attribute). An error raised in
    the user's code, or by an operator refusing its arguments, is the user's.
    """
    frames = traceback.extract_tb(e.__traceback__) if e.__traceback__ is not None else []
    if not frames:
        return False
    path = os.path.abspath(frames[-1].filename)
    if path.startswith(_GRAPHCAP_DIR):
        if path.endswith(GRAPHCAP_TRANSPARENT_FILES):
            return False
        # graphcap's torch-function and dispatch modes pass each call on to the function itself:
        # what that call raises (``x.numpy()`` refusing a fake tensor) is judged as torch's
        # machinery is, by its type
        if frames[-1].name in _MODE_HOOKS:
            return isinstance(e, _BUG_TYPES)
        return True
    posix = path.replace(os.sep, "/")
    return isinstance(e, _BUG_TYPES) and any(part in posix for part in _TORCH_MACHINERY)


def describe_frame(frame: Optional[traceback.FrameSummary]) -> Optional[str]:
    """``frame`` as a traceback prints it (file, line, function, then the source line), or None."""
    if frame is None:
        return None
    code = f"\n    {frame.line.strip()}" if frame.line else ""
    return f'File "{frame.filename}", line {frame.lineno}, in {frame.name}{code}'
