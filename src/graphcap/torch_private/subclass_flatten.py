"""The private torch names :mod:`graphcap.passes.subclass_flatten` reaches.

Whether a tensor follows the traceable-wrapper-subclass protocol
(``__tensor_flatten__`` / ``__tensor_unflatten__`` on a wrapper made by
``_make_wrapper_subclass``) is decided by torch in a private module; graphcap
asks it there, through this one function, so that a torch release that moves
the check breaks one named place.
"""
from __future__ import annotations

from typing import Any

from torch.utils import _python_dispatch

RELIES_ON = {
    "torch.utils._python_dispatch.is_traceable_wrapper_subclass": ("t",),
}


def is_traceable_wrapper_subclass(value: Any) -> bool:
    """True for a tensor subclass instance that can be split into inner tensors and rebuilt."""
    return bool(_python_dispatch.is_traceable_wrapper_subclass(value))
