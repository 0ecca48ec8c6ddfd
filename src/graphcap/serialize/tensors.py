"""Weights and constants in safetensors, one entry per storage.

safetensors refuses tensors that share memory, and a program's tied weights
must come back tied. So tensors are grouped by the storage they view: each
storage is written once (as a flat tensor), and every tensor is described in
program.json by its storage, dtype, shape, strides and offset, then rebuilt
with ``as_strided`` — which also restores non-contiguous tensors as they were.
Several names for the *same* tensor object come back as the same object.

Loading reads the safetensors entry with the safetensors library, or, with
``mmap=True``, maps the archive file and builds tensors over the mapping
(copy-on-write), so weights stay on disk until a kernel touches them.

A tensor subclass that flattens into inner tensors (``__tensor_flatten__``:
``TwoTensor``, a quantized weight) is described by its class's qualified name,
its flatten context (a plain value), its outer shape and strides, and the
description of each inner tensor (nested subclasses recursively); the inner
tensors' storages are stored like any other. Loading finds the class only
below packages the process already imported (:mod:`.class_lookup`) and
rebuilds the value with the class's ``__tensor_unflatten__``.

A program saved with ``weights=False`` describes its weights without data
(``"storage": null``: dtype, shape, strides, requires_grad only), and so does
any constant without data (on the meta device, or fake); the loader then
attaches them from a checkpoint (``graphcap.serialize.checkpoints``).
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import mmap
import os
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional, cast

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from ..errors import SerializationError
from ..torch_private.dispatch import is_traceable_wrapper_subclass
from ..torch_private.fake import FakeTensor
from . import class_lookup, placement
from .values import DTYPES, Unencodable, bad, decode_device, decode_value, encode_value

# safetensors' dtype codes (its file format), for the memory-mapped reader.
_CODES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool, "C64": torch.complex64,
}
for _code, _name in (("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2"), ("F8_E4M3FNUZ", "float8_e4m3fnuz"),
                     ("F8_E5M2FNUZ", "float8_e5m2fnuz"), ("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64")):
    if hasattr(torch, _name):
        _CODES[_code] = getattr(torch, _name)
SUPPORTED_DTYPES = frozenset(_CODES.values())
# dtypes safetensors has no code for, stored as their storage's bytes (a uint8 storage, as a storage
# that several dtypes view is stored) and viewed as the described dtype on load: float64 complex
# numbers, half-precision complex, the scale and packed-4-bit float formats, bit and sub-byte types.
BYTE_STORED_DTYPES = frozenset(
    getattr(torch, name) for name in (
        "complex128", "complex32", "float8_e8m0fnu", "float4_e2m1fn_x2",
        "bits8", "bits16", "bits1x8", "bits2x4", "bits4x2",
        *(f"uint{i}" for i in range(1, 8)), *(f"int{i}" for i in range(1, 8)))
    if isinstance(getattr(torch, name, None), torch.dtype)) - SUPPORTED_DTYPES
STORABLE_DTYPES = SUPPORTED_DTYPES | BYTE_STORED_DTYPES


def _unsupported_dtype(name: str, dtype: torch.dtype) -> SerializationError:
    names = ", ".join(sorted(str(d).replace("torch.", "") for d in STORABLE_DTYPES))
    return SerializationError(
        f"Tensor {name!r} has dtype {dtype}, which the .pt2 format cannot store.",
        where=f"state_dict/constants[{name!r}]",
        fix=f"Convert it to one of: {names} (for example keep a float32 copy and convert inside "
            f"forward), then export and save again.")


def _check_tensor(name: str, t: Any) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise SerializationError(
            f"{name!r} is a {type(t).__name__}, not a tensor; only tensors can be saved as weights or "
            f"constants.", where=f"state_dict/constants[{name!r}]",
            fix="Script objects and other opaque constants are not supported by the .pt2 format yet.")
    plain = type(t) in (torch.Tensor, torch.nn.Parameter) or isinstance(t, FakeTensor)
    if not plain or t.is_quantized or t.layout != torch.strided:
        raise SerializationError(
            f"{name!r} is a {type(t).__name__} with layout {t.layout}; only plain strided tensors can "
            f"be saved.", where=f"state_dict/constants[{name!r}]",
            fix="Convert it to a plain dense tensor before export.")
    if not has_data(t):
        raise SerializationError(
            f"{name!r} has no data (it is on the meta device or fake), so it cannot be saved.",
            where=f"state_dict/constants[{name!r}]",
            fix="Save the structure alone with graphcap.save(ep, f, weights=False) and attach the weights "
                "when loading (graphcap.load(f, weights='checkpoint/dir')), or export a model whose weights "
                "hold data.")
    if t.dtype not in STORABLE_DTYPES:
        raise _unsupported_dtype(name, t.dtype)
    return t


def has_data(t: torch.Tensor) -> bool:
    """False for tensors that only describe a shape: on the meta device, or fake."""
    return t.device.type != "meta" and not isinstance(t, FakeTensor)


def _describe_without_data(name: str, t: Any) -> dict[str, Any]:
    if not isinstance(t, torch.Tensor):
        _check_tensor(name, t)  # raises: only tensors are state
    if t.layout != torch.strided or t.is_quantized or str(t.dtype) not in DTYPES:
        raise SerializationError(
            f"{name!r} is a {type(t).__name__} with layout {t.layout} and dtype {t.dtype}; only plain "
            f"strided tensors can be described.", where=f"state_dict/constants[{name!r}]",
            fix="Convert it to a plain dense tensor before export.")
    return {"storage": None, "dtype": str(t.dtype), "shape": [int(s) for s in t.shape],
            "stride": [int(s) for s in t.stride()], "offset": 0, "device": str(t.device),
            "requires_grad": _trainable(t), "parameter": isinstance(t, torch.nn.Parameter)}


def _trainable(t: torch.Tensor) -> bool:
    """Whether a loaded copy of ``t`` should require grad: a leaf that does. A tensor that requires
    grad only because it was computed from parameters (a cache buffer written in place by an eager
    forward with grad on: transformers' static cache) carries history, not a setting; loaded as a
    leaf that requires grad, the program's in-place write to it would be refused."""
    return bool(t.requires_grad and t.is_leaf)


def pack_structure(tensors: dict[str, torch.Tensor], *, keep_data: bool) -> tuple[bytes, dict[str, Any]]:
    """Like :func:`pack` for ``save(..., weights=False)``: tensors described without data.

    With ``keep_data`` the tensors that have data are still stored (constants:
    rotary tables, lifted literals — part of the program, and in no checkpoint);
    those without (meta, fake) are described only. Several names for one
    tensor object stay aliases of the first, so tied weights stay tied.
    """
    stored = {n: t for n, t in tensors.items()
              if keep_data and isinstance(t, torch.Tensor) and has_data(t)}
    data, described_stored = pack(stored)
    first_name: dict[int, str] = {}  # of each data-less tensor object (the stored ones are aliased by pack)
    described: dict[str, Any] = {}
    for name, t in tensors.items():
        if name in described_stored:
            described[name] = described_stored[name]
        elif id(t) in first_name:
            described[name] = {"alias_of": first_name[id(t)]}
        else:
            first_name[id(t)] = name
            described[name] = _describe_without_data(name, t)
    return data, described


def without_data(described: Any) -> list[str]:
    """Names the file describes but holds no data for (aliases of them included)."""
    if not isinstance(described, dict):
        return []
    missing = {n for n, d in described.items() if isinstance(d, dict) and "storage" in d and d["storage"] is None}
    return [n for n, d in described.items()
            if n in missing or (isinstance(d, dict) and d.get("alias_of") in missing)]


def subclass_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def encode_subclass_context(ctx: Any) -> Any:
    """A subclass's ``__tensor_flatten__`` context as tagged JSON: plain values, plus the options
    objects quantized weights keep there (torchao: a dataclass holding a dataclass and an enum
    member), written as ``{"dataclass": [class, [[field, value], ...]]}`` and
    ``{"enum": [class, member]}``. Raises ``Unencodable`` for anything else."""
    def extra(v: Any) -> Any:
        if isinstance(v, enum.Enum):
            return {"enum": [subclass_name(type(v)), v.name]}
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {"dataclass": [subclass_name(type(v)),
                                  [[f.name, encode_value(getattr(v, f.name), extra)] for f in dataclasses.fields(v)]]}
        return NotImplemented
    return encode_value(ctx, extra)


def decode_subclass_context(j: Any, where: str) -> Any:
    """Inverse of :func:`encode_subclass_context`. A class is found only where
    :mod:`.class_lookup` may look; a dataclass is rebuilt by setting its fields (its ``__init__``
    does not run, as for the other objects a file rebuilds by attributes)."""
    def found(name: Any, kind: str) -> type:
        cls = class_lookup.find_class(name) if isinstance(name, str) else None
        if cls is None:
            module = name.rsplit(".", 1)[0] if isinstance(name, str) else "its module"
            raise SerializationError(
                f"{where}: the subclass's flatten context holds a {name!r:.200}, a {kind} this process has not "
                f"imported.", where=where,
                fix=f"Import the module that defines it before loading (import {module}), or name it: "
                    f"graphcap.load(f, import_modules=[{module!r}]).")
        return cls

    def extra(tag: str, payload: Any) -> Any:
        if tag == "enum" and isinstance(payload, list) and len(payload) == 2:
            cls = found(payload[0], "enum")
            if not (issubclass(cls, enum.Enum) and isinstance(payload[1], str) and payload[1] in cls.__members__):
                raise bad(f"{where}: {payload[0]!r:.200} has no enum member {payload[1]!r:.80}.")
            return cls[payload[1]]
        if tag == "dataclass" and isinstance(payload, list) and len(payload) == 2 and isinstance(payload[1], list):
            cls = found(payload[0], "dataclass")
            names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
            items = payload[1]
            if not (names and class_lookup.may_rebuild_by_attributes(cls)
                    and all(isinstance(i, list) and len(i) == 2 and i[0] in names for i in items)
                    and {i[0] for i in items} == names):
                raise bad(f"{where}: the fields written for {payload[0]!r:.200} are not the fields of that "
                          f"dataclass.")
            obj: Any = object.__new__(cls)
            for name, value in items:
                object.__setattr__(obj, name, decode_value(value, extra))
            return obj
        raise bad(f"{where}: an unknown value {tag!r:.80} in a subclass's flatten context.")
    return decode_value(j, extra)


def _describe_subclass(name: str, t: torch.Tensor, depth: int, describe_inner: Any) -> dict[str, Any]:
    """A traceable wrapper subclass: its class, flatten context, outer layout, and inner tensors."""
    cls = type(t)
    qualname = subclass_name(cls)
    where = f"state_dict/constants[{name!r}]"
    if "<locals>" in cls.__qualname__:
        raise SerializationError(
            f"{name!r} is a {cls.__qualname__}, a tensor subclass defined inside a function; a loading "
            f"process could not find the class by its name.", where=where,
            fix=f"Define {cls.__name__} at the top level of a module, which the loading process imports "
                f"before graphcap.load.")
    if depth > 16:
        raise SerializationError(f"{name!r} nests tensor subclasses more than 16 deep.", where=where,
                                 fix="Flatten the subclass before export.")
    attrs, ctx = t.__tensor_flatten__()  # type: ignore[attr-defined]
    try:
        context = encode_subclass_context(ctx)
    except Unencodable as e:
        raise SerializationError(
            f"{name!r} is a {qualname} whose __tensor_flatten__ context is {e}; the .pt2 format stores "
            f"plain values only (numbers, strings, dtypes, devices, tuples, lists, dicts, enum members "
            f"and dataclasses of these).", where=where,
            fix=f"Make {cls.__name__}.__tensor_flatten__ return a context of plain values.") from None
    inner = {}
    for attr in attrs:
        value = getattr(t, attr)
        if not isinstance(value, torch.Tensor):
            raise SerializationError(
                f"{name!r} is a {qualname} whose attribute {attr!r}, listed by __tensor_flatten__, is a "
                f"{type(value).__name__}, not a tensor.", where=where,
                fix=f"List only tensor attributes in {cls.__name__}.__tensor_flatten__.")
        inner[attr] = describe_inner(f"{name}.{attr}", value)
    return {"subclass": qualname, "context": context, "inner": inner, "dtype": str(t.dtype),
            "shape": [int(x) for x in t.shape], "stride": [int(x) for x in t.stride()], "device": str(t.device),
            "requires_grad": bool(t.requires_grad), "parameter": isinstance(t, torch.nn.Parameter) and depth == 0}


def pack(tensors: dict[str, torch.Tensor]) -> tuple[bytes, dict[str, Any]]:
    """safetensors bytes holding each storage once, and the per-name description."""
    blobs: dict[str, torch.Tensor] = {}
    by_object: dict[int, str] = {}
    by_storage: dict[tuple[Any, ...], str] = {}
    storage_tensors: dict[str, list[torch.Tensor]] = {}
    described: dict[str, Any] = {}

    def view(name: str, t: torch.Tensor, parameter: bool) -> dict[str, Any]:
        storage = t.untyped_storage()
        key = (t.device, storage.data_ptr(), storage.nbytes()) if storage.nbytes() else ("empty", name)
        sname = by_storage.setdefault(key, name)
        storage_tensors.setdefault(sname, []).append(t)
        return {"storage": sname, "dtype": str(t.dtype), "shape": list(t.shape), "stride": list(t.stride()),
                "offset": t.storage_offset(), "device": str(t.device), "requires_grad": _trainable(t),
                "parameter": parameter}

    def describe(name: str, t: Any, depth: int = 0) -> dict[str, Any]:
        if is_traceable_wrapper_subclass(t):
            return _describe_subclass(name, t, depth, lambda inner_name, inner: describe(inner_name, inner, depth + 1))
        t = _check_tensor(name, t)
        return view(name, t, isinstance(t, torch.nn.Parameter) and depth == 0)

    for name, t in tensors.items():
        if id(t) in by_object:
            described[name] = {"alias_of": by_object[id(t)]}
            continue
        by_object[id(t)] = name
        described[name] = describe(name, t)
    for sname, members in storage_tensors.items():
        storage = members[0].untyped_storage()
        dtypes = {m.dtype for m in members}
        dtype = members[0].dtype if (len(dtypes) == 1 and members[0].dtype in SUPPORTED_DTYPES
                                     and storage.nbytes() % members[0].element_size() == 0) else torch.uint8
        itemsize = torch.empty((), dtype=dtype).element_size()
        with torch.no_grad():
            flat = torch.empty(0, dtype=dtype, device=members[0].device)
            flat.set_(storage, 0, (storage.nbytes() // itemsize,), (1,))
            flat = flat.detach()
            # safetensors copies the bytes while serializing: no copy of our own on CPU.
            blobs[sname] = flat if flat.device.type == "cpu" else flat.cpu()
    return st_save(blobs, metadata={"format": "graphcap"}), described


# ---------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------

def _rebuild(name: str, d: dict[str, Any], blobs: dict[str, torch.Tensor]) -> torch.Tensor:
    try:
        blob = blobs[d["storage"]]
        dtype = DTYPES[d["dtype"]]
        shape, stride, offset = d["shape"], d["stride"], d["offset"]
        saved_on = decode_device(d["device"])
    except (KeyError, TypeError):
        raise bad(f"The description of tensor {name!r} is malformed or names a missing storage.") from None
    device = placement.placed_device(saved_on)
    ints = [*shape, *stride, offset]
    if not (isinstance(shape, list) and isinstance(stride, list) and len(shape) == len(stride)
            and all(type(x) is int for x in ints) and all(x >= 0 for x in ints)):
        raise bad(f"The shape/stride/offset of tensor {name!r} are malformed.")
    if dtype not in STORABLE_DTYPES:
        raise bad(f"Tensor {name!r} has dtype {dtype}, which the format never stores.")
    base = blob
    if blob.dtype != dtype:
        itemsize = torch.empty((), dtype=dtype).element_size()
        if blob.dtype != torch.uint8 or blob.numel() % itemsize:
            raise bad(f"Tensor {name!r} cannot be viewed as {dtype} over its storage.")
        base = blob.view(dtype)
    numel = 1
    for s in shape:
        numel *= s
    if numel:
        extent = offset + sum((s - 1) * st for s, st in zip(shape, stride)) + 1
        if extent > base.numel():
            raise bad(f"Tensor {name!r} reaches past the end of its storage.")
    t = base.as_strided(shape, stride, offset)
    if device.type != "cpu":
        try:
            t = t.to(device)
        except (RuntimeError, AssertionError) as e:
            raise SerializationError(
                f"Tensor {name!r} was saved on {saved_on} and is loaded onto {device}, which this process "
                f"cannot use ({e}).",
                where=f"state_dict/constants[{name!r}]",
                fix="Load it onto a device this machine has: graphcap.load(f, map_location='cpu').") from None
    if d.get("parameter"):
        return torch.nn.Parameter(t, requires_grad=bool(d.get("requires_grad")))
    if d.get("requires_grad") and t.is_floating_point():
        # a leaf of its own, not a view of the file's storage: a program writing it in place under
        # no_grad (a cache that requires grad, as transformers' static cache leaves it) is refused
        # for a view of a tensor that requires grad
        t = t.detach().requires_grad_(True)
    return t


def find_subclass(qualname: Any, where: str) -> type:
    """The tensor subclass a file names, found only where :mod:`.class_lookup` may look."""
    cls = class_lookup.find_class(qualname) if isinstance(qualname, str) else None
    if cls is None:
        module = qualname.rsplit(".", 1)[0] if isinstance(qualname, str) else "its module"
        raise SerializationError(
            f"{where} is a tensor subclass, {qualname!r:.200}, which this process has not imported.",
            where=where,
            fix=f"Import the module that defines it before loading (import {module}), or name it: "
                f"graphcap.load(f, import_modules=[{module!r}]).")
    if not (issubclass(cls, torch.Tensor) and callable(getattr(cls, "__tensor_unflatten__", None))):
        raise bad(f"{where} names {qualname!r:.200}, which is not a tensor subclass that rebuilds from "
                  f"inner tensors (__tensor_unflatten__).")
    return cls


def unflatten_subclass(cls: Any, inner: dict[str, torch.Tensor], context: Any, shape: Any, stride: Any,
                       where: str) -> torch.Tensor:
    """``cls.__tensor_unflatten__`` on the inner tensors, checked to give a ``cls`` of the outer shape."""
    try:
        value = cls.__tensor_unflatten__(inner, context, torch.Size(shape), tuple(stride))
    except Exception as e:  # the class's own code refused what the file holds
        raise bad(f"{where}: {cls.__qualname__}.__tensor_unflatten__ refused the file's inner tensors "
                  f"({type(e).__name__}: {str(e)[:200]}).") from None
    if not isinstance(value, cls) or list(value.shape) != list(shape):
        raise bad(f"{where}: {cls.__qualname__}.__tensor_unflatten__ did not rebuild a {cls.__qualname__} "
                  f"of shape {list(shape)}.")
    return cast(torch.Tensor, value)


def _rebuild_subclass(name: str, d: dict[str, Any], blobs: dict[str, torch.Tensor], depth: int = 0
                      ) -> torch.Tensor:
    inner_described = d.get("inner")
    shape, stride = d.get("shape"), d.get("stride")
    if not (isinstance(inner_described, dict) and isinstance(shape, list) and isinstance(stride, list)
            and len(shape) == len(stride) and all(type(x) is int and x >= 0 for x in (*shape, *stride))):
        raise bad(f"The description of tensor subclass {name!r} is malformed.")
    if depth > 16:
        raise bad(f"Tensor {name!r} nests subclasses too deeply.")
    cls = find_subclass(d.get("subclass"), f"tensor {name!r}")
    inner: dict[str, torch.Tensor] = {}
    for attr, sub in inner_described.items():
        if not (isinstance(attr, str) and attr.isidentifier() and isinstance(sub, dict)) or "alias_of" in sub:
            raise bad(f"The inner tensor {attr!r:.80} of {name!r} is malformed.")
        inner[attr] = (_rebuild_subclass(f"{name}.{attr}", sub, blobs, depth + 1) if "subclass" in sub
                       else _rebuild(f"{name}.{attr}", sub, blobs))
    value = unflatten_subclass(cls, inner, decode_subclass_context(d.get("context"), f"tensor {name!r}"), shape,
                               stride, f"tensor {name!r}")
    if d.get("parameter"):
        return torch.nn.Parameter(value, requires_grad=bool(d.get("requires_grad")))
    if d.get("requires_grad") and value.is_floating_point():
        value.requires_grad_(True)
    return value


def _assemble(described: Any, blobs: dict[str, torch.Tensor],
              entry: str = "the tensor entry") -> dict[str, torch.Tensor]:
    if not isinstance(described, dict):
        raise bad("The tensor table is malformed.")
    out: dict[str, torch.Tensor] = {}
    skipped = set(without_data(described))  # attached from a checkpoint by the caller
    for name, d in described.items():
        if not isinstance(d, dict):
            raise bad(f"The description of tensor {name!r} is malformed.")
        if "alias_of" not in d and name not in skipped:
            out[name] = _rebuild_subclass(name, d, blobs) if "subclass" in d else _rebuild(name, d, blobs)
    for name, d in described.items():
        if "alias_of" in d and name not in skipped:
            target = out.get(d["alias_of"]) if isinstance(d["alias_of"], str) else None
            if target is None:
                raise bad(f"Tensor {name!r} is an alias of a tensor the file does not hold.")
            out[name] = target
    unused = sorted(set(blobs) - set(_storage_users(described)))
    if unused:  # save writes the storages its tensors use, no others: this entry is another save's
        more = f" (and {len(unused) - 1} more)" if len(unused) > 1 else ""
        raise bad(f"{entry!r} holds the storage {unused[0]!r}{more}, which no tensor program.json describes "
                  f"uses: the entry and program.json come from different saves.", where=entry)
    return dict((name, out[name]) for name in described if name not in skipped)


def unpack(data: bytes, described: Any, entry: str = "the tensor entry") -> dict[str, torch.Tensor]:
    try:
        blobs = st_load(data)
    except Exception as e:  # safetensors' own error type, or torch's on a bad header
        raise bad(f"The tensor data is not valid safetensors ({type(e).__name__}: {e}).", where=entry) from None
    return _assemble(described, blobs, entry)


# ---------------------------------------------------------------------------
# checksums: what a memory-mapped load checks (a load that reads the entry checks its sha256)
# ---------------------------------------------------------------------------

def _header_span(data: bytes) -> tuple[int, dict[str, Any]]:
    (n,) = struct.unpack("<Q", data[:8])
    return n, json.loads(data[8:8 + n])


def _crc(data: Any) -> str:
    return f"{zlib.crc32(data):08x}"


def checksums(data: bytes) -> dict[str, Any]:
    """CRC-32 of a safetensors entry's header and of each storage's bytes (written to program.json).

    A memory-mapped load checks them instead of reading the entry whole: the
    header, then every storage, each named by the tensors that view it. They
    detect damage (a flipped bit, a torn copy), which is what they are for: a
    file's author can write any checksum, so no checksum stored in the file
    could prove who wrote it. CRC-32 is three times faster than SHA-256 here
    and releases the GIL, so big weights are checked on several threads.
    """
    n, header = _header_span(data)
    body = memoryview(data)[8 + n:]
    storages = {key: _crc(body[e["data_offsets"][0]:e["data_offsets"][1]])
                for key, e in header.items() if key != "__metadata__"}
    return {"algorithm": "crc32", "header": _crc(memoryview(data)[:8 + n]), "storages": storages}


def _storage_users(described: Any, prefix: str = "") -> dict[str, list[str]]:
    users: dict[str, list[str]] = {}
    if isinstance(described, dict):
        for name, d in described.items():
            if isinstance(d, dict) and isinstance(d.get("storage"), str):
                users.setdefault(d["storage"], []).append(prefix + str(name))
            elif isinstance(d, dict) and isinstance(d.get("inner"), dict):  # a subclass: its inner tensors
                for key, names in _storage_users(d["inner"], f"{prefix}{name}.").items():
                    users.setdefault(key, []).extend(names)
    return users


def _damaged(entry: str, what: str) -> SerializationError:
    return SerializationError(
        f"{what}: the file was modified or damaged after it was saved.", where=entry,
        fix="Save the program again (graphcap.save(ep, path)) from the program it was saved from, or copy the "
            "file again from a good source.")


def _check_all(views: list[tuple[str, memoryview]]) -> dict[str, str]:
    """CRC-32 of each view, on several threads for big weights (zlib releases the GIL)."""
    total = sum(len(v) for _, v in views)
    workers = min(8, os.cpu_count() or 1) if total > (64 << 20) else 1
    if workers == 1:
        return {k: _crc(v) for k, v in views}
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip((k for k, _ in views), pool.map(lambda kv: _crc(kv[1]), views)))


def unpack_mmap(path: str, offset: int, size: int, described: Any, *, entry: str,
                sums: Optional[dict[str, Any]] = None, entry_sha256: Optional[str] = None
                ) -> dict[str, torch.Tensor]:
    """Like :func:`unpack`, with storages that map the file (offset/size: the entry's bytes).

    Before any tensor is returned the mapped bytes are checked: the header and
    each storage against ``sums`` (format 3, CRC-32), or, for an older file,
    the whole entry against ``entry_sha256`` from the manifest. Reading the
    mapping only pulls the file into the page cache (shared, evictable): the
    weights still take no private memory.
    """
    with open(path, "rb") as fh:
        mm: Optional[mmap.mmap] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY) if size else None
    view = memoryview(mm)[offset:offset + size] if mm is not None else memoryview(b"")
    if sums is None and entry_sha256 is not None and hashlib.sha256(view).hexdigest() != entry_sha256:
        raise _damaged(entry, f"Entry {entry!r} does not match its content hash")
    if len(view) < 8:
        raise bad("The tensor entry is truncated.", where=entry)
    (n,) = struct.unpack("<Q", view[:8])
    if n > size - 8:
        raise (_damaged(entry, f"The header of {entry!r} runs past the entry") if sums is not None
               else bad("The tensor entry's header runs past the entry.", where=entry))
    if sums is not None and sums.get("algorithm") != "crc32":
        raise bad(f"The checksums of {entry!r} use an unknown algorithm.")
    if sums is not None and _crc(view[:8 + n]) != sums.get("header"):
        raise _damaged(entry, f"The header of {entry!r} (its table of storages) does not match its checksum")
    try:
        header = json.loads(bytes(view[8:8 + n]))
    except Exception as e:
        raise bad(f"The tensor entry's header is not valid JSON ({e}).", where=entry) from None
    if not isinstance(header, dict):
        raise bad("The tensor entry's header is malformed.", where=entry)
    data_start = offset + 8 + n
    data_len = size - 8 - n
    blobs: dict[str, torch.Tensor] = {}
    spans: list[tuple[str, memoryview]] = []
    for key, item in header.items():
        if key == "__metadata__":
            continue
        try:
            dtype = _CODES[item["dtype"]]
            shape = item["shape"]
            begin, end = item["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise bad(f"The header entry for storage {key!r} is malformed.", where=entry) from None
        if not (isinstance(shape, list) and len(shape) == 1 and all(type(x) is int and x >= 0 for x in shape)
                and type(begin) is int and type(end) is int and 0 <= begin <= end <= data_len):
            raise bad(f"The header entry for storage {key!r} is out of bounds.", where=entry)
        itemsize = torch.empty((), dtype=dtype).element_size()
        if (end - begin) != shape[0] * itemsize:
            raise bad(f"Storage {key!r}'s size does not match its byte range.", where=entry)
        spans.append((key, view[8 + n + begin:8 + n + end]))
        if shape[0] == 0:
            blobs[key] = torch.empty(0, dtype=dtype)
            continue
        start = data_start + begin
        if start % itemsize:
            blobs[key] = torch.frombuffer(mm, dtype=torch.uint8, count=end - begin, offset=start).clone().view(dtype)
        else:
            blobs[key] = torch.frombuffer(mm, dtype=dtype, count=shape[0], offset=start)
    if sums is not None:
        storages = sums.get("storages")
        expected: dict[str, Any] = storages if isinstance(storages, dict) else {}
        if set(expected) != {k for k, _ in spans}:
            raise bad(f"The storages of {entry!r} are not the ones its checksums list.", where=entry)
        users = _storage_users(described)
        for key, digest in _check_all(spans).items():
            if digest != expected[key]:
                names = ", ".join(repr(u) for u in users.get(key, [key])[:4])
                raise _damaged(f"{entry} (storage of {names})",
                               f"The data of tensor {names} in {entry!r} does not match its checksum")
    return _assemble(described, blobs, entry)
