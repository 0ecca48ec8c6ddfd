"""program.json (and tensor payloads) → ExportedProgram.

Decoding trusts nothing in the file. Every field is type-checked before use;
operators are found only by attribute lookup of
``torch.ops.<namespace>.<op>.<overload>`` on namespaces this process already
has, and their schema must match the one saved; Python callables come from a
closed table; classes from torch's pytree registry. Symbolic sizes are parsed
by graphcap's own expression parser and rebuilt as SymInts in a fresh
``FakeTensorMode``/``ShapeEnv`` holding the file's symbols with their ranges,
so ``meta['val']`` is again a fake tensor. Nothing is imported, evaluated or
unpickled.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Optional

import sympy
import torch
import torch.fx
from ..torch_private.fake import FakeTensorMode, fake_from_meta
from ..torch_private.fx import extract_tensor_metadata
from ..torch_private.ops import HigherOrderOperator, OpNamespace, OpOverload, OpOverloadPacket, schema_of
from ..torch_private.shapes import guard_location
from torch.fx.experimental.symbolic_shapes import ValueRangesSLoc
from ..torch_private.shapes import new_shape_env
from ..torch_private.symbolic import int_oo
from ..torch_private.symbolic import ValueRanges

from ..errors import SerializationError
from ..signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, ModuleCallEntry,
                         ModuleCallSignature, OutputKind, OutputSpec, SymBoolArgument, SymFloatArgument,
                         SymIntArgument, TensorArgument)
from ..trace.naming import builtin_name_allowed, set_node_name
from . import schema, upgrade
from .encode import python_targets
from .exprs import str_to_expr
from .pytree_specs import _registered_types, json_to_spec
from .values import DTYPES, bad, decode_device, decode_value

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
_OP_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)$")
_ASSUMPTIONS = {"integer", "positive", "nonnegative", "negative", "nonpositive", "real", "finite",
                "zero", "nonzero", "rational", "extended_real", "commutative", "infinite", "even", "odd"}


def _field(d: Any, key: str, kind: Any, where: str, optional: bool = False) -> Any:
    if not isinstance(d, dict):
        raise bad(f"Expected an object at {where}.")
    if key not in d:
        if optional:
            return None
        raise bad(f"Missing field {key!r} at {where}.")
    value = d[key]
    if optional and value is None:
        return None
    if kind is int and type(value) is not int or kind is not int and not isinstance(value, kind):
        raise bad(f"Field {key!r} at {where} has the wrong type ({type(value).__name__}).")
    return value


def _ident(name: Any, what: str) -> str:
    if not isinstance(name, str) or not _IDENT.match(name) or name.startswith("__"):
        raise bad(f"Malformed {what} {name!r:.80}.")
    return name


# ---------------------------------------------------------------------------
# operators
# ---------------------------------------------------------------------------

def _missing_op(key: str, why: str) -> SerializationError:
    ns = key.split("::", 1)[0]
    return SerializationError(
        f"The program calls the operator {key}, which is not registered in this process ({why}).",
        where=f"program.json operator {key}",
        fix=f"Import or load the library that defines the '{ns}' operators (the module using "
            f"torch.library to define {key}, or torch.ops.load_library(...) for a compiled one) "
            f"before graphcap.load.")


def resolve_op(key: Any, schemas: dict[str, Any]) -> OpOverload:
    m = _OP_KEY.match(key) if isinstance(key, str) else None
    if m is None:
        raise bad(f"Malformed operator name {key!r:.80}.")
    ns, name, overload = m.groups()
    if ns.startswith("__"):
        raise bad(f"Malformed operator name {key!r:.80}.")
    # torch.ops → namespace → packet → overload, each step checked for the kind it must be
    steps = ((ns, OpNamespace, f"no namespace '{ns}'", f"{ns!r} is not an operator namespace"),
             (name, OpOverloadPacket, f"'{ns}' has no operator '{name}'", f"'{ns}.{name}' is not an operator"),
             (overload, OpOverload, f"'{ns}::{name}' has no overload '{overload}'",
              f"'{overload}' is not an overload"))
    op: Any = torch.ops
    for attr, kind, missing, wrong in steps:
        try:
            op = getattr(op, attr)
        except (AttributeError, RuntimeError):
            raise _missing_op(key, missing) from None
        if not isinstance(op, kind):
            raise (bad(wrong + ".") if kind is OpNamespace else _missing_op(key, wrong))
    saved = schemas.get(key)
    if saved is not None and saved != str(schema_of(op)):
        raise SerializationError(
            f"The operator {key} in this process has the schema\n  {schema_of(op)}\nbut the program was "
            f"saved with\n  {saved}", where=f"program.json operator {key}",
            fix="Load with the version of torch / of the operator library the program was exported with.")
    return op


def resolve_hop(name: Any) -> HigherOrderOperator:
    name = _ident(name, "higher-order operator name")
    try:
        hop = getattr(torch.ops.higher_order, name)
    except (AttributeError, RuntimeError):
        hop = None
    if not isinstance(hop, HigherOrderOperator):
        raise SerializationError(
            f"The program uses the higher-order operator {name!r}, which this torch does not have.",
            where="program.json", fix="Load with the torch version the program was exported with.")
    return hop


# ---------------------------------------------------------------------------
# symbols and fake values
# ---------------------------------------------------------------------------

def _bound(b: Any, where: str) -> Any:
    if b == "oo":
        return int_oo
    if b == "-oo":
        return -int_oo
    if type(b) is int:
        return sympy.Integer(b)
    if type(b) is float:
        return sympy.Float(b)
    raise bad(f"Malformed range bound {b!r:.40} at {where}.")


class _Symbols:
    """The file's symbols, a ShapeEnv that knows them, and a fake mode over it."""

    def __init__(self, table: Any):
        if not isinstance(table, list):
            raise bad("The symbol table is malformed.")
        self.by_name: dict[str, sympy.Symbol] = {}
        self._symints: dict[str, Any] = {}
        self.shape_env = new_shape_env()
        self.fake_mode = FakeTensorMode(shape_env=self.shape_env, allow_non_fake_inputs=True)
        for i, entry in enumerate(table):
            where = f"symbols[{i}]"
            name = _ident(_field(entry, "name", str, where), "symbol name")
            assumptions = _field(entry, "assumptions", dict, where)
            if not all(k in _ASSUMPTIONS and isinstance(v, bool) for k, v in assumptions.items()):
                raise bad(f"Unknown symbol assumptions at {where}.")
            try:
                sym = sympy.Symbol(name, **assumptions)
            except Exception as e:  # sympy rejects contradictory assumptions
                raise bad(f"Contradictory assumptions for symbol {name}: {e}") from None
            if name in self.by_name:
                raise bad(f"Symbol {name} is listed twice.")
            self.by_name[name] = sym
            lo, hi = entry.get("min"), entry.get("max")
            if lo is not None or hi is not None:
                lower = _bound(lo, where) if lo is not None else -int_oo
                upper = _bound(hi, where) if hi is not None else int_oo
                if lower > upper:
                    raise bad(f"Empty range for symbol {name}.")
            else:
                lower, upper = -int_oo, int_oo
            sloc = guard_location(self.shape_env)
            self.shape_env.var_to_range[sym] = ValueRanges(lower, upper)
            self.shape_env.var_to_range_sloc[sym] = ValueRangesSLoc(sloc, sloc)
            hint = entry.get("hint")
            if hint is not None:
                if type(hint) is not int or not (lower <= hint <= upper):
                    raise bad(f"Malformed example value for symbol {name}.")
                self.shape_env.backed_var_to_val[sym] = sympy.Integer(hint)

    def expr(self, text: Any) -> Any:
        if type(text) is int:
            return sympy.Integer(text)
        return str_to_expr(text, self.by_name)

    def _hint(self, e: Any) -> Optional[Any]:
        try:
            value = e.xreplace(self.shape_env.backed_var_to_val)
        except Exception:
            return None
        return value if getattr(value, "is_number", False) else None

    def symint(self, text: Any) -> Any:
        if type(text) is int:
            return text
        known = self._symints.get(text) if isinstance(text, str) else None
        if known is not None:  # one SymInt per expression: a big model repeats a few hundred thousands times
            return known
        e = self.expr(text)
        if e.is_Integer:
            return int(e)
        hint = self._hint(e)
        made = self.shape_env.create_symintnode(e, hint=int(hint) if hint is not None and hint.is_Integer else None)
        if isinstance(text, str):
            self._symints[text] = made
        return made

    def symfloat(self, text: Any) -> Any:
        e = self.expr(text)
        if e.is_number:
            return float(e)
        hint = self._hint(e)
        return self.shape_env.create_symfloatnode(e, hint=float(hint) if hint is not None else None)

    def symbool(self, text: Any) -> Any:
        e = self.expr(text)
        if e in (sympy.true, sympy.false):
            return bool(e)
        return self.shape_env.create_symboolnode(e)

    def fake_tensor(self, d: Any, where: str) -> torch.Tensor:
        shape = [self.symint(x) for x in _field(d, "shape", list, where)]
        stride = [self.symint(x) for x in _field(d, "stride", list, where)]
        offset = self.symint(d.get("offset", 0))
        if len(shape) != len(stride):
            raise bad(f"Shape and strides differ in rank at {where}.")
        dtype = DTYPES.get(_field(d, "dtype", str, where))
        if dtype is None:
            raise bad(f"Unknown dtype at {where}.")
        device = decode_device(_field(d, "device", str, where))
        for x in (*shape, *stride, offset):
            if isinstance(x, int) and x < 0:
                raise bad(f"Negative size or stride at {where}.")
        # built on the meta device and wrapped, as the fake mode itself does, without its dispatch
        if isinstance(offset, int) and offset == 0:
            meta = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        else:
            extent = offset + sum((s - 1) * st for s, st in zip(shape, stride)) + 1
            meta = torch.empty((extent,), dtype=dtype, device="meta").as_strided(shape, stride, offset)
        t = fake_from_meta(self.fake_mode, meta, device)
        if d.get("requires_grad") is True and (dtype.is_floating_point or dtype.is_complex):
            with self.fake_mode:
                t.requires_grad_(True)
        return t

    def val(self, j: Any, where: str) -> Any:
        def extra(tag: str, payload: Any) -> Any:
            if tag == "tensor":
                return self.fake_tensor(payload, where)
            if tag == "symint":
                return self.symint(payload)
            if tag == "symfloat":
                return self.symfloat(payload)
            if tag == "symbool":
                return self.symbool(payload)
            raise bad(f"Unknown tag {tag!r:.40} in the value of {where}.")
        return decode_value(j, extra)


# ---------------------------------------------------------------------------
# graphs
# ---------------------------------------------------------------------------

class _GraphReader:
    def __init__(self, symbols: _Symbols, schemas: dict[str, Any]):
        self.symbols = symbols
        self.schemas = schemas
        self.py_targets = python_targets()
        self.ops: dict[str, Any] = {}
        self.tensor_metas: dict[str, Any] = {}  # TensorMetadata is immutable: one per distinct value

    def target(self, j: Any, where: str) -> Callable[..., Any]:
        if not (isinstance(j, dict) and len(j) == 1):
            raise bad(f"Malformed call target at {where}.")
        (kind, name), = j.items()
        if kind == "op":
            if name not in self.ops:
                self.ops[name] = resolve_op(name, self.schemas)
            return self.ops[name]
        if kind == "hop":
            return resolve_hop(name)
        if kind == "python":
            fn = self.py_targets.get(name) if isinstance(name, str) else None
            if fn is None:
                raise bad(f"The program calls the Python callable {name!r:.80}, which is not one graphcap "
                          f"allows in a graph.", where=where)
            return fn
        raise bad(f"Unknown call target kind {kind!r:.40} at {where}.")

    def graph_module(self, j: Any, path: str, depth: int = 0) -> torch.fx.GraphModule:
        if depth > 32:
            raise bad("Subgraphs are nested too deeply.")
        nodes = _field(j, "nodes", list, path or "graph_module")
        subgraphs = _field(j, "subgraphs", dict, path or "graph_module")
        root = torch.nn.Module()
        for attr, sub in subgraphs.items():
            _ident(attr, "subgraph name")
            root.add_module(attr, self.graph_module(sub, f"{path}{attr}.", depth + 1))
        graph = torch.fx.Graph()
        env: dict[str, torch.fx.Node] = {}
        saw_output = False
        for i, nj in enumerate(nodes):
            where = f"{path}nodes[{i}]"
            name = _ident(_field(nj, "name", str, where), "node name")
            op = _field(nj, "op", str, where)
            if saw_output:
                raise bad(f"Node {name} comes after the output node.")
            if name in env:
                raise bad(f"Node name {name} is used twice.")

            def extra(tag: str, payload: Any) -> Any:
                if tag == "node":
                    if not isinstance(payload, str) or payload not in env:
                        raise bad(f"Node {name} uses {payload!r:.80} before it is defined.")
                    return env[payload]
                if tag == "symint":
                    return self.symbols.symint(payload)
                if tag == "symfloat":
                    return self.symbols.symfloat(payload)
                if tag == "symbool":
                    return self.symbols.symbool(payload)
                if tag == "op":
                    return self.target({"op": payload}, where)
                if tag == "hop":
                    return resolve_hop(payload)
                raise bad(f"Unknown argument tag {tag!r:.40} in node {name}.")

            args = tuple(decode_value(a, extra) for a in _field(nj, "args", list, where))
            kwargs = {_ident(k, "keyword"): decode_value(v, extra)
                      for k, v in _field(nj, "kwargs", dict, where).items()}
            if op == "placeholder":
                target: Any = name
            elif op == "output":
                target = "output"
                saw_output = True
                if len(args) != 1 or kwargs:
                    raise bad(f"Malformed output node at {where}.")
            elif op == "call_function":
                target = self.target(nj.get("target"), where)
            elif op == "get_attr":
                target = _ident(nj.get("target"), "subgraph name")
                if target not in subgraphs:
                    raise bad(f"Node {name} reads the subgraph {target!r}, which the file does not hold.")
            else:
                raise bad(f"Node {name} has the kind {op!r:.40}, which the format does not allow.")
            node = graph.create_node(op, target, args, kwargs, name=name)
            if node.name != name and op == "placeholder" and name not in env and builtin_name_allowed(name):
                set_node_name(node, name)  # an input named like a builtin (``input``) keeps it
                node.target = name
            if node.name != name:
                raise bad(f"Node name {name} clashes with a name torch.fx reserves.")
            env[name] = node
            self.meta(node, _field(nj, "meta", dict, where), where)
        if not saw_output:
            raise bad(f"The graph {path or 'graph_module'} has no output node.")
        return torch.fx.GraphModule(root, graph)

    def meta(self, node: torch.fx.Node, m: dict[str, Any], where: str) -> None:
        if "val" in m:
            node.meta["val"] = self.symbols.val(m["val"], f"node {node.name}")
        if "stack_trace" in m:
            st = m["stack_trace"]
            if st is not None and not isinstance(st, str):
                raise bad(f"Malformed stack_trace at {where}.")
            node.meta["stack_trace"] = st
        if "nn_module_stack" in m:
            stack = {}
            for item in _field(m, "nn_module_stack", list, where):
                if not (isinstance(item, list) and len(item) == 3 and all(isinstance(x, str) for x in item)):
                    raise bad(f"Malformed nn_module_stack at {where}.")
                stack[item[0]] = (item[1], item[2])
            node.meta["nn_module_stack"] = stack
        if "source_fn_stack" in m:
            stack = []
            for item in _field(m, "source_fn_stack", list, where):
                if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
                    raise bad(f"Malformed source_fn_stack at {where}.")
                stack.append((item[0], item[1]))
            node.meta["source_fn_stack"] = stack
        if "torch_fn" in m:
            fn = m["torch_fn"]
            if not (isinstance(fn, list) and len(fn) == 2 and all(isinstance(x, str) for x in fn)):
                raise bad(f"Malformed torch_fn at {where}.")
            node.meta["torch_fn"] = (fn[0], fn[1])
        if m.get("tensor_meta") is True and isinstance(node.meta.get("val"), torch.Tensor):
            key = json.dumps(m["val"], sort_keys=True)
            if key not in self.tensor_metas:
                self.tensor_metas[key] = extract_tensor_metadata(node.meta["val"])
            node.meta["tensor_meta"] = self.tensor_metas[key]


# ---------------------------------------------------------------------------
# signature, call graph, program
# ---------------------------------------------------------------------------

def _argument(j: Any, where: str) -> Any:
    if not (isinstance(j, dict) and len(j) == 1):
        raise bad(f"Malformed signature argument at {where}.")
    (kind, payload), = j.items()
    if kind == "constant":
        if not (isinstance(payload, list) and len(payload) == 2 and isinstance(payload[0], str)):
            raise bad(f"Malformed constant argument at {where}.")
        return ConstantArgument(payload[0], decode_value(payload[1]))
    classes = {"tensor": TensorArgument, "symint": SymIntArgument, "symfloat": SymFloatArgument,
               "symbool": SymBoolArgument}
    if kind not in classes or not isinstance(payload, str):
        raise bad(f"Unknown signature argument {kind!r:.40} at {where}.")
    return classes[kind](payload)


def _enum(cls: Any, name: Any, where: str) -> Any:
    if not isinstance(name, str) or name not in cls.__members__:
        raise bad(f"Unknown {cls.__name__} {name!r:.40} at {where}.")
    return cls[name]


def _opt_str(d: dict, key: str, where: str) -> Optional[str]:
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise bad(f"Field {key!r} at {where} must be a string.")
    return value


def decode_signature(j: Any) -> ExportGraphSignature:
    inputs = []
    for i, s in enumerate(_field(j, "inputs", list, "signature")):
        where = f"signature.inputs[{i}]"
        persistent = s.get("persistent") if isinstance(s, dict) else None
        if persistent is not None and not isinstance(persistent, bool):
            raise bad(f"Malformed 'persistent' at {where}.")
        inputs.append(InputSpec(_enum(InputKind, _field(s, "kind", str, where), where),
                                _argument(_field(s, "arg", dict, where), where), _opt_str(s, "target", where),
                                persistent))
    outputs = []
    for i, s in enumerate(_field(j, "outputs", list, "signature")):
        where = f"signature.outputs[{i}]"
        outputs.append(OutputSpec(_enum(OutputKind, _field(s, "kind", str, where), where),
                                  _argument(_field(s, "arg", dict, where), where), _opt_str(s, "target", where)))
    return ExportGraphSignature(inputs, outputs)


def decode_call_graph(j: Any) -> list[ModuleCallEntry]:
    if not isinstance(j, list) or not j:
        raise bad("The module call graph is malformed.")
    types = _registered_types()
    entries = []
    for i, e in enumerate(j):
        where = f"module_call_graph[{i}]"
        fqn = _field(e, "fqn", str, where)
        sj = e.get("signature")
        sig = None
        if sj is not None:
            names = _field(sj, "forward_arg_names", list, where, optional=True)
            if names is not None and not all(isinstance(n, str) for n in names):
                raise bad(f"Malformed forward_arg_names at {where}.")
            sig = ModuleCallSignature(
                inputs=[_argument(a, where) for a in _field(sj, "inputs", list, where)],
                outputs=[_argument(a, where) for a in _field(sj, "outputs", list, where)],
                in_spec=json_to_spec(sj.get("in_spec"), types), out_spec=json_to_spec(sj.get("out_spec"), types),
                forward_arg_names=names)
        entries.append(ModuleCallEntry(fqn, sig))
    if entries[0].signature is None:
        raise bad("The module call graph has no signature for the program itself.")
    return entries


def decode_program(program: Any, version: int) -> dict[str, Any]:
    """The parts of an ExportedProgram, without its tensors (see ``tensors``).

    ``version`` is the file's format version: an older file's program.json is
    first brought to today's format (``upgrade.to_current_format``), then
    checked against the declared schema (``schema.PROGRAM``) before any field
    is read, so a mismatch is reported by its JSON path.
    """
    if not isinstance(program, dict):
        raise bad("program.json is not an object.")
    program = upgrade.to_current_format(program, version)
    schema.check_read(program, version)
    schemas = _field(program, "operators", dict, "operators")
    symbols = _Symbols(program.get("symbols", []))
    reader = _GraphReader(symbols, schemas)
    gm = reader.graph_module(_field(program, "graph_module", dict, "graph_module"), "")
    range_constraints = {}
    for i, item in enumerate(_field(program, "range_constraints", list, "range_constraints")):
        if not (isinstance(item, list) and len(item) == 3):
            raise bad(f"Malformed range_constraints[{i}].")
        key = symbols.expr(item[0])
        lower, upper = _bound(item[1], "range_constraints"), _bound(item[2], "range_constraints")
        if lower > upper:
            raise bad(f"Empty range for {item[0]!r:.40}.")
        range_constraints[key] = ValueRanges(lower, upper)
    ir = program.get("ir")
    if ir is not None:
        if not (isinstance(ir, dict) and ir.get("level") in ("training", "inference")
                and isinstance(ir.get("kept"), list) and all(isinstance(k, str) for k in ir["kept"])):
            raise bad("Malformed 'ir' entry.")
        gm.meta["graphcap_ir"] = {"level": ir["level"], "kept": frozenset(ir["kept"])}
    return {"graph_module": gm, "signature": decode_signature(_field(program, "signature", dict, "signature")),
            "range_constraints": range_constraints,
            "module_call_graph": decode_call_graph(program.get("module_call_graph")),
            "state": _field(program, "state", dict, "state")}
