"""ExportedProgram → program.json (a plain dict) and tensor payloads.

Everything is written as data: operators by qualified name and overload with
their schema, Python callables by name from a closed table, symbolic sizes as
expression strings over the symbols listed (with their assumptions, ranges
and example values) in the file's symbol table, and control-flow subgraphs
(GraphModules reached by ``get_attr``) nested under the graph that uses them.
What cannot be written this way is refused with a ``SerializationError``
naming the node or value, at save time rather than at load time.
"""
from __future__ import annotations

import warnings
from typing import Any, Optional

import sympy
import torch
import torch.fx

from .. import auto_flatten
from ..errors import SerializationError
from ..graph_arguments import (
    ConstantArgument,
    SymBoolArgument,
    SymFloatArgument,
    SymIntArgument,
    TensorArgument,
)
from ..node_facts import operand_sequences_as
from ..signature import ExportGraphSignature, ModuleCallEntry, call_graph_of, call_spec_of
from ..torch_private.dispatch import is_traceable_wrapper_subclass
from ..torch_private.ops import HigherOrderOperator, OpOverload, overload_name, schema_of
from ..torch_private.shapes import example_values, symbol_ranges
from ..torch_private.symbolic import int_oo, symbol_assumptions
from ..trace.source_fns import name_in_file
from . import schema
from .binding_paths import encode_bindings
from .exprs import expr_to_str
from .pytree_specs import spec_to_json
from .tensors import encode_subclass_context, subclass_name
from .values import Unencodable, encode_value


def python_targets() -> dict[str, Any]:
    """The non-operator callables a graph may call, by stable name."""
    from ..ir_checks import ALLOWED_PY_TARGETS
    return {callable_name(fn): fn for fn in ALLOWED_PY_TARGETS}


def callable_name(fn: Any) -> str:
    return f"{getattr(fn, '__module__', None) or 'builtins'}.{getattr(fn, '__qualname__', fn.__name__)}"


def op_key(op: OpOverload) -> str:
    return f"{schema_of(op).name}.{overload_name(op)}"


class _Writer:
    def __init__(self, ep: Any) -> None:
        self.ep = ep
        self.operators: dict[str, str] = {}
        self.symbols: dict[str, sympy.Symbol] = {}
        self._expr_text: dict[sympy.Basic, str] = {}  # an expression -> its text, written once
        self.shape_envs: list[Any] = []
        self.py_targets = {fn: name for name, fn in python_targets().items()}

    # -- symbolic values ------------------------------------------------------
    def expr(self, e: Any) -> Any:
        if isinstance(e, (int, sympy.Integer)) or (isinstance(e, sympy.Basic) and e.is_Integer):
            return int(e)
        text = self._expr_text.get(e) if isinstance(e, sympy.Basic) else None
        if text is not None:  # a deep program writes a few expressions tens of thousands of times
            return text
        for sym in getattr(e, "free_symbols", ()):
            self.symbols.setdefault(str(sym), sym)
        text = expr_to_str(e)
        if isinstance(e, sympy.Basic):
            self._expr_text[e] = text
        return text

    def sym(self, s: Any) -> Any:
        node = s.node
        env = getattr(node, "shape_env", None)
        if env is not None and all(env is not x for x in self.shape_envs):
            self.shape_envs.append(env)
        e = node.expr
        if isinstance(s, torch.SymInt):
            return e if isinstance(e, int) else self.expr(e)
        return self.expr(e)

    def tensor_meta(self, t: torch.Tensor, depth: int = 0) -> dict[str, Any]:
        def dim(x: Any) -> Any:
            return self.sym(x) if isinstance(x, (torch.SymInt, torch.SymFloat)) else int(x)
        meta = {"shape": [dim(x) for x in t.shape], "stride": [dim(x) for x in t.stride()],
                "offset": dim(t.storage_offset()), "dtype": str(t.dtype), "device": str(t.device),
                "requires_grad": bool(t.requires_grad)}
        if is_traceable_wrapper_subclass(t):
            meta["subclass"] = self.subclass_meta(t, depth)
        return meta

    def subclass_meta(self, t: torch.Tensor, depth: int) -> dict[str, Any]:
        """A fake subclass value (a subclass parameter's placeholder): class, context, inner metadata."""
        cls = type(t)
        if "<locals>" in cls.__qualname__ or depth > 16:
            raise SerializationError(
                f"A value of the graph is a {cls.__qualname__}, a tensor subclass defined inside a function "
                f"(or nested too deeply); a loading process could not find the class by its name.",
                where="node metadata", fix=f"Define {cls.__name__} at the top level of a module.")
        attrs, ctx = t.__tensor_flatten__()  # type: ignore[attr-defined]
        try:
            context = encode_subclass_context(ctx)
        except Unencodable as e:
            raise SerializationError(
                f"A value of the graph is a {cls.__qualname__} whose __tensor_flatten__ context is {e}; the "
                f".pt2 format stores plain values, enum members and dataclasses of these only.",
                where="node metadata",
                fix=f"Make {cls.__name__}.__tensor_flatten__ return a context of plain values.") from None
        return {"class": subclass_name(cls), "context": context,
                "inner": {attr: self.tensor_meta(getattr(t, attr), depth + 1) for attr in attrs}}

    def symbolic(self, x: Any) -> Any:
        """``{"symint"|"symfloat"|"symbool": expression}`` for a symbolic scalar, else None."""
        for kind, cls in (("symint", torch.SymInt), ("symfloat", torch.SymFloat), ("symbool", torch.SymBool)):
            if isinstance(x, cls):
                return {kind: self.sym(x)}
        return None

    def val(self, v: Any) -> Any:
        def extra(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return {"tensor": self.tensor_meta(x)}
            sym = self.symbolic(x)
            return NotImplemented if sym is None else sym
        return encode_value(v, extra)

    # -- graphs ---------------------------------------------------------------
    def operator(self, t: Any) -> Any:
        """``{"op": key}`` (schema recorded) or ``{"hop": name}`` for an operator, else None."""
        if isinstance(t, OpOverload):
            key = op_key(t)
            self.operators[key] = str(schema_of(t))
            return {"op": key}
        if isinstance(t, HigherOrderOperator):
            return {"hop": t.name()}  # type: ignore[no-untyped-call]  # (torch's method is unannotated)
        return None

    def target(self, node: torch.fx.Node) -> Any:
        t = node.target
        op = self.operator(t)
        if op is not None:
            return op
        try:
            if t in self.py_targets:
                return {"python": self.py_targets[t]}
        except TypeError:
            pass
        raise SerializationError(
            f"Node {node.name} calls {t!r}, which the .pt2 format cannot name: only operator "
            f"overloads (torch.ops.<namespace>.<op>.<overload>), higher-order operators and "
            f"graphcap's table of Python callables are written.", where=f"node {node.name}",
            fix="Register the computation as a custom operator with torch.library.custom_op.")

    def arg(self, a: Any, node: torch.fx.Node) -> Any:
        def extra(x: Any) -> Any:
            if isinstance(x, torch.fx.Node):
                return {"node": x.name}
            named = self.symbolic(x) or self.operator(x)
            return NotImplemented if named is None else named
        try:
            return encode_value(a, extra)
        except Unencodable as e:
            raise SerializationError(
                f"An argument of node {node.name} ({node.target}) is {e}, which the .pt2 format "
                f"cannot write.", where=f"node {node.name}",
                fix="Tensors must be graph inputs (lifted constants), not literal arguments; other "
                    "objects must be plain values.") from None

    def meta(self, node: torch.fx.Node) -> dict[str, Any]:
        m = node.meta
        out: dict[str, Any] = {}
        if "val" in m:
            try:
                out["val"] = self.val(m["val"])
            except Unencodable as e:
                raise SerializationError(
                    f"The value of node {node.name} (meta['val']) is {e}, which the .pt2 format "
                    f"cannot describe.", where=f"node {node.name}",
                    fix="Report this as a graphcap bug: every value in an exported graph should be a "
                        "tensor, a symbolic size or a plain value.") from None
        if "stack_trace" in m:
            out["stack_trace"] = m["stack_trace"] if isinstance(m["stack_trace"], str) else None
        if "nn_module_stack" in m:
            out["nn_module_stack"] = [[str(k), str(v[0]), _type_str(v[1])]
                                      for k, v in (m["nn_module_stack"] or {}).items()]
        if "source_fn_stack" in m:
            out["source_fn_stack"] = [[str(a), name_in_file(b)] for a, b in (m["source_fn_stack"] or [])]
        if isinstance(m.get("torch_fn"), tuple) and len(m["torch_fn"]) == 2:
            out["torch_fn"] = [str(m["torch_fn"][0]), str(m["torch_fn"][1])]
        if "tensor_meta" in m:
            out["tensor_meta"] = True
        if m.get("unbacked_bindings"):
            out["unbacked_bindings"] = encode_bindings(m["unbacked_bindings"], self.expr, node.name)
        custom = _custom(m.get("custom"), f"node {node.name}")
        if custom is not None:
            out["custom"] = custom
        return out

    def graph_module(self, gm: torch.fx.GraphModule, path: str) -> dict[str, Any]:
        nodes = []
        subgraphs: dict[str, Any] = {}
        for node in gm.graph.nodes:
            entry: dict[str, Any] = {"name": node.name, "op": node.op}
            if node.op == "call_function":
                _refuse_triton_kernel_call(node, path)
                entry["target"] = self.target(node)
            elif node.op == "get_attr":
                sub = getattr(gm, node.target, None) if isinstance(node.target, str) else None
                if not isinstance(sub, torch.fx.GraphModule):
                    _refuse_subclass_construction(node, path)
                    raise SerializationError(
                        f"Node {node.name} reads the attribute {node.target!r}, which is not a "
                        f"subgraph; state must be lifted to a graph input.", where=f"{path}node {node.name}",
                        fix="Report this as a graphcap bug (the IR verifier should have caught it).")
                if node.target not in subgraphs:
                    subgraphs[node.target] = self.graph_module(sub, f"{path}{node.target}.")
                entry["target"] = node.target
            elif node.op in ("placeholder", "output"):
                entry["target"] = node.target if isinstance(node.target, str) else node.op
            else:
                raise SerializationError(
                    f"Node {node.name} is a {node.op} node, which the IR does not contain.",
                    where=f"{path}node {node.name}", fix="Only call_function, get_attr, placeholder "
                                                         "and output nodes can be saved.")
            args, kwargs = operand_sequences_as(tuple, node.target, node.args, dict(node.kwargs))
            entry["args"] = [self.arg(a, node) for a in args]
            entry["kwargs"] = {k: self.arg(v, node) for k, v in kwargs.items()}
            entry["meta"] = self.meta(node)
            nodes.append(entry)
        return {"nodes": nodes, "subgraphs": subgraphs}

    # -- signature and structure -------------------------------------------------
    def argument(self, a: Any) -> Any:
        if isinstance(a, TensorArgument):
            return {"tensor": a.name}
        if isinstance(a, SymIntArgument):
            return {"symint": a.name}
        if isinstance(a, SymFloatArgument):
            return {"symfloat": a.name}
        if isinstance(a, SymBoolArgument):
            return {"symbool": a.name}
        if isinstance(a, ConstantArgument):
            try:
                return {"constant": [a.name, encode_value(a.value)]}
            except Unencodable as e:
                raise SerializationError(
                    f"The constant input/output {a.name!r} is {e}, which the .pt2 format cannot write.",
                    where="graph signature", fix="Pass plain Python values (numbers, strings, None) only.") from None
        raise SerializationError(f"Unknown signature argument {a!r}.", where="graph signature",
                                 fix="Report this as a graphcap bug.")

    def signature(self, sig: ExportGraphSignature) -> dict[str, Any]:
        return {
            "inputs": [{"kind": s.kind.name, "arg": self.argument(s.arg), "target": s.target,
                        "persistent": s.persistent} for s in sig.input_specs],
            "outputs": [{"kind": s.kind.name, "arg": self.argument(s.arg), "target": s.target}
                        for s in sig.output_specs],
        }

    def call_graph(self, entries: list[ModuleCallEntry]) -> list[Any]:
        out = []
        for e in entries:
            sig = e.signature
            out.append({"fqn": e.fqn, "signature": None if sig is None else {
                "inputs": [self.argument(a) for a in sig.inputs],
                "outputs": [self.argument(a) for a in sig.outputs],
                "in_spec": spec_to_json(sig.in_spec, f"the inputs of {e.fqn or 'the program'}"),
                "out_spec": spec_to_json(sig.out_spec, f"the outputs of {e.fqn or 'the program'}"),
                "forward_arg_names": list(sig.forward_arg_names) if sig.forward_arg_names is not None else None,
            }})
        return out

    def symbol_table(self) -> list[dict[str, Any]]:
        for key in self.ep.range_constraints:
            self.expr(key)
        ranges = {str(k): v for k, v in self.ep.range_constraints.items()}
        table = []
        for name, sym in sorted(self.symbols.items()):
            assumptions = symbol_assumptions(sym) or {"integer": True}
            rng = ranges.get(name)
            hint = None
            for env in self.shape_envs:
                if rng is None and sym in symbol_ranges(env):
                    rng = symbol_ranges(env)[sym]
                known = example_values(env)
                if sym in known:
                    value = known[sym]
                    hint = int(value) if getattr(value, "is_Integer", False) else None
            table.append({"name": name, "assumptions": {k: bool(v) for k, v in assumptions.items()},
                          "min": _bound(rng.lower) if rng is not None else None,
                          "max": _bound(rng.upper) if rng is not None else None, "hint": hint})
        return table


def _refuse_subclass_construction(node: torch.fx.Node, path: str) -> None:
    """Refuse, saying why, a graph that calls a tensor subclass's constructor (``flat_apply``).

    Capturing ``TwoTensor(x, y)`` inside ``forward`` records ``flat_apply(spec, func_spec,
    *tensors)``, whose two attributes hold Python objects (the class, a pytree spec), not
    tensors or subgraphs: the file stores subclass values as weights and constants, not a
    call of their constructor. The inference IR has no such call.
    """
    users = [u for u in node.users if u.op == "call_function"
             and getattr(u.target, "__name__", None) == "flat_apply"]
    if not users:
        return
    call = users[0]
    built = call.meta.get("val")
    frames = [line.strip() for line in str(call.meta.get("stack_trace") or "").splitlines() if line.strip()]
    source = f" ({frames[-2]}: `{frames[-1]}`)" if len(frames) >= 2 and frames[-2].startswith("File ") else ""
    if isinstance(built, torch.Tensor) and not is_traceable_wrapper_subclass(built):
        # a plain tensor out: a Python function called through flat_apply (the index read
        # flex_attention's score_mod records is an autograd.Function, named by the call's third argument)
        called = next((a for a in call.args if isinstance(a, str)), "a Python function")
        raise SerializationError(
            f"The program calls the Python function {called} inside its graph (node {call.name}, "
            f"torch.ops.higher_order.flat_apply{source}); a file cannot store that call: it holds the "
            f"function and a pytree spec as Python objects, not tensors or subgraphs. (flex_attention "
            f"records one where a score_mod or mask_mod indexes a tensor, `bias[kv_idx]`.)",
            where=f"{path}node {call.name}",
            fix="Save the inference IR, where the call is traced into ATen operators: "
                "`graphcap.save(ep.run_decompositions(), path)`.")
    what = type(built).__name__ if isinstance(built, torch.Tensor) else "a value"
    raise SerializationError(
        f"The program constructs a tensor subclass ({what}) inside its graph (node {call.name}, "
        f"torch.ops.higher_order.flat_apply{source}); a file cannot store that call: it holds "
        f"the subclass's class and a pytree spec as Python objects, not tensors or subgraphs.",
        where=f"{path}node {call.name}",
        fix="Save the inference IR, where subclasses are flattened into their inner tensors: "
            "`graphcap.save(ep.run_decompositions(), path)`; or build the subclass outside "
            "forward (as a weight or a constant) so that it is stored as one.")


_TRITON_KERNEL_CALLS = ("triton_kernel_wrapper_functional", "triton_kernel_wrapper_mutation")


def _refuse_triton_kernel_call(node: torch.fx.Node, path: str) -> None:
    """Refuse a call of a triton kernel: it names the kernel by its index in this process's kernel
    table (``kernel_idx``), which another process fills differently or not at all, so a loaded
    program would call no kernel or another one."""
    hop = node.target.name() if isinstance(node.target, HigherOrderOperator) else None  # type: ignore[no-untyped-call]
    if hop not in _TRITON_KERNEL_CALLS:
        return
    raise SerializationError(
        f"Node {node.name} calls a triton kernel ({hop}); the call names the kernel by "
        f"its index in this process's table of triton kernels, which a process loading the file does "
        f"not share, so the file cannot say which kernel runs.",
        where=f"{path}node {node.name}",
        fix="Keep the kernel behind its operator: define it with torch.library.triton_op and save the "
            "program before splitting it, or `graphcap.save(ep.run_decompositions(), path)` "
            "(decompose_custom_triton_ops=False, the default); split it where it is compiled.")


def _type_str(x: Any) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, type):
        return f"{x.__module__}.{x.__qualname__}"
    return str(x)


def _bound(b: Any) -> Any:
    """A range bound as JSON: an int, a float, or "oo" / "-oo" for the infinities."""
    if b in (int_oo, sympy.oo):  # torch's int_oo calls itself finite: test it by identity first
        return "oo"
    if b in (-int_oo, -sympy.oo):
        return "-oo"
    if isinstance(b, int) or getattr(b, "is_Integer", False):
        return int(b)
    return float(b)


def encode_program(ep: Any, *, with_weights: bool = True,
                   opset_version: Optional[dict[str, int]] = None) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The program.json dict and the tensor entries (name → safetensors bytes).

    ``with_weights=False`` describes the weights without their data (and
    constants without data too): see ``tensors.pack_structure``.
    ``opset_version``: the operator-set versions the file records (``opsets.versions_to_write``).
    """
    from .tensors import checksums, pack, pack_structure
    w = _Writer(ep)
    graph = w.graph_module(ep.graph_module, "")
    signature = w.signature(ep.graph_signature)
    call_graph = w.call_graph(call_graph_of(ep))
    range_constraints = [[w.expr(k), _bound(v.lower), _bound(v.upper)] for k, v in ep.range_constraints.items()]
    if with_weights:
        weights_bytes, weights = pack(dict(ep.state_dict))
        constants_bytes, constants = pack(dict(ep.constants))
    else:
        weights_bytes, weights = pack_structure(dict(ep.state_dict), keep_data=False)
        constants_bytes, constants = pack_structure(dict(ep.constants), keep_data=True)
    example_inputs, example_bytes = _example_inputs(ep)
    program = {
        "format_version": schema.FORMAT_VERSION,
        "producer": {"torch": torch.__version__},
        "symbols": w.symbol_table(),
        "range_constraints": range_constraints,
        "graph_module": graph,
        "signature": signature,
        "module_call_graph": call_graph,
        "state": {"weights": weights, "constants": constants,
                  "checksums": {"weights": checksums(weights_bytes), "constants": checksums(constants_bytes)}},
        "operators": dict(sorted(w.operators.items())),
        "opset_version": dict(sorted((opset_version or {}).items())),
    }
    ir = ep.graph_module.meta.get("graphcap_ir")
    if ir:  # the IR level the program claims, so the loaded one is verified by the same rules
        program["ir"] = {"level": str(ir.get("level")), "kept": sorted(ir.get("kept", ()))}
    payloads = {schema.WEIGHTS_ENTRY: weights_bytes, schema.CONSTANTS_ENTRY: constants_bytes}
    assumptions = getattr(ep, "export_assumptions", None)
    if assumptions is not None:  # what export assumed about the sizes (graphcap.dynamic.assumptions)
        program["assumptions"] = [a.to_dict() for a in assumptions]
    dim_names = getattr(ep, "export_dim_names", None)
    if dim_names:  # the user's Dim names of the symbols (graphcap.dynamic.symbol_names)
        program["dim_names"] = dict(sorted(dim_names.items()))
    custom = _custom(ep.graph_module.meta.get("custom"), "the program's graph module")
    if custom is not None:
        program["custom"] = custom
    if example_inputs is not None:
        program["example_inputs"] = example_inputs
        payloads[schema.EXAMPLE_INPUTS_ENTRY] = example_bytes
    schema.check_written(program)  # what is written is what the format declares
    return program, payloads


def _custom(custom: Any, where: str) -> Any:
    """A ``meta["custom"]`` dict (user annotations) as plain values; a key whose value the format
    cannot write is left out with a warning naming it (annotations do not change what runs)."""
    if not isinstance(custom, dict) or not custom:
        return None
    kept = {}
    for key, value in custom.items():
        try:
            encode_value(key)
            encode_value(value)
        except Unencodable as e:
            warnings.warn(f"graphcap.save leaves out meta['custom'][{key!r}] of {where}: it is {e}, "
                          f"which the .pt2 format cannot write (plain values only).", stacklevel=4)
            continue
        kept[key] = value
    return encode_value(kept) if kept else None


def _example_inputs(ep: Any) -> tuple[Any, bytes]:
    """The example inputs' leaves (tensors by index into their own safetensors entry).

    Example inputs are optional: when they do not follow the program's input
    structure, or hold values the format cannot write, they are left out.
    """
    from .tensors import pack
    if ep.example_inputs is None:
        return None, b""
    leaves, spec = auto_flatten.flatten(ep.example_inputs)
    if spec != call_spec_of(ep)[0]:
        return None, b""
    tensors: dict[str, torch.Tensor] = {}
    encoded = []
    try:
        for i, leaf in enumerate(leaves):
            if isinstance(leaf, torch.Tensor):
                tensors[str(i)] = leaf.detach()
                encoded.append({"tensor": str(i)})
            else:
                encoded.append(encode_value(leaf))
        data, described = pack(tensors)
    except (Unencodable, SerializationError):
        return None, b""
    return {"leaves": encoded, "tensors": described}, data

