"""forward writing in place to a tensor that is neither state nor input: refused at export.

A program's mutable state is its registered parameters and buffers (and its
inputs); any other tensor forward reaches — a plain tensor attribute, one held
by a plain Python object (``self.holder.t``), a list or dict attribute
(``self.cache[0]``), a global — becomes a lifted constant, which a program
may not change (``run_decompositions`` refuses a write to one, as torch.export's
does), and which the program holds as the user's very tensor: running it
would write the user's model. So export refuses a graph that writes a constant,
naming the tensor, the user's line and the fix. (While tracing, such a write
went to a fake, not to the user's tensor: the tracing fake mode converts a real
tensor an operator writes first, see ``torch_private.fake.tracing_fake_mode``;
torch.export writes the user's tensor there.)
"""
from __future__ import annotations

import re
from typing import Any, Iterator, Optional

import torch

from ..errors import ConstantMutationError
from ..signature import ExportGraphSignature, InputKind
from ..torch_private.modules import REGISTRY_FIELDS, registry_view
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
            if k in REGISTRY_FIELDS:
                yield from ((f".{name}", value) for name, value in registry_view(v).items())
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


def _global_name(root: Optional[torch.nn.Module], tensor: torch.Tensor) -> Optional[str]:
    """``"the global NAME"`` when a module's forward reads ``tensor`` as a global of its file, or None."""
    for mod in root.modules() if isinstance(root, torch.nn.Module) else ():
        names = getattr(type(mod).forward, "__globals__", {})
        name = next((k for k, v in names.items() if v is tensor), None)
        if name is not None:
            return f"the global {name}"
    return None


def _refusal(tensor: torch.Tensor, path: Optional[str], op_name: str, where: Optional[str]) -> ConstantMutationError:
    """The error for a write to ``tensor`` (held at ``path``, when known) by ``op_name`` at ``where``."""
    if path is not None and path.startswith("self."):
        shown = path[len("self."):]
    elif path is not None:
        shown = path.replace("the global ", "global ")
    else:
        shown = f"tensor of shape {list(tensor.shape)} (held by an object forward reached)"
    if path is not None and path.startswith("self"):
        held, name = path, re.sub(r"\W+", "_", path[len("self"):]).strip("_")
    elif path is not None:  # a global
        held = name = path.rsplit(" ", 1)[-1]
    else:
        held, name = "tensor", "state"
    return ConstantMutationError(
        f"Constant {shown} is written in place by forward ({op_name}), but it is not a parameter, buffer "
        f"or input: the program can only hold it as a constant, which may not change, and running the "
        f"program would change your model's own tensor (a constant is that very tensor).",
        where=where,
        fix=f"If the value must persist across calls, register it as a buffer of the module "
            f"(in __init__: self.register_buffer({name!r}, {held}), and write self.{name} in forward: "
            f"buffer updates are the program's state); otherwise write to a copy inside forward "
            f"({name} = {held}.clone()).")


def refuse_written_constants(gm: torch.fx.GraphModule, signature: ExportGraphSignature,
                             constants: dict[str, Any], root: Optional[torch.nn.Module]) -> None:
    """Raise ConstantMutationError if the lifted graph writes a constant input (itself or through a
    view): see the module docstring."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    kinds = {node: spec for node, spec in zip(placeholders, signature.input_specs)}
    for node in written_placeholders(gm.graph):
        spec = kinds.get(node)
        if spec is None or spec.kind is not InputKind.CONSTANT_TENSOR:
            continue
        tensor = constants.get(spec.target or "")
        writer = first_writer(gm.graph, node)
        trace = (writer.meta.get("stack_trace") or "").rstrip().splitlines() if writer is not None else []
        where = "\n".join(line for line in trace[-2:]).strip() or f"graph input {node.name}"
        op_name = getattr(writer.target, "__name__", str(writer.target)) if writer is not None else "in place"
        path = None
        if isinstance(tensor, torch.Tensor):
            path = find_tensor_path(root, tensor) or _global_name(root, tensor)
        raise _refusal(tensor if isinstance(tensor, torch.Tensor) else torch.empty(0), path, op_name, where)
