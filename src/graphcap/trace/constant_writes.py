"""forward writing in place to a tensor that is neither state nor input: refused before the write.

A program's mutable state is its registered parameters and buffers (and its
inputs); any other tensor forward reaches — a plain tensor attribute, one held
by a plain Python object (``self.holder.t``) or a list attribute
(``self.cache[0]``), a global — becomes a lifted constant, which a program
may not change (``run_decompositions`` refuses a write to one, as torch.export's
does). While tracing, such a tensor is still the user's real tensor, and
torch's fake mode runs an in-place operator whose tensor arguments are all real
on the real tensors: exporting would silently change the user's model (torch.export
does). So export stops at the write, before it happens, and names the tensor,
the line and the fix.
"""
from __future__ import annotations

import contextlib
import re
import sys
import traceback
from typing import Any, Iterator, Optional

import torch
import torch.fx.traceback as fx_traceback

from ..errors import ConstantMutationError
from ..signature import ExportGraphSignature, InputKind
from ..torch_private.fake import FakeTensorMode, watch_real_tensor_writes
from ..user_frames import describe_frame, is_user_file
from .mutations import first_writer, written_placeholders

_MAX_DEPTH = 6


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    """(path suffix, value) of what ``obj`` holds: attributes, list/tuple items, dict entries."""
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield f"[{i}]", v
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield f"[{k!r}]", v
    elif isinstance(obj, torch.nn.Module):
        for k, v in vars(obj).items():
            if k in ("_parameters", "_buffers", "_modules"):
                yield from ((f".{name}", value) for name, value in v.items())
            elif not k.startswith("_"):
                yield f".{k}", v
    elif hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.Tensor)) and not callable(obj):
        for k, v in vars(obj).items():
            yield f".{k}", v


def find_tensor_path(root: Optional[Any], tensor: torch.Tensor, base: str = "self") -> Optional[str]:
    """Where ``root`` holds ``tensor`` (``self.holder.t``, ``self.cache[0]``), breadth first; or None."""
    if root is None:
        return None
    seen = {id(root)}
    level = [(base, root)]
    for _ in range(_MAX_DEPTH):
        following = []
        for path, obj in level:
            for suffix, value in _children(obj):
                if value is tensor:
                    return path + suffix
                if id(value) in seen or isinstance(value, (torch.Tensor, str, bytes, int, float)):
                    continue
                seen.add(id(value))
                following.append((path + suffix, value))
        level = following
    return None


def _user_frame() -> Optional[Any]:
    """The innermost frame of user code on the stack (the line that writes)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if is_user_file(name) and not name.startswith("<"):  # not code generated at run time (an fx graph's)
            return frame
        frame = frame.f_back
    return None


def _replayed_line() -> Optional[str]:
    """The user's line of the graph node being replayed (strict mode runs dynamo's graph), or None."""
    trace = (fx_traceback.get_current_meta() or {}).get("stack_trace")
    lines = [line for line in (trace or "").rstrip().splitlines() if line.strip()]
    return "\n".join(lines[-2:]).strip() if lines else None


def _refusal(tensor: torch.Tensor, path: Optional[str], op_name: str, where: Optional[str]) -> ConstantMutationError:
    """The error for a write to ``tensor`` (held at ``path``, when known) by ``op_name`` at ``where``."""
    described = path or f"a tensor of shape {list(tensor.shape)} that is neither an input nor a " \
                        f"parameter or buffer of the module (held by an object forward reached)"
    if path is not None and path.startswith("self"):
        held, name = path, re.sub(r"\W+", "_", path[len("self"):]).strip("_")
    elif path is not None:  # a global
        held = name = path.rsplit(" ", 1)[-1]
    else:
        held, name = "tensor", "state"
    return ConstantMutationError(
        f"forward writes in place ({op_name}) to {described}. It is not a parameter, buffer or input, "
        f"so the program can only hold it as a constant, which may not change; and the program (and "
        f"exporting itself) would change your model's own tensor.",
        where=where,
        fix=f"If the value must persist across calls, register it as a buffer of the module "
            f"(in __init__: self.register_buffer({name!r}, {held}), and write self.{name} in forward: "
            f"buffer updates are the program's state); otherwise write to a copy inside forward "
            f"({name} = {held}.clone()).")


@contextlib.contextmanager
def refusing_constant_writes(fake_mode: FakeTensorMode, root: Optional[torch.nn.Module]) -> Iterator[None]:
    """Within the block (the trace), an in-place write to a real tensor raises ConstantMutationError,
    before the write."""

    def refuse(op: Any, tensors: list) -> None:
        frame = _user_frame()
        tensor = tensors[0]
        path = find_tensor_path(root, tensor)
        if path is None and frame is not None:
            name = next((k for k, v in frame.f_globals.items() if v is tensor), None)
            path = f"the global {name}" if name is not None else None
        # a replayed graph's node (strict mode runs dynamo's graph) knows the user's line; otherwise
        # the user's frame on the stack is the line that writes
        where = _replayed_line() or (describe_frame(traceback.extract_stack(frame, limit=1)[0])
                                     if frame is not None else None)
        raise _refusal(tensor, path, getattr(op, "__name__", str(op)), where)

    with watch_real_tensor_writes(fake_mode, refuse):
        yield


def refuse_written_constants(gm: torch.fx.GraphModule, signature: ExportGraphSignature,
                             constants: dict[str, Any], root: Optional[torch.nn.Module]) -> None:
    """Raise ConstantMutationError if the lifted graph writes a constant input: through a view
    (``self.holder.t[0].add_(1)``), which the fake mode does not run on the real tensor, so the
    trace left it as it was; but the program holds that very tensor and would write it each run."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    kinds = {node: spec for node, spec in zip(placeholders, signature.input_specs)}
    for node in written_placeholders(gm.graph):
        spec = kinds.get(node)
        if spec is None or spec.kind is not InputKind.CONSTANT_TENSOR:
            continue
        tensor = constants.get(spec.target)
        writer = first_writer(gm.graph, node)
        trace = (writer.meta.get("stack_trace") or "").rstrip().splitlines() if writer is not None else []
        where = "\n".join(line for line in trace[-2:]).strip() or f"graph input {node.name}"
        op_name = getattr(writer.target, "__name__", str(writer.target)) if writer is not None else "in place"
        path = find_tensor_path(root, tensor) if isinstance(tensor, torch.Tensor) else None
        raise _refusal(tensor if isinstance(tensor, torch.Tensor) else torch.empty(0), path, op_name, where)
