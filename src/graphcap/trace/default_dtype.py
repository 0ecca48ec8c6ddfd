"""Tensors forward made while it had changed torch's default dtype keep their traced dtype.

A factory operator called without ``dtype=`` (``torch.ones(3)``, ``torch.arange(0., 1.)``,
``torch.rand(2)``) makes its floating tensor in torch's default dtype *when it runs*. The
recorder writes the call as it was made, without a dtype, so a forward that switches the
default for a stretch (``torch.set_default_dtype(torch.float64)`` ... then back) records
``ones`` whose traced value is float64 but whose program, run later under the process's
float32 default, makes float32: the program's results differ from eager's and from its own
``meta['val']``, silently.

:func:`pin_default_dtypes` writes the traced dtype into such a call (``dtype=torch.float64``)
wherever the traced tensor's dtype is not the default dtype the export started with. A
program exported under a default it never changed is left as recorded (the calls follow the
caller's default, as torch.export's do), so ordinary programs read as before.

An operator whose floating result comes from integer or bool tensors alone (``arange(3) * 0.5``,
``int_tensor.sqrt()``) also takes its dtype from the default when it runs, and has no ``dtype=``
to write: its operands are cast to the traced dtype first (``_to_copy``), so it computes in that
dtype as eager did. Where that cannot be done (the only such operand selects, as ``where``'s
condition: ``torch.where(mask, 1, 0.5)``), the node is told in a warning naming the line, with
the fix (an explicit cast).

The capture runs this only when a torch call of the trace ran under another default dtype than the
export's starting one (``python_overrides.default_dtypes_seen``): other exports never reach it.
"""
from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch
import torch.fx

from ..torch_private.ops import OpOverload, schema_of
from ..user_frames import user_stacklevel

aten_to_copy = torch.ops.aten._to_copy.default
_COMPLEX_OF = {torch.float16: torch.complex32, torch.float32: torch.complex64, torch.float64: torch.complex128}


def _factory_with_dtype(target: object) -> bool:
    """An ATen operator that takes no tensor and has a ``dtype`` argument (``ones``, ``arange``,
    ``rand``, ``full``...): with ``dtype=None`` it makes the default dtype."""
    schema = schema_of(target)
    if schema is None:
        return False
    return "dtype" in [a.name for a in schema.arguments] and \
        not any("Tensor" in str(a.type) for a in schema.arguments)


def _explicit_dtype(node: torch.fx.Node) -> bool:
    """The call names a dtype (``x.to(torch.float64)`` gives it positionally)."""
    if node.kwargs.get("dtype") is not None:
        return True
    schema = schema_of(node.target)
    names = [a.name for a in schema.arguments] if schema is not None else []
    if "dtype" in names:
        i = names.index("dtype")
        return len(node.args) > i and node.args[i] is not None
    return False


def _tensor_inputs(node: torch.fx.Node) -> list[torch.Tensor]:
    return [inp.meta["val"] for inp in node.all_input_nodes if isinstance(inp.meta.get("val"), torch.Tensor)]


# arguments that select rather than compute: a cast would change what they mean
_SELECTORS = {"condition", "mask", "index", "indices"}


def _cast_operands(graph: torch.fx.Graph, node: torch.fx.Node, dtype: torch.dtype,
                   entry_default: torch.dtype) -> bool:
    """Cast the integer and bool operands of ``node`` (``arange(3) * 0.5``, ``int_t.sqrt()``) to the
    ``dtype`` its traced result has, so that the operator computes in it as eager did, whatever the
    caller's default dtype. Kept only when the operator, run on the cast operands under the
    export's starting default, gives that dtype and shape; otherwise nothing changes (False)."""
    schema = schema_of(node.target)
    if schema is None:
        return False
    positional = [a.name for a in schema.arguments if not a.kwarg_only]
    operands = [(i, positional[i] if i < len(positional) else "", a) for i, a in enumerate(node.args)] + \
        [(k, k, a) for k, a in node.kwargs.items()]
    to_cast = [(key, a) for key, arg_name, a in operands
               if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)
               and arg_name not in _SELECTORS]
    if not to_cast:
        return False
    cast_vals = {key: a.meta["val"].to(dtype) for key, a in to_cast}
    args = [cast_vals.get(i, a.meta.get("val") if isinstance(a, torch.fx.Node) else a)
            for i, a in enumerate(node.args)]
    kwargs = {k: cast_vals.get(k, a.meta.get("val") if isinstance(a, torch.fx.Node) else a)
              for k, a in node.kwargs.items()}
    try:
        with kept(entry_default):
            result = node.target(*args, **kwargs)
    except Exception:  # the operator refuses the cast operands: tell, do not rewrite
        return False
    val = node.meta["val"]
    if not isinstance(result, torch.Tensor) or result.dtype != val.dtype or result.shape != val.shape:
        return False
    new_args, new_kwargs = list(node.args), dict(node.kwargs)
    for key, operand in to_cast:
        with graph.inserting_before(node):
            cast = graph.call_function(aten_to_copy, (operand,), {"dtype": dtype})
        cast.meta.update({k: node.meta[k] for k in ("stack_trace", "nn_module_stack", "source_fn_stack",
                                                     "torch_fn") if k in node.meta})
        cast.meta["val"] = cast_vals[key]
        if isinstance(key, int):
            new_args[key] = cast
        else:
            new_kwargs[key] = cast
    node.args, node.kwargs = tuple(new_args), new_kwargs
    return True


@contextlib.contextmanager
def kept(during: torch.dtype | None = None) -> Iterator[None]:
    """torch's default dtype is what it was on entry once the block ends, whichever way it ends;
    ``during`` (if given) is the default inside the block.

    torch has one default dtype for the whole process (no per-thread or scoped setting), so a
    block that must run under another one sets it and puts it back here. The export runs the
    user's forward inside this: a ``torch.set_default_dtype`` it never switches back, or one a
    failure cuts short, stays out of the caller's process (the program does not switch it).
    """
    old = torch.get_default_dtype()
    if during is not None:
        torch.set_default_dtype(during)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _line_of(node: torch.fx.Node) -> str:
    trace = (node.meta.get("stack_trace") or "").strip().splitlines()
    return " ".join(line.strip() for line in trace[-2:]) if trace else f"graph node {node.name}"


def pin_default_dtypes(gm: torch.fx.GraphModule, entry_default: torch.dtype, name: str) -> None:
    """Write the traced dtype into factory calls that made it from a default dtype forward set;
    warn about the other nodes whose dtype came from that default. In place, every subgraph."""
    floating_default = entry_default
    complex_default = _COMPLEX_OF.get(entry_default)
    promoted: list[torch.fx.Node] = []
    for sub in gm.modules():
        if not isinstance(sub, torch.fx.GraphModule):
            continue
        changed = False
        for node in sub.graph.nodes:
            if node.op != "call_function" or not isinstance(node.target, OpOverload):
                continue
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor) or _explicit_dtype(node):
                continue
            dtype = val.dtype
            if not (dtype.is_floating_point and dtype != floating_default
                    or dtype.is_complex and dtype != complex_default):
                continue
            if _factory_with_dtype(node.target):
                node.kwargs = {**node.kwargs, "dtype": dtype}
                changed = True
            elif dtype.is_floating_point:
                inputs = _tensor_inputs(node)
                if inputs and not any(t.dtype.is_floating_point or t.dtype.is_complex for t in inputs):
                    if _cast_operands(sub.graph, node, dtype, entry_default):
                        changed = True
                    else:
                        promoted.append(node)
        if changed:
            sub.recompile()
    if promoted:
        lines = list(dict.fromkeys(_line_of(n) for n in promoted))
        warnings.warn(
            f"{name}'s forward changed torch's default dtype (torch.set_default_dtype) while it was "
            f"traced, and computed a {promoted[0].meta['val'].dtype} result from integer or bool "
            f"tensors ({', '.join(str(n.target.overloadpacket) for n in promoted[:3])}) at: "
            f"{'; '.join(lines[:3])}. The exported program does not change the default dtype: when it "
            f"runs, those operators give the caller's default dtype ({entry_default} at export), not "
            f"the traced one. Cast explicitly in forward (e.g. `torch.arange(n).to(torch.float64) * 0.5`) "
            f"so the program computes the dtype eager does.", UserWarning, stacklevel=user_stacklevel())
