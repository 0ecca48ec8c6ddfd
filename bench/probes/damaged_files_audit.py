"""Damaged, foreign and hostile files handed to graphcap.load (audit 2026-11-27 late morning).

Saves a handful of varied programs, damages their files systematically and
classifies each load: refused with a graphcap error (good), loaded and equal to
the saved program (good), loaded with different numbers (BAD), any other
exception (BAD), code ran (BAD: a marker file appears). Run:

    PYTHONPATH=src python bench/probes/damaged_files_audit.py [--quick]
"""
from __future__ import annotations

import io
import json
import logging
import os
import pickle
import sys
import tempfile
import warnings
import zipfile
from collections import Counter

import torch

import graphcap
from graphcap.errors import GraphcapError
from graphcap.serialize import schema
from graphcap.serialize.archive import read_entries, write_archive

warnings.simplefilter("ignore")
logging.disable(logging.CRITICAL)
QUICK = "--quick" in sys.argv
MARK_DIR = tempfile.mkdtemp(prefix="h27e-mark-")
MARK = os.path.join(MARK_DIR, "ran")


# ---------------------------------------------------------------- programs
class Static(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x).relu()


class Dyn(torch.nn.Module):
    def forward(self, x, y):
        return x @ y.T + x.shape[0]


class Buf(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x):
        self.count.add_(1)
        return x * 2 + self.count


class Cond(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda v: v.sin(), lambda v: v.cos(), (x,))


class Quant(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4).to(torch.float16), requires_grad=False)
        self.register_buffer("s", torch.tensor([0.5], dtype=torch.float64))

    def forward(self, x):
        return (x.half() @ self.w).float() * self.s


class Nt(torch.nn.Module):
    def forward(self, x):
        return torch.return_types.max(x.max(0)) if False else {"a": x + 1, "b": (x * 2,)}


def programs():
    torch.manual_seed(0)
    out = {}
    out["static"] = (graphcap.export(Static(), (torch.randn(2, 4),)), (torch.randn(2, 4),), {})
    b = graphcap.Dim("b", min=2, max=64)
    out["dynamic"] = (graphcap.export(Dyn(), (torch.randn(3, 5), torch.randn(4, 5)),
                                      dynamic_shapes=({0: b}, None)), (torch.randn(7, 5), torch.randn(4, 5)), {})
    out["buffers"] = (graphcap.export(Buf(), (torch.randn(3),)), (torch.randn(3),), {})
    out["cond"] = (graphcap.export(Cond(), (torch.randn(3),)), (torch.randn(3),), {})
    out["fp16"] = (graphcap.export(Quant(), (torch.randn(2, 4),)), (torch.randn(2, 4),), {})
    out["extra"] = (graphcap.export(Nt(), (torch.randn(2),)), (torch.randn(2),),
                    {"notes.txt": "v3 weights", "blob.bin": bytes(range(256))})
    return out


def outputs(ep, args):
    return ep.module()(*[a.clone() for a in args])


def same(a, b):
    fa, sa = torch.utils._pytree.tree_flatten(a)
    fb, sb = torch.utils._pytree.tree_flatten(b)
    if sa != sb or len(fa) != len(fb):
        return False
    return all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(fa, fb))


# ---------------------------------------------------------------- classification
RESULTS: Counter = Counter()
BAD: list = []


def classify(case, data_or_path, expected, args, extra_names=(), mmap=False):
    if os.path.exists(MARK):
        os.unlink(MARK)
    extra = {n: None for n in extra_names}
    try:
        src = data_or_path if isinstance(data_or_path, str) else io.BytesIO(data_or_path)
        if mmap:
            src = os.path.join(MARK_DIR, "mmap.pt2")
            with open(src, "wb") as fh:
                fh.write(data_or_path)
        ep = graphcap.load(src, extra_files=extra, mmap=mmap)
        text = ""
        try:
            got = outputs(ep, args)
            kind = "loaded-equal" if same(got, expected) else "LOADED-DIFFERENT"
        except Exception as e:
            kind = f"LOADED-THEN-RUN-RAISED {type(e).__name__}"
            text = f"{e}"[:200]
    except GraphcapError as e:
        text = str(e)
        names = [schema.PROGRAM_ENTRY, schema.MANIFEST_ENTRY, schema.VERSION_ENTRY, "safetensors", "extra/",
                 "entry", "graphcap.load(", "Entry", "program.json"]
        kind = "refused" if getattr(e, "where", None) or any(n in text for n in names) else "refused-no-where"
    except RecursionError as e:
        kind = f"FOREIGN {type(e).__name__}"
        text = str(e)[:200]
    except Exception as e:
        kind = f"FOREIGN {type(e).__name__}"
        text = f"{e}"[:200]
    if os.path.exists(MARK):
        kind = "CODE-RAN"
    RESULTS[kind] += 1
    if kind not in ("refused", "loaded-equal"):
        BAD.append((case, kind, text if kind != "LOADED-DIFFERENT" else ""))
    return kind


def rewrite(data, mutate):
    """Rewrite the archive with hashes made to match (a hostile file, not a damaged one)."""
    entries = read_entries(io.BytesIO(data))
    mutate(entries)
    out = io.BytesIO()
    write_archive(out, entries)
    return out.getvalue()


def raw_zip(members):
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for name, data in members:
            zf.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
    return out.getvalue()


def members(data):
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return [(i.filename, zf.read(i)) for i in zf.infolist()]


def member_spans(data):
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        spans = []
        for i in zf.infolist():
            spans.append((i.filename, i.header_offset, i.header_offset + 30 + len(i.filename) + len(i.extra)
                          + 64 + i.file_size))
    return spans


# ---------------------------------------------------------------- damage
def byte_damage(name, data, expected, args):
    n = len(data)
    step = max(1, n // (40 if QUICK else 400))
    for cut in list(range(0, n, step)) + [n - 1, n - 22, n - 23]:
        classify(f"{name}: truncated at {cut}", data[:cut], expected, args)
    for member, start, end in member_spans(data):
        span = list(range(start, min(end, n)))
        pick = span[:: max(1, len(span) // (4 if QUICK else 24))]
        for pos in pick:
            for bit in (0, 7):
                buf = bytearray(data)
                buf[pos] ^= 1 << bit
                classify(f"{name}: bit {bit} of byte {pos} ({member})", bytes(buf), expected, args)
                if bit == 7:
                    classify(f"{name}: bit {bit} of byte {pos} ({member}), mmap=True", bytes(buf), expected, args,
                             mmap=True)
    # central directory
    for pos in range(n - 22 - 46, n, 3 if QUICK else 1):
        buf = bytearray(data)
        buf[pos] ^= 0xFF
        classify(f"{name}: central directory byte {pos}", bytes(buf), expected, args)


def member_damage(name, data, expected, args, other):
    ms = members(data)
    names = [m for m, _ in ms]
    for i, (m, _) in enumerate(ms):
        classify(f"{name}: member {m} deleted", raw_zip(ms[:i] + ms[i + 1:]), expected, args)
        classify(f"{name}: member {m} duplicated", raw_zip(ms + [ms[i]]), expected, args)
        classify(f"{name}: member {m} renamed", raw_zip(ms[:i] + [(m + ".x", ms[i][1])] + ms[i + 1:]), expected, args)
        classify(f"{name}: member {m} emptied", raw_zip(ms[:i] + [(m, b"")] + ms[i + 1:]), expected, args)
    classify(f"{name}: members reversed", raw_zip(ms[::-1]), expected, args)
    for bad_name in ("../evil.txt", "/tmp/evil.txt", "extra/../../evil", "extra/..", "program.json/x", "",
                     "C:\\evil", "extra/" + "a" * 300):
        classify(f"{name}: unexpected member {bad_name!r}", raw_zip(ms + [(bad_name, b"x")]), expected, args)
        classify(f"{name}: unexpected member {bad_name!r} (manifest agrees)",
                 rewrite(data, lambda e, n=bad_name: e.__setitem__(n, b"x")), expected, args,
                 extra_names=[bad_name.removeprefix("extra/")])
    # a member swapped with another program's
    oms = dict(members(other))
    for m in names:
        if m in oms:
            swapped = [(k, oms[m] if k == m else v) for k, v in ms]
            classify(f"{name}: member {m} from another program", raw_zip(swapped), expected, args)
            if m not in (schema.VERSION_ENTRY, schema.MANIFEST_ENTRY):
                classify(f"{name}: member {m} from another program (hashes agree)",
                         rewrite(data, lambda e, m=m: e.__setitem__(m, oms[m])), expected, args)


def set_path(tree, path, value):
    for k in path[:-1]:
        tree = tree[k]
    if value is DELETE:
        tree.pop(path[-1])
    else:
        tree[path[-1]] = value


DELETE = object()


def paths(tree, prefix=()):
    yield prefix
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(tree, list):
        for i, v in enumerate(tree):
            yield from paths(v, prefix + (i,))


def deep(n):
    v: object = 1
    for _ in range(n):
        v = [v]
    return v


HOSTILE_VALUES = [None, True, -1, 2**63, 2**200, 1e308, float("nan"), float("inf"), "", "x" * 10,
                  "os.system", "builtins.eval", {}, [], deep(900),
                  {"op": "os::system"}, {"op": "aten::does_not_exist.default"}, {"python": "builtins.eval"},
                  {"python": "os.system"}, {"hop": "os.system"}, "unittest.__main__.X",
                  {"node": "nope"}, {"tensor": {"shape": [2**40, 2**40]}}]


def json_damage(name, data, expected, args):
    program = json.loads(read_entries(io.BytesIO(data))[schema.PROGRAM_ENTRY])
    all_paths = [p for p in paths(program) if p]
    step = max(1, len(all_paths) // (25 if QUICK else 250))
    for p in all_paths[::step]:
        for value in HOSTILE_VALUES + [DELETE]:
            prog = json.loads(json.dumps(program))
            try:
                set_path(prog, p, value)
            except (KeyError, IndexError, TypeError):
                continue
            text = json.dumps(prog).encode()
            classify(f"{name}: program.json{list(p)} = {str(value)[:40] if value is not DELETE else 'deleted'}",
                     rewrite(data, lambda e, t=text: e.__setitem__(schema.PROGRAM_ENTRY, t)), expected, args)
    # whole-document edits
    for label, text in [("deep nesting", ("[" * 100000 + "]" * 100000)), ("NaN top", "NaN"), ("empty", ""),
                        ("not utf8", "\udcff"), ("version 99", json.dumps({**program, "format_version": 99})),
                        ("version -1", json.dumps({**program, "format_version": -1})),
                        ("version str", json.dumps({**program, "format_version": "6"}))]:
        body = text.encode("utf-8", "surrogateescape")
        classify(f"{name}: program.json {label}",
                 rewrite(data, lambda e, b=body: e.__setitem__(schema.PROGRAM_ENTRY, b)), expected, args)
    for label, body in [("version 99", b"99"), ("version 0", b"0"), ("version text", b"six"),
                        ("version 1e9", b"1000000000")]:
        ms = [(k, body if k == schema.VERSION_ENTRY else v) for k, v in members(data)]
        classify(f"{name}: graphcap/version {label}", raw_zip(ms), expected, args)


def tensor_damage(name, data, expected, args):
    entries = read_entries(io.BytesIO(data))
    for m, blob in entries.items():
        if not m.endswith(".safetensors") or len(blob) < 8:
            continue
        hlen = int.from_bytes(blob[:8], "little")
        header = json.loads(blob[8:8 + hlen])
        for key, info in header.items():
            if key == "__metadata__" or not isinstance(info, dict):
                continue
            for label, change in [("shape x1000",
                                   lambda i: {**i, "shape": [s * 1000 + 1 for s in i["shape"]] or [1000]}),
                                  ("offsets past end",
                                   lambda i: {**i, "data_offsets": [i["data_offsets"][0],
                                                                    i["data_offsets"][1] + 10**9]}),
                                  ("dtype F64", lambda i: {**i, "dtype": "F64"}),
                                  ("dtype bogus", lambda i: {**i, "dtype": "Q7"}),
                                  ("negative shape", lambda i: {**i, "shape": [-1]}),
                                  ("huge shape", lambda i: {**i, "shape": [2**62, 2**62]})]:
                h = dict(header)
                h[key] = change(info)
                hb = json.dumps(h).encode()
                hb += b" " * (-len(hb) % 8)
                newblob = len(hb).to_bytes(8, "little") + hb + blob[8 + hlen:]
                classify(f"{name}: {m} tensor {key} {label}",
                         rewrite(data, lambda e, m=m, b=newblob: e.__setitem__(m, b)), expected, args)
            break  # one tensor per member is enough
        for label, newblob in [("header length huge", (2**60).to_bytes(8, "little") + blob[8:]),
                               ("data cut", blob[:-4] if len(blob) > 8 + hlen + 4 else blob[:8 + hlen]),
                               ("data grown", blob + b"\0" * 16)]:
            classify(f"{name}: {m} {label}", rewrite(data, lambda e, m=m, b=newblob: e.__setitem__(m, b)),
                     expected, args)


class Boom:
    def __reduce__(self):
        return (open, (MARK, "w"))


def foreign_files(tmp, ep, args, expected):
    cases = []
    p = os.path.join(tmp, "torch_export.pt2")
    torch.export.save(graphcap.to_torch(ep), p)
    cases.append(("torch.export.save file", p))
    p = os.path.join(tmp, "state.pt")
    torch.save({"w": torch.randn(2)}, p)
    cases.append(("torch.save checkpoint", p))
    p = os.path.join(tmp, "evil.pt")
    torch.save({"w": Boom()}, p)
    cases.append(("torch.save with a code-running pickle", p))
    p = os.path.join(tmp, "evil.pkl")
    with open(p, "wb") as fh:
        pickle.dump(Boom(), fh)
    cases.append(("raw pickle that runs code", p))
    p = os.path.join(tmp, "empty.pt2")
    open(p, "wb").close()
    cases.append(("empty file", p))
    cases.append(("a directory", tmp))
    p = os.path.join(tmp, "text.pt2")
    with open(p, "w") as fh:
        fh.write("hello\n" * 100)
    cases.append(("non-zip text", p))
    p = os.path.join(tmp, "other.zip")
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr("a.txt", "x")
    cases.append(("unrelated zip", p))
    p = os.path.join(tmp, "deflated.pt2")
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED) as zf:
        for k, v in members(buf.getvalue()):
            zf.writestr(k, v)
    cases.append(("graphcap file re-zipped deflated", p))
    cases.append(("missing file", os.path.join(tmp, "nope.pt2")))
    for label, path in cases:
        classify(label, path, expected, args)
    # torch.export.save file with a crafted use_pickle weight: compare torch's own loader
    return cases


def torch_compare(tmp, ep, args):
    """The same byte damage on torch.export.save files, loaded by torch.export.load."""
    p = os.path.join(tmp, "t.pt2")
    torch.export.save(graphcap.to_torch(ep), p)
    data = open(p, "rb").read()
    expected = ep.module()(*args)
    c = Counter()
    step = max(1, len(data) // (40 if QUICK else 200))
    for pos in range(0, len(data), step):
        buf = bytearray(data)
        buf[pos] ^= 0x10
        try:
            tep = torch.export.load(io.BytesIO(bytes(buf)))
            got = tep.module()(*args)
            c["loaded-equal" if same(got, expected) else "LOADED-DIFFERENT"] += 1
        except Exception as e:
            c[f"raised {type(e).__name__}"] += 1
    return c


def atomic_save(tmp, ep):
    good = os.path.join(tmp, "good.pt2")
    graphcap.save(ep, good)
    before = open(good, "rb").read()
    out = {}

    class Bad(torch.Tensor):
        pass

    # 1. a failure while the archive is written (simulated full disk) must not clobber the file
    import graphcap.serialize.archive as arch
    real = arch._write_zip

    def full_disk(fileobj, entries):
        fileobj.write(b"PK\x03\x04partial")
        raise OSError(28, "No space left on device")
    arch._write_zip = full_disk
    try:
        graphcap.save(ep, good)
        out["full disk"] = "no error!"
    except Exception as e:
        out["full disk"] = type(e).__name__
    finally:
        arch._write_zip = real
    out["full disk: old file intact"] = open(good, "rb").read() == before
    out["full disk: no temp left"] = [n for n in os.listdir(tmp) if n.startswith(".graphcap-")]

    # 2. a stream that fails midway
    class FullStream(io.RawIOBase):
        def __init__(self):
            self.n = 0

        def writable(self):
            return True

        def write(self, b):
            self.n += len(b)
            if self.n > 100:
                raise OSError(28, "No space left on device")
            return len(b)
    try:
        graphcap.save(ep, FullStream())
        out["full stream"] = "no error!"
    except Exception as e:
        out["full stream"] = f"{type(e).__name__}: {str(e)[:120]}"
    # 3. a target that does not exist yet: failure leaves nothing
    new = os.path.join(tmp, "new.pt2")
    arch._write_zip = full_disk
    try:
        graphcap.save(ep, new)
    except Exception:
        pass
    finally:
        arch._write_zip = real
    out["new target absent after failure"] = not os.path.exists(new)
    return out


def main():
    progs = programs()
    saved = {}
    for name, (ep, args, extra) in progs.items():
        buf = io.BytesIO()
        graphcap.save(ep, buf, extra_files=extra or None)
        saved[name] = (buf.getvalue(), outputs(ep, args), args)
    names = list(saved)
    only = [a for a in sys.argv[1:] if not a.startswith("--")]
    for i, name in enumerate(names):
        if only and name not in only:
            continue
        data, expected, args = saved[name]
        other = saved[names[(i + 1) % len(names)]][0]
        byte_damage(name, data, expected, args)
        member_damage(name, data, expected, args, other)
        json_damage(name, data, expected, args)
        tensor_damage(name, data, expected, args)
        print(name, dict(RESULTS), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        ep, args, _ = progs["static"]
        foreign_files(tmp, ep, args, saved["static"][1])
        print("atomic save:", atomic_save(tmp, ep))
        print("torch.export.load on the same byte damage:", dict(torch_compare(tmp, ep, args)))
    print("total", sum(RESULTS.values()), dict(RESULTS))
    seen = set()
    for case, kind, text in BAD:
        key = (kind, text[:60])
        if key in seen:
            continue
        seen.add(key)
        print(f"BAD {kind}: {case}\n    {text}")


if __name__ == "__main__":
    main()
