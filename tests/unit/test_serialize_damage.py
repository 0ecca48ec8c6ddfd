"""Damaged files never load silently: one flipped byte anywhere in the archive, with or without mmap.

Every load of a damaged file either raises a ``SerializationError`` (naming
the damaged entry when the flip is inside one) or returns a program whose
outputs equal the original's (a flip in a byte nothing reads: a zip date,
the padding of a local header). The regions are taken from the archive's own
layout: each entry's local header and data (for the tensor entries, the
safetensors header and the storages apart), the central directory and its end
record. The default run samples a few positions per region; ``-m slow`` many.
"""
from __future__ import annotations

import functools
import random
import struct
import zipfile
from pathlib import Path

import pytest
import torch

import graphcap
from graphcap.errors import SerializationError
from graphcap.serialize import schema


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 8)
        self.out = torch.nn.Linear(8, 4)
        self.register_buffer("table", torch.linspace(-1, 1, 8), persistent=False)  # a constant entry
        self.shift = torch.tensor([0.5, -0.25, 1.0, 2.0])  # a lifted constant

    def forward(self, x):
        return self.out(self.lin(x).relu() + self.table) + self.shift


@functools.lru_cache(maxsize=1)
def _original(folder: str) -> tuple[Path, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(3, 16)
    ep = graphcap.export(Model().eval(), (x,))
    path = Path(folder) / "good.pt2"
    graphcap.save(ep, path)
    return path, x, ep.module()(x)


def _regions(path: Path) -> list[tuple[str, str, int, int]]:
    """(region, entry or '', start, end) of every part of the archive."""
    data = path.read_bytes()
    out = []
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        cd_start = zf.start_dir
    for info in infos:
        head = info.header_offset
        name_len, extra_len = struct.unpack("<HH", data[head + 26:head + 30])
        begin = head + 30 + name_len + extra_len
        out.append((f"{info.filename} local header", info.filename, head, begin))
        end = begin + info.file_size
        if info.filename.endswith(".safetensors"):
            (n,) = struct.unpack("<Q", data[begin:begin + 8])
            out.append((f"{info.filename} header", info.filename, begin, begin + 8 + n))
            if end > begin + 8 + n:
                out.append((f"{info.filename} data", info.filename, begin + 8 + n, end))
        elif end > begin:
            out.append((f"{info.filename} data", info.filename, begin, end))
    eocd = data.rfind(b"PK\x05\x06")
    out.append(("central directory", "", cd_start, eocd))
    out.append(("end of central directory", "", eocd, len(data)))
    return out


def _check_one(path: Path, damaged: Path, x: torch.Tensor, expected: torch.Tensor, region: str,
               entry: str, mmap: bool) -> str:
    try:
        ep = graphcap.load(damaged, mmap=mmap)
    except SerializationError as e:
        inside_an_entry = bool(entry) and "local header" not in region
        if inside_an_entry:
            names = f"{e.where or ''} {e.what}"
            assert entry in names or (entry == schema.VERSION_ENTRY and "version" in names), \
                f"{region}: the error does not name {entry!r}: {e}"
        return "refused"
    out = ep.module()(x)
    assert torch.equal(out, expected), f"{region} (mmap={mmap}): loaded silently with different outputs"
    str(ep)
    return "same"


def _fuzz(tmp_path: Path, per_region: int, seed: int) -> dict[str, set[str]]:
    path, x, expected = _original(str(tmp_path))
    data = path.read_bytes()
    rng = random.Random(seed)
    seen: dict[str, set[str]] = {}
    damaged = tmp_path / "damaged.pt2"
    for region, entry, start, end in _regions(path):
        count = min(per_region, end - start)
        for pos in rng.sample(range(start, end), count):
            buf = bytearray(data)
            buf[pos] ^= 1 << rng.randrange(8)
            damaged.write_bytes(bytes(buf))
            for mmap in (False, True):
                seen.setdefault(region, set()).add(_check_one(path, damaged, x, expected, region, entry, mmap))
    return seen


def test_one_flipped_byte_in_any_region_never_loads_silently(tmp_path):
    seen = _fuzz(tmp_path, per_region=3, seed=0)
    regions = set(seen)
    for needed in ("program.json data", "weights.safetensors header", "weights.safetensors data",
                   "constants.safetensors data", "graphcap/version data", "graphcap/manifest.json data",
                   "central directory"):
        assert needed in regions, needed
    for region in ("program.json data", "weights.safetensors data", "weights.safetensors header",
                   "constants.safetensors data"):
        assert seen[region] == {"refused"}, (region, seen[region])


def test_a_flip_in_weight_data_names_the_tensor_with_mmap(tmp_path):
    path, x, expected = _original(str(tmp_path))
    region = next(r for r in _regions(path) if r[0] == "weights.safetensors data")
    buf = bytearray(path.read_bytes())
    buf[region[3] - 3] ^= 0x10  # inside the last storage
    damaged = tmp_path / "damaged.pt2"
    damaged.write_bytes(bytes(buf))
    with pytest.raises(SerializationError) as info:
        graphcap.load(damaged, mmap=True)
    assert info.value.where.startswith("weights.safetensors (storage of '")
    assert "does not match its checksum" in info.value.what


def test_a_flip_in_the_weights_header_is_not_blamed_on_program_json(tmp_path):
    path, _, _ = _original(str(tmp_path))
    region = next(r for r in _regions(path) if r[0] == "weights.safetensors header")
    buf = bytearray(path.read_bytes())
    buf[region[2] + 12] ^= 0x01
    damaged = tmp_path / "damaged.pt2"
    damaged.write_bytes(bytes(buf))
    for mmap in (False, True):
        with pytest.raises(SerializationError) as info:
            graphcap.load(damaged, mmap=mmap)
        assert info.value.where.startswith("weights.safetensors"), info.value.where


def test_old_format_files_are_checked_whole_with_mmap(tmp_path):
    golden = Path(__file__).resolve().parents[1] / "golden" / "format_v2.pt2"
    buf = bytearray(golden.read_bytes())
    with zipfile.ZipFile(golden) as zf:
        info = zf.getinfo(schema.WEIGHTS_ENTRY)
    head = info.header_offset
    name_len, extra_len = struct.unpack("<HH", buf[head + 26:head + 30])
    buf[head + 30 + name_len + extra_len + info.file_size - 2] ^= 0x04
    damaged = tmp_path / "v2.pt2"
    damaged.write_bytes(bytes(buf))
    with pytest.raises(SerializationError) as info_:
        graphcap.load(damaged, mmap=True)
    assert info_.value.where == schema.WEIGHTS_ENTRY


@pytest.mark.slow
def test_many_flipped_bytes_in_every_region_never_load_silently(tmp_path):
    for seed in range(3):
        _fuzz(tmp_path, per_region=60, seed=seed)
