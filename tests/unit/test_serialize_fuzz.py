"""Fuzzing graphcap.load with mutated valid files: only graphcap errors, never a
crash, a hang, or a foreign exception.

Two mutators: raw bytes of the archive (flips, overwrites, truncation — these
mostly exercise the zip layer, the manifest and the content hashes), and
program.json itself with the archive rewritten around it so the hashes match
(these reach the decoder: wrong types, missing fields, odd values anywhere in
the tree). The default run is short; ``-m slow`` runs 10,000 files.
"""
from __future__ import annotations

import functools
import io
import json
import signal
import time

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphcap
from graphcap.errors import GraphcapError
from graphcap.serialize import schema
from graphcap.serialize.archive import read_entries, write_archive


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x, scale: float = 2.0):
        self.count.add_(1)
        y = self.lin(x).relu() * scale
        return {"y": y, "n": self.count + y.shape[0]}


@functools.lru_cache(maxsize=1)
def _valid() -> tuple[bytes, dict]:
    x = torch.randn(3, 4)
    kwargs = {}
    dynamic = None
    if hasattr(graphcap, "Dim"):
        dynamic = ({0: graphcap.Dim("b", min=2, max=16)}, None)
    try:
        ep = graphcap.export(Small(), (x, 2.0), dynamic_shapes=dynamic)
    except GraphcapError:
        ep = graphcap.export(Small(), (x, 2.0), kwargs)
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    data = buf.getvalue()
    return data, json.loads(read_entries(io.BytesIO(data))[schema.PROGRAM_ENTRY])


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang("graphcap.load took more than 20 s on a mutated file")


_LIMIT_S = 20


def _load_only_graphcap_errors(data: bytes) -> None:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(_LIMIT_S)
    start = time.monotonic()
    try:
        ep = graphcap.load(io.BytesIO(data))
        str(ep)  # a file that loads must also print
    except GraphcapError:
        pass
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    # the alarm can fire inside a gc callback, where its exception is swallowed
    assert time.monotonic() - start < _LIMIT_S, "graphcap.load took too long on a mutated file"


_byte_edits = st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=8)


def _apply_byte_edits(data: bytes, edits, cut) -> bytes:
    buf = bytearray(data)
    for where, value in edits:
        buf[int(where * len(buf))] = value
    if cut is not None:
        buf = buf[:int(cut * len(buf))]
    return bytes(buf)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) |
    st.text(max_size=12) | st.sampled_from(["oo", "-oo", "s0", "torch.float32", "cpu", "aten::add.Tensor",
                                             "builtins.tuple", "x", "2*s0 + 1"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["node", "tuple", "list", "dict", "tensor", "symint", "op", "python", "hop", "dtype",
                         "device", "float", "constant", "namedtuple", "type", "name", "shape"]), inner, max_size=2),
    max_leaves=8)


def _paths(tree, prefix=()):
    yield prefix
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from _paths(v, prefix + (i,))


@functools.lru_cache(maxsize=1)
def _all_paths() -> list:
    return [p for p in _paths(_valid()[1]) if p]


def _mutate_json(program: dict, path: tuple, value, delete: bool) -> dict:
    program = json.loads(json.dumps(program))
    parent = program
    for key in path[:-1]:
        parent = parent[key]
    if delete and isinstance(parent, dict):
        parent.pop(path[-1], None)
    elif delete and isinstance(parent, list):
        parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    return program


def _with_program(program: dict) -> bytes:
    entries = read_entries(io.BytesIO(_valid()[0]))
    entries[schema.PROGRAM_ENTRY] = json.dumps(program).encode()
    out = io.BytesIO()
    write_archive(out, entries)
    return out.getvalue()


def _byte_fuzz(edits, cut):
    _load_only_graphcap_errors(_apply_byte_edits(_valid()[0], edits, cut))


def _json_fuzz(index, value, delete):
    paths = _all_paths()
    program = _mutate_json(_valid()[1], paths[index % len(paths)], value, delete)
    _load_only_graphcap_errors(_with_program(program))


_SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)


@settings(max_examples=60, **_SETTINGS)
@given(edits=_byte_edits, cut=st.none() | st.floats(0, 1))
def test_fuzz_archive_bytes(edits, cut):
    _byte_fuzz(edits, cut)


@settings(max_examples=120, **_SETTINGS)
@given(index=st.integers(0, 10**6), value=_json_values, delete=st.booleans())
def test_fuzz_program_json(index, value, delete):
    _json_fuzz(index, value, delete)


@pytest.mark.slow
@settings(max_examples=4000, **{**_SETTINGS, "derandomize": False})
@given(edits=_byte_edits, cut=st.none() | st.floats(0, 1))
def test_fuzz_archive_bytes_10k(edits, cut):
    _byte_fuzz(edits, cut)


@pytest.mark.slow
@settings(max_examples=6000, **{**_SETTINGS, "derandomize": False})
@given(index=st.integers(0, 10**6), value=_json_values, delete=st.booleans())
def test_fuzz_program_json_10k(index, value, delete):
    _json_fuzz(index, value, delete)
