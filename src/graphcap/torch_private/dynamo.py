"""torch's dynamo front end, where graphcap meets it: error types and the compiler flags.

- ``UserError`` / ``UserErrorType`` (``torch._dynamo.exc``): torch.export raises
  these for a user mistake; graphcap's errors derive from them too, so that
  ``except`` clauses written for torch keep catching graphcap's.
- ``torch.compiler._is_compiling_flag`` / ``_is_exporting_flag``: what the
  public ``torch.compiler.is_compiling()`` / ``is_exporting()`` read outside
  dynamo; libraries pick export-friendly paths when they answer True.
- The ``custom`` node-metadata keys ``torch._dynamo.disable`` leaves on nodes
  recorded under ``preserve_node_meta`` (a naming convention, not an object:
  the surface test cannot check it; a change shows as extra ``custom`` metadata).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch._dynamo.exc import UserError, UserErrorType

RELIES_ON = {
    "torch._dynamo.exc.UserError": ("error_type", "msg"),
    "torch._dynamo.exc.UserErrorType": None,
    "torch.compiler._is_compiling_flag": None,
    "torch.compiler._is_exporting_flag": None,
}

# Key of the disabled method's name, and the prefix of all of dynamo's keys, in ``node.meta["custom"]``.
DISABLE_METHOD_META_KEY = "_torchdynamo_disable_method"
DYNAMO_META_KEY_PREFIX = "_torchdynamo"

__all__ = ["UserError", "UserErrorType", "exporting_flags_set", "DISABLE_METHOD_META_KEY", "DYNAMO_META_KEY_PREFIX"]


@contextlib.contextmanager
def exporting_flags_set() -> Iterator[None]:
    """Within the block ``torch.compiler.is_compiling()`` and ``is_exporting()`` answer True; restored after.

    Relies on the module globals ``torch.compiler._is_compiling_flag`` and
    ``torch.compiler._is_exporting_flag``, which those functions read.
    """
    saved = torch.compiler._is_compiling_flag, torch.compiler._is_exporting_flag
    torch.compiler._is_compiling_flag = torch.compiler._is_exporting_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag, torch.compiler._is_exporting_flag = saved
