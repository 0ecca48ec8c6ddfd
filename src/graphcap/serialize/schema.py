"""The .pt2 format, declared: its version and changelog, the archive layout, program.json's schema.

Every change to what ``encode`` writes or ``decode`` reads gets a new
``FORMAT_VERSION`` and a dated line in ``CHANGELOG`` below, holding the
fingerprint of ``PROGRAM`` (the schema of program.json at the end of this file)
for that version; the released version keeps a golden file under
``tests/golden/`` that must still load, and that today's ``save`` writes again
byte for byte. tests/unit/test_serialize_schema.py fails when the schema's
fingerprint is not the one recorded for ``FORMAT_VERSION``. A file of an older
version is brought to today's schema by the upgraders in ``upgrade.py`` before
it is checked; a change in how a version's files are brought to today's
program form as they load (what is written unchanged) gets a dated note under
the changelog. A reader accepts every version listed in ``READABLE_VERSIONS``
and refuses newer ones with a clear error (upgrade graphcap) rather than
misreading them.

Archive layout (a zip, every entry stored uncompressed so weights can be
memory-mapped and no entry can expand beyond the file's own size)::

    graphcap/version        the format version, as ASCII digits
    graphcap/manifest.json  {"entries": {name: {"sha256": hex, "size": n}}}
    program.json            the graph(s), signature, range constraints,
                            module call graph, pytree specs, operator schemas
    weights.safetensors     state_dict storages (parameters, persistent buffers)
    constants.safetensors   constants' storages (non-persistent buffers, lifted
                            tensor constants)
    example_inputs.safetensors  the example inputs' tensors, when the program has
                            example inputs of the program's input structure
    extra/<name>            user extra_files, stored as given
"""
from __future__ import annotations

from typing import Any

from .typed_json import (
    Bool,
    Int,
    ListOf,
    MapOf,
    Null,
    Number,
    OneOf,
    Pattern,
    Record,
    Ref,
    Str,
    Tagged,
    Tuple,
    Union,
    check,
    fingerprint,
)

FORMAT_VERSION = 6
"""The .pt2 format version ``graphcap.save`` writes (``load`` reads it and every older one).

Args:
    (a constant) compare with the version stored in a file's ``graphcap/version`` entry.

Returns:
    An int; it grows by one with every change of what ``save`` writes (see ``CHANGELOG``).

Raises:
    Nothing; ``load`` raises ``SerializationError`` for a file of a newer version.

Example:
    >>> graphcap.FORMAT_VERSION
    6
"""

# version -> (date, fingerprint of PROGRAM, what changed). Append; never rewrite a released line.
CHANGELOG: dict[int, tuple[str, str, str]] = {
    1: ("2026-11-22", "e050d35d0844e930",
        "First format: zip with version + manifest (sha256 per entry), program.json "
        "(graph nodes with tagged JSON arguments, node metadata val/stack_trace/"
        "nn_module_stack/source_fn_stack/torch_fn, nested subgraphs for get_attr of "
        "GraphModules, signature, range constraints with symbol assumptions and hints, "
        "module call graph, TreeSpecs by serialized type name, operator schemas), "
        "weights/constants in safetensors as one entry per storage (aliasing kept), "
        "example inputs (tensors in safetensors, other leaves in program.json), "
        "extra files under extra/; an optional 'ir' entry (level and kept operators) "
        "for programs in the inference IR, so a loaded one is verified by the same rules."),
    2: ("2026-11-23", "63331c13d1e66e75",
        "A weight or constant may be described without data (\"storage\": null: dtype, "
        "shape, strides, requires_grad only), written by save(ep, f, weights=False); "
        "load attaches such weights from a checkpoint (load(f, weights=...)). "
        "Version-1 files are version-2 files as they are (no rewrite)."),
    3: ("2026-11-25", "91d3a84c80612b3f",
        "state.checksums: CRC-32 of each tensor entry's safetensors header and of each "
        "storage, checked by memory-mapped loads (which do not read the entry whole) and "
        "naming the damaged tensor; 'assumptions': what export assumed about the input "
        "sizes (ep.export_assumptions), restored by load for the report; 'dim_names': the "
        "spec's Dim name of each symbol (ep.export_dim_names), so a loaded program's "
        "errors, inspect and report read batch rather than s77; a pytree node "
        "graphcap flattened by its attributes is marked \"flattened\": \"attributes\" so "
        "a fresh process flattens the class it finds the same way; the program's own (root) "
        "call-graph entry lists no graph values, as torch.export's (ExecuTorch renames graph "
        "values and then rejects a root list naming old ones). Version-2 files upgrade by "
        "clearing that root entry's lists (an mmap load checks their entries whole)."),
    4: ("2026-11-26", "615b6b226e6a88e4",
        "Tensor-subclass state and values: a weight or constant that is a traceable wrapper subclass "
        "(__tensor_flatten__: TwoTensor, a quantized weight) is a 'TensorSubclass' entry (class by "
        "qualified name, flatten context as a plain value, outer dtype/shape/strides/device, and its "
        "inner tensors as views of stored storages, nested subclasses recursively), rebuilt at load "
        "by the class's __tensor_unflatten__, the class found only below imported packages; a "
        "node's meta['val'] tensor may carry 'subclass' (class, context, inner tensors' metadata), "
        "so a subclass parameter's placeholder is again a fake subclass; the user's annotations "
        "(meta['custom'] of each node, and of the program's graph module as a top-level 'custom'), "
        "plain values only; each node's 'unbacked_bindings' (the data-dependent symbols it "
        "introduces, with the path into its value where each is read: size()[0] // 10). "
        "Version-3 files are version-4 files as they are (no rewrite)."),
    5: ("2026-11-26", "eee521f3e34dd932",
        "'opset_version': the operator-set version the program was written against, per operator "
        "namespace (torch.export's opset_version): 'aten' is the saving process's ATen operator version, "
        "other namespaces are the user's (save(ep, f, opset_version={...})) or carried from the file the "
        "program was loaded from; load(f, expected_opset_version={...}) refuses a file recording a newer "
        "version than expected. Version-4 files upgrade with an empty map: they make no claim."),
    6: ("2026-11-27", "241bd7fbf52021e2",
        "A tensor subclass's flatten context (of a weight or constant, and of a node's meta['val']) may "
        "hold enum members ({\"enum\": [class, member]}) and dataclass instances ({\"dataclass\": [class, "
        "[[field, value], ...]]}) besides plain values: torchao's int8 dynamic-activation weights keep "
        "their activation options there; the class is found only below imported packages, a dataclass "
        "rebuilt by its fields. Version-5 files are version-6 files as they are (no rewrite)."),
}

# Upgrades on load, the format unchanged (dated; the code is serialize/upgrade.py):
# 2026-11-23, version 1: training-IR programs no longer list BUFFER_MUTATION / USER_INPUT_MUTATION
#   outputs (the writes are in-place operators of the graph, as in torch's training IR); a file
#   that lists them is upgraded as it loads. Inference-IR programs keep their mutation outputs.

# The reader reads more, the format unchanged (what save writes is as before; files that failed to
# load now load):
# 2026-11-26, every version: symbolic expressions may hold ``Piecewise((value, condition), ...)`` and
#   ``ITE(c, a, b)`` (serialize/exprs.py): sympy's printed form of ``int(flag)`` for a data-dependent
#   bool, which save has always written and load refused as an unknown function.

READABLE_VERSIONS = frozenset(CHANGELOG)

MAGIC = "graphcap.pt2"

VERSION_ENTRY = "graphcap/version"
MANIFEST_ENTRY = "graphcap/manifest.json"
PROGRAM_ENTRY = "program.json"
WEIGHTS_ENTRY = "weights.safetensors"
CONSTANTS_ENTRY = "constants.safetensors"
EXAMPLE_INPUTS_ENTRY = "example_inputs.safetensors"
EXTRA_PREFIX = "extra/"

# Bounds a crafted file cannot push the loader past.
MAX_ENTRIES = 100_000
MAX_JSON_BYTES = 1 << 31
MAX_EXPR_CHARS = 4096
MAX_NESTING = 200
MAX_INT_LITERAL = 1 << 63


# ---------------------------------------------------------------------------
# program.json, declared. ``encode`` output is checked against PROGRAM before it
# is written; ``decode`` checks a file's program.json (after upgrading an older
# version's) before reading it. Changing anything below changes the fingerprint.
# ---------------------------------------------------------------------------

IDENT = Pattern(r"[A-Za-z_][A-Za-z0-9_]*", "an identifier")
OPERATOR_KEY = Pattern(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*",
                       "an operator name namespace::op.overload")
# A symbolic size: an integer, or an expression over the file's symbols (serialize/exprs.py grammar).
EXPR = Union("Expr", Int, Str)
BOUND = Union("Bound", Number, OneOf("oo", "-oo"))


def _tagged_values(name: str, extra: dict[str, Any]) -> Union:
    """Plain values as tagged JSON (serialize/values.py), plus the ``extra`` tags of one context."""
    value = Ref(name)
    tags = {"tuple": ListOf(value), "list": ListOf(value), "size": ListOf(value),
            "dict": ListOf(Tuple(value, value)), "float": OneOf("inf", "-inf", "nan"),
            "complex": Tuple(value, value), "dtype": Str, "layout": Str, "memory_format": Str,
            "device": Str, "slice": Tuple(value, value, value), "ellipsis": Null, **extra}
    return value.bind(Union(name, Null, Bool, Number, Str, Tagged(name + "Tag", tags)))


PLAIN_VALUE = _tagged_values("PlainValue", {})
# A tensor subclass's flatten context: plain values, enum members and dataclasses (serialize/tensors.py).
_subclass_context = Ref("SubclassContext")
SUBCLASS_CONTEXT = _tagged_values("SubclassContext", {"enum": Tuple(Str, Str),
                                                      "dataclass": Tuple(Str, ListOf(Tuple(Str, _subclass_context)))})
_subclass_context.bind(SUBCLASS_CONTEXT)
_tensor_meta = Ref("TensorMeta")
# A tensor subclass that flattens into inner tensors: its class, flatten context and inner tensors' metadata.
TENSOR_META = _tensor_meta.bind(Record(
    "TensorMeta", {"shape": ListOf(EXPR), "stride": ListOf(EXPR), "offset": EXPR, "dtype": Str, "device": Str,
                   "requires_grad": Bool},
    {"subclass": Record("SubclassMeta", {"class": Str, "context": SUBCLASS_CONTEXT, "inner": MapOf(_tensor_meta)})}))
# meta['val'] of a node: tensors as their metadata, symbolic scalars as expressions.
META_VALUE = _tagged_values("MetaValue", {"tensor": TENSOR_META, "symint": EXPR, "symfloat": EXPR,
                                          "symbool": EXPR})
# A node's arguments: other nodes by name, symbolic scalars, operators passed as values.
ARG_VALUE = _tagged_values("ArgValue", {"node": IDENT, "symint": EXPR, "symfloat": EXPR, "symbool": EXPR,
                                        "op": OPERATOR_KEY, "hop": IDENT})
CALL_TARGET = Tagged("CallTarget", {"op": OPERATOR_KEY, "hop": IDENT, "python": Str})
NODE_META = Record("NodeMeta", {}, {
    "val": META_VALUE, "stack_trace": Union("StackTrace", Str, Null),
    "nn_module_stack": ListOf(Tuple(Str, Str, Str)),  # [key, module path, module class]
    "source_fn_stack": ListOf(Tuple(Str, Str)), "torch_fn": Tuple(Str, Str), "tensor_meta": OneOf(True),
    "custom": PLAIN_VALUE,  # the user's annotations (torch.fx.traceback.annotate): a dict of plain values
    # each unbacked symbol the node introduces, with the path into its value (serialize/binding_paths.py)
    "unbacked_bindings": ListOf(Tuple(EXPR, ListOf(Tagged("BindingKey", {
        "index": Int, "key": PLAIN_VALUE, "attr": Str, "method": Str, "inner": Str, "divide": Int,
        "int": Null}))))})
NODE = Record("Node", {"name": IDENT, "op": OneOf("placeholder", "call_function", "get_attr", "output"),
                       "target": Union("NodeTarget", IDENT, CALL_TARGET), "args": ListOf(ARG_VALUE),
                       "kwargs": MapOf(ARG_VALUE), "meta": NODE_META})
_graph_module = Ref("GraphModule")
GRAPH_MODULE = _graph_module.bind(Record("GraphModule", {"nodes": ListOf(NODE), "subgraphs": MapOf(_graph_module)}))

SYMBOL = Record("Symbol", {"name": IDENT, "assumptions": MapOf(Bool), "min": Union("MaybeBound", BOUND, Null),
                           "max": Union("MaybeBound", BOUND, Null), "hint": Union("MaybeInt", Int, Null)})
SIGNATURE_ARGUMENT = Tagged("SignatureArgument", {"tensor": Str, "symint": Str, "symfloat": Str, "symbool": Str,
                                                  "constant": Tuple(Str, PLAIN_VALUE)})
MAYBE_STR = Union("MaybeString", Str, Null)
# The kind names the format knows, in the order it declared them (the kinds are torch's enums,
# whose order and members are torch's to change; the file's are not).
INPUT_KINDS = ("USER_INPUT", "PARAMETER", "BUFFER", "CONSTANT_TENSOR", "CUSTOM_OBJ", "TOKEN")
OUTPUT_KINDS = ("USER_OUTPUT", "LOSS_OUTPUT", "BUFFER_MUTATION", "GRADIENT_TO_PARAMETER", "GRADIENT_TO_USER_INPUT",
                "USER_INPUT_MUTATION", "TOKEN", "PARAMETER_MUTATION")
SIGNATURE = Record("Signature", {
    "inputs": ListOf(Record("InputSpec", {"kind": OneOf(*INPUT_KINDS), "arg": SIGNATURE_ARGUMENT,
                                          "target": MAYBE_STR, "persistent": Union("MaybeBool", Bool, Null)})),
    "outputs": ListOf(Record("OutputSpec", {"kind": OneOf(*OUTPUT_KINDS), "arg": SIGNATURE_ARGUMENT,
                                            "target": MAYBE_STR}))})

# A TreeSpec: null for a leaf, else its type's serialized name, context and children.
CONTEXT_VALUE = _tagged_values("ContextValue", {"namedtuple": Tuple(Str, ListOf(Str)), "type": Str,
                                                "dumpable": Str})
_tree_spec = Ref("TreeSpec")
TREE_SPEC = _tree_spec.bind(Union("TreeSpec", Null, Record("TreeNode", {
    "type": Str, "context": CONTEXT_VALUE, "children": ListOf(_tree_spec)}, {"flattened": OneOf("attributes")})))
MODULE_CALL = Record("ModuleCall", {"fqn": Str, "signature": Union("MaybeModuleCallSignature", Null, Record(
    "ModuleCallSignature", {"inputs": ListOf(SIGNATURE_ARGUMENT), "outputs": ListOf(SIGNATURE_ARGUMENT),
                            "in_spec": TREE_SPEC, "out_spec": TREE_SPEC,
                            "forward_arg_names": Union("MaybeNames", ListOf(Str), Null)}))})

# Weights, constants, example inputs: name -> where the tensor's bytes are (serialize/tensors.py).
TENSOR_VIEW = Record("TensorView", {
    "storage": Union("MaybeStorage", Str, Null), "dtype": Str, "shape": ListOf(Int), "stride": ListOf(Int),
    "offset": Int, "device": Str, "requires_grad": Bool, "parameter": Bool})
# A tensor subclass (``__tensor_flatten__``): its class, context, outer layout and inner tensors.
_stored_inner = Ref("InnerTensor")
TENSOR_SUBCLASS = Record("TensorSubclass", {
    "subclass": Str, "context": SUBCLASS_CONTEXT, "inner": MapOf(_stored_inner), "dtype": Str, "shape": ListOf(Int),
    "stride": ListOf(Int), "device": Str, "requires_grad": Bool, "parameter": Bool})
_stored_inner.bind(Union("InnerTensor", TENSOR_VIEW, TENSOR_SUBCLASS))
TENSOR_TABLE = MapOf(Union("StoredTensor", Record("TensorAlias", {"alias_of": Str}), TENSOR_VIEW, TENSOR_SUBCLASS))
EXAMPLE_VALUE = _tagged_values("ExampleValue", {"tensor": Str})

PROGRAM = Record("Program", {
    "format_version": Int,
    "producer": Record("Producer", {"torch": Str}),
    "symbols": ListOf(SYMBOL),
    "range_constraints": ListOf(Tuple(EXPR, BOUND, BOUND)),
    "graph_module": GRAPH_MODULE,
    "signature": SIGNATURE,
    "module_call_graph": ListOf(MODULE_CALL),
    "state": Record("State", {"weights": TENSOR_TABLE, "constants": TENSOR_TABLE}, {
        # CRC-32 of each tensor entry's safetensors header and of each storage: what mmap loads check
        "checksums": MapOf(Record("Checksums", {"algorithm": OneOf("crc32"), "header": Str,
                                                "storages": MapOf(Str)}))}),
    "operators": MapOf(Str),  # operator name -> its schema, checked against the loading process's
    # operator namespace -> the operator-set version the program was written against (serialize/opsets.py)
    "opset_version": MapOf(Int),
}, {
    "ir": Record("IRLevel", {"level": OneOf("training", "inference"), "kept": ListOf(Str)}),
    "example_inputs": Record("ExampleInputs", {"leaves": ListOf(EXAMPLE_VALUE), "tensors": TENSOR_TABLE}),
    # what export assumed about the input sizes (graphcap.dynamic.assumptions.Assumption), for the report
    "assumptions": ListOf(Record("Assumption", {"kind": Str, "dim": Str, "text": Str, "where": Str,
                                                "framework": Bool})),
    # the spec's Dim names of the program's symbols (ep.export_dim_names: symbol text -> Dim name)
    "dim_names": MapOf(Str),
    # the program graph module's meta["custom"]: the user's annotations of the whole program
    "custom": PLAIN_VALUE,
})


def program_fingerprint() -> str:
    """The fingerprint of ``PROGRAM``: recorded in ``CHANGELOG`` for each version."""
    return fingerprint(PROGRAM)


def check_written(program: dict[str, Any]) -> None:
    """Refuse to write a program.json that does not follow ``PROGRAM`` (a graphcap bug, caught at save)."""
    check(PROGRAM, program, what="The program.json graphcap.save was about to write", version=FORMAT_VERSION,
          fix="Report this as a graphcap bug: the encoder (serialize/encode.py) and the declared format "
              "(serialize/schema.py) disagree. If the format changed on purpose, declare it in PROGRAM, bump "
              "FORMAT_VERSION and add a CHANGELOG line.")


def check_read(program: Any, version: int) -> None:
    """Refuse a file's program.json (already brought to today's version) that does not follow ``PROGRAM``."""
    origin = "" if version == FORMAT_VERSION else f" (written as format version {version}, upgraded on loading)"
    check(PROGRAM, program, what=f"The file's program.json{origin}", version=FORMAT_VERSION,
          fix="The file is damaged, was crafted, or was written by a graphcap whose format this one does not "
              "know; save the program again with graphcap.save (from the graphcap that exported it).")
