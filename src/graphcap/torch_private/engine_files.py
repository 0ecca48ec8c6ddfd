"""The source files of torch's tracing engine, whose frames never name a user's line.

torch keeps this set in ``symbolic_shapes.uninteresting_files()``; graphcap
skips the same frames when it records ``stack_trace`` and when it finds the
user's line of a shape guard. Calling torch's function costs a cold export
several seconds: to name a file it *imports* its module, among them
torch.export's own tracing module, which pulls in AOTAutograd, Inductor's code cache and
networkx, none of which graphcap runs. This builds the same set from paths
under torch's directory instead; modules that are loaded anyway (dynamo's
own list, whose package make_fx imports) are asked directly.
tests/unit/test_engine_files.py checks that the two sets are equal. torch 2.10's list
lacks the files of ``torch/_higher_order_ops`` (2.11 added them); graphcap skips them on
every line, so a branch of ``torch.cond`` names the user's line on 2.10 as on later lines.
"""
from __future__ import annotations

import functools
import glob
import os

import torch

RELIES_ON = {
    "torch.fx.experimental.symbolic_shapes.uninteresting_files": (),
    "torch._dynamo.guards.uninteresting_files": (),
    "torch._higher_order_ops": None,
}

_TORCH_DIR = os.path.dirname(torch.__file__)

# Files torch's list names by module, as paths under torch's directory.
_ENGINE_MODULE_FILES = (
    "fx/experimental/symbolic_shapes.py",
    "export/_trace.py",
    "fx/experimental/recording.py",
    "fx/experimental/sym_node.py",
    "fx/interpreter.py",
    "fx/_symbolic_trace.py",
    "__init__.py",
    "_compile.py",
    "_dynamo/eval_frame.py",
    "_inductor/sizevars.py",
    "_library/custom_ops.py",
    "_library/fake_impl.py",
    "_subclasses/meta_utils.py",
    "_subclasses/fake_tensor.py",
    "_logging/_internal.py",
    "_logging/structured.py",
)


@functools.lru_cache(None)
def engine_files() -> frozenset:
    """Paths of torch's engine files (and ``"<string>"``), as torch's ``uninteresting_files()``."""
    from torch._dynamo.guards import uninteresting_files as dynamo_files

    files = {os.path.join(_TORCH_DIR, *rel.split("/")) for rel in _ENGINE_MODULE_FILES}
    files.update(glob.glob(os.path.join(_TORCH_DIR, "_higher_order_ops", "*.py")))
    return frozenset(files | dynamo_files() | {"<string>"})
