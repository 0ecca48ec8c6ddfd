"""The .pt2 format: its version, its changelog, its entry names and limits.

Every change to what ``encode`` writes or ``decode`` reads gets a new
``FORMAT_VERSION`` and a dated line in ``CHANGELOG`` below, and the released
version keeps a golden file under ``tests/golden/`` that must still load; a
change in how a version's files are brought to today's program form as they
load (what is written unchanged) gets a dated note under the changelog. A
reader accepts every version listed in ``READABLE_VERSIONS`` and refuses newer
ones with a clear error (upgrade graphcap) rather than misreading them.

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

FORMAT_VERSION = 1

# version -> (date, what changed). Append; never rewrite a released line.
CHANGELOG: dict[int, tuple[str, str]] = {
    1: ("2026-11-22",
        "First format: zip with version + manifest (sha256 per entry), program.json "
        "(graph nodes with tagged JSON arguments, node metadata val/stack_trace/"
        "nn_module_stack/source_fn_stack/torch_fn, nested subgraphs for get_attr of "
        "GraphModules, signature, range constraints with symbol assumptions and hints, "
        "module call graph, TreeSpecs by serialized type name, operator schemas), "
        "weights/constants in safetensors as one entry per storage (aliasing kept), "
        "example inputs (tensors in safetensors, other leaves in program.json), "
        "extra files under extra/; an optional 'ir' entry (level and kept operators) "
        "for programs in the inference IR, so a loaded one is verified by the same rules."),
}

# Upgrades on load, the format unchanged (dated; the code is serialize/upgrade.py):
# 2026-11-23, version 1: training-IR programs no longer list BUFFER_MUTATION / USER_INPUT_MUTATION
#   outputs (the writes are in-place operators of the graph, as in torch's training IR); a file
#   that lists them is upgraded as it loads. Inference-IR programs keep their mutation outputs.

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
