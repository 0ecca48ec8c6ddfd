"""program.json (and tensor payloads) → ExportedProgram.

Decoding trusts nothing in the file. Every field is type-checked before use;
operators are found only by attribute lookup of
``torch.ops.<namespace>.<op>.<overload>`` on namespaces this process already
has, and their schema must match the one saved; Python callables come from a
closed table; classes from torch's pytree registry. Symbolic sizes are rebuilt
as SymInts of a fresh ShapeEnv (:mod:`.symbol_table`), so ``meta['val']`` is
again a fake tensor. Nothing is imported, evaluated or unpickled. Fields are
read through :mod:`.checked_fields`, operators found by :mod:`.operator_lookup`;
this module reads the graphs, the signature and the module call graph.
"""
from __future__ import annotations

import json
import operator
from typing import Any, Callable, Optional

import torch
import torch.fx

from ..graph_arguments import (
    ConstantArgument,
    InputKind,
    OutputKind,
    SymBoolArgument,
    SymFloatArgument,
    SymIntArgument,
    TensorArgument,
)
from ..node_facts import operand_sequences_as
from ..signature import ExportGraphSignature, InputSpec, ModuleCallEntry, ModuleCallSignature, OutputSpec
from ..torch_private.fx import extract_tensor_metadata
from ..torch_private.ops import HigherOrderOperator, OpOverload
from ..torch_private.shapes import backed_size_oblivious
from ..torch_private.symbolic import ValueRanges
from ..trace.naming.node_names import builtin_name_allowed, set_node_name
from ..trace.source_fns import resolve
from . import schema, upgrade
from .binding_paths import decode_bindings
from .call_types import check_call
from .checked_fields import field, ident
from .encode import python_targets
from .hop_calls import check_hop_call, check_item_read
from .operator_lookup import resolve_hop, resolve_op
from .pytree_specs import _registered_types, json_to_spec
from .symbol_table import SymbolTable, range_bound
from .values import bad, decode_value

# ---------------------------------------------------------------------------
# graphs
# ---------------------------------------------------------------------------

class _GraphReader:
    def __init__(self, symbols: SymbolTable, schemas: dict[str, Any], producer: Any = None):
        self.symbols = symbols
        self.schemas = schemas
        self.producer = producer
        self.py_targets: dict[str, Callable[..., Any]] = python_targets()
        self.ops: dict[str, Callable[..., Any]] = {}
        self.tensor_metas: dict[str, Any] = {}  # TensorMetadata is immutable: one per distinct value

    def target(self, j: Any, where: str) -> Callable[..., Any]:
        if not (isinstance(j, dict) and len(j) == 1):
            raise bad(f"Malformed call target at {where}.")
        (kind, name), = j.items()
        if kind == "op":
            if name not in self.ops:
                self.ops[name] = resolve_op(name, self.schemas, self.producer)
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
        nodes = field(j, "nodes", list, path or "graph_module")
        subgraphs = field(j, "subgraphs", dict, path or "graph_module")
        root = torch.nn.Module()
        for attr, sub in subgraphs.items():
            ident(attr, "subgraph name")
            root.add_module(attr, self.graph_module(sub, f"{path}{attr}.", depth + 1))
        graph = torch.fx.Graph()
        env: dict[str, torch.fx.Node] = {}

        def subgraph_of(arg: Any) -> Optional[torch.fx.GraphModule]:
            """The graph a ``get_attr`` node of this graph reads, else None."""
            if isinstance(arg, torch.fx.Node) and arg.op == "get_attr" and isinstance(arg.target, str) \
                    and arg.target in subgraphs:
                sub = getattr(root, arg.target, None)
                return sub if isinstance(sub, torch.fx.GraphModule) else None
            return None
        saw_output = False
        for i, nj in enumerate(nodes):
            where = f"{path}nodes[{i}]"
            in_file = f"program.json {path or 'graph_module.'}nodes[{i}]"  # where a call check names it
            name = ident(field(nj, "name", str, where), "node name")
            op = field(nj, "op", str, where)
            if saw_output:
                raise bad(f"Node {name} comes after the output node.")
            if name in env:
                raise bad(f"Node name {name} is used twice.")

            def extra(tag: str, payload: Any, name: str = name, where: str = where) -> Any:
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

            args = tuple(decode_value(a, extra) for a in field(nj, "args", list, where))
            kwargs = {ident(k, "keyword"): decode_value(v, extra)
                      for k, v in field(nj, "kwargs", dict, where).items()}
            if op == "placeholder":
                target: Any = name
            elif op == "output":
                target = "output"
                saw_output = True
                if len(args) != 1 or kwargs:
                    raise bad(f"Malformed output node at {where}.")
            elif op == "call_function":
                target = self.target(nj.get("target"), where)
                if isinstance(target, OpOverload):
                    check_call(target, args, kwargs, name, in_file)
                elif isinstance(target, HigherOrderOperator):  # operands as lists, as torch's load gives them
                    args, kwargs = operand_sequences_as(list, target, args, kwargs)
                elif target is operator.getitem and not (
                        len(args) == 2 and not kwargs and isinstance(args[0], torch.fx.Node)
                        and type(args[1]) is int):
                    raise bad(f"Node {name} reads an item with arguments not of the form (node, index).",
                              where=in_file)
            elif op == "get_attr":
                target = ident(nj.get("target"), "subgraph name")
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
            self.meta(node, field(nj, "meta", dict, where), where)
            # after its value is read: the call's results are counted against what it returns
            check_hop_call(node, subgraph_of, in_file)
            check_item_read(node, in_file)
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
            for item in field(m, "nn_module_stack", list, where):
                if not (isinstance(item, list) and len(item) == 3 and all(isinstance(x, str) for x in item)):
                    raise bad(f"Malformed nn_module_stack at {where}.")
                stack[item[0]] = (item[1], item[2])
            node.meta["nn_module_stack"] = stack
        if "source_fn_stack" in m:
            source_fns = []
            for item in field(m, "source_fn_stack", list, where):
                if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
                    raise bad(f"Malformed source_fn_stack at {where}.")
                source_fns.append((item[0], resolve(item[1])))  # the class or function, where torch has it
            node.meta["source_fn_stack"] = source_fns
        if "torch_fn" in m:
            fn = m["torch_fn"]
            if not (isinstance(fn, list) and len(fn) == 2 and all(isinstance(x, str) for x in fn)):
                raise bad(f"Malformed torch_fn at {where}.")
            node.meta["torch_fn"] = (fn[0], fn[1])
        if "custom" in m:
            node.meta["custom"] = decode_custom(m["custom"], where)
        if "unbacked_bindings" in m:
            node.meta["unbacked_bindings"] = decode_bindings(m["unbacked_bindings"], self.symbols.expr, where)
        if m.get("tensor_meta") is True and isinstance(node.meta.get("val"), torch.Tensor):
            key = json.dumps(m["val"], sort_keys=True)
            if key not in self.tensor_metas:
                self.tensor_metas[key] = extract_tensor_metadata(node.meta["val"])
            node.meta["tensor_meta"] = self.tensor_metas[key]


def decode_custom(j: Any, where: str) -> dict[str, Any]:
    """A ``meta["custom"]`` dict of plain values (the user's annotations)."""
    custom = decode_value(j)
    if not isinstance(custom, dict):
        raise bad(f"Malformed custom metadata at {where}.")
    return custom


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


def _opt_str(d: dict[str, Any], key: str, where: str) -> Optional[str]:
    value = d.get(key)
    if value is not None and not isinstance(value, str):
        raise bad(f"Field {key!r} at {where} must be a string.")
    return value


def decode_signature(j: Any) -> ExportGraphSignature:
    inputs = []
    for i, s in enumerate(field(j, "inputs", list, "signature")):
        where = f"signature.inputs[{i}]"
        persistent = s.get("persistent") if isinstance(s, dict) else None
        if persistent is not None and not isinstance(persistent, bool):
            raise bad(f"Malformed 'persistent' at {where}.")
        inputs.append(InputSpec(_enum(InputKind, field(s, "kind", str, where), where),
                                _argument(field(s, "arg", dict, where), where), _opt_str(s, "target", where),
                                persistent))
    outputs = []
    for i, s in enumerate(field(j, "outputs", list, "signature")):
        where = f"signature.outputs[{i}]"
        outputs.append(OutputSpec(_enum(OutputKind, field(s, "kind", str, where), where),
                                  _argument(field(s, "arg", dict, where), where), _opt_str(s, "target", where)))
    return ExportGraphSignature(inputs, outputs)


def decode_call_graph(j: Any) -> list[ModuleCallEntry]:
    if not isinstance(j, list) or not j:
        raise bad("The module call graph is malformed.")
    types = _registered_types()
    entries = []
    for i, e in enumerate(j):
        where = f"module_call_graph[{i}]"
        fqn = field(e, "fqn", str, where)
        sj = e.get("signature")
        sig = None
        if sj is not None:
            names = field(sj, "forward_arg_names", list, where, optional=True)
            if names is not None and not all(isinstance(n, str) for n in names):
                raise bad(f"Malformed forward_arg_names at {where}.")
            sig = ModuleCallSignature(
                inputs=[_argument(a, where) for a in field(sj, "inputs", list, where)],
                outputs=[_argument(a, where) for a in field(sj, "outputs", list, where)],
                in_spec=json_to_spec(sj.get("in_spec"), types), out_spec=json_to_spec(sj.get("out_spec"), types),
                forward_arg_names=names)
            spec = sig.in_spec
            if not (spec.type is tuple and spec.num_children == 2 and spec.child(0).type is tuple
                    and spec.child(1).type is dict):
                raise bad(f"The input structure at {where} is not (args, kwargs), as every export's is.",
                          where=f"program.json {where}.signature.in_spec")
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
    schemas = field(program, "operators", dict, "operators")
    symbols = SymbolTable(program.get("symbols", []))
    reader = _GraphReader(symbols, schemas, program.get("producer"))
    # reading a value's metadata asks size questions (is a size-1 dim's stride irrelevant to its
    # memory format?): answered for the general size, not from the saved example's, which would
    # hold a dim exported at size 1 to 1 in the loaded program
    with backed_size_oblivious():
        gm = reader.graph_module(field(program, "graph_module", dict, "graph_module"), "")
    range_constraints = {}
    for i, item in enumerate(field(program, "range_constraints", list, "range_constraints")):
        if not (isinstance(item, list) and len(item) == 3):
            raise bad(f"Malformed range_constraints[{i}].")
        key = symbols.expr(item[0])
        lower, upper = range_bound(item[1], "range_constraints"), range_bound(item[2], "range_constraints")
        if lower > upper:
            raise bad(f"Empty range for {item[0]!r:.40}.")
        range_constraints[key] = ValueRanges(lower, upper)
    ir = program.get("ir")
    if ir is not None:
        if not (isinstance(ir, dict) and ir.get("level") in ("training", "inference")
                and isinstance(ir.get("kept"), list) and all(isinstance(k, str) for k in ir["kept"])):
            raise bad("Malformed 'ir' entry.")
        gm.meta["graphcap_ir"] = {"level": ir["level"], "kept": frozenset(ir["kept"])}
    if "custom" in program:
        gm.meta["custom"] = decode_custom(program["custom"], "custom")
    return {"graph_module": gm, "signature": decode_signature(field(program, "signature", dict, "signature")),
            "range_constraints": range_constraints,
            "module_call_graph": decode_call_graph(program.get("module_call_graph")),
            "state": field(program, "state", dict, "state"),
            "opset_version": dict(field(program, "opset_version", dict, "opset_version"))}
