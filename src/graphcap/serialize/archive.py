"""The zip container: atomic writing, per-entry content hashes, bounded reading.

Writing builds the whole archive in a temporary file beside the target and
renames it into place, so a failure leaves either the old file or nothing —
never half a file. Entries are stored uncompressed and aligned, which lets the
loader memory-map weights straight from the archive and means no entry can be
larger than the file itself (no zip bombs). Reading checks the version, the
manifest and each entry's SHA-256, and turns every failure of the zip layer
into a ``SerializationError``.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import tempfile
import zipfile
from dataclasses import dataclass
from typing import IO, Any, Optional, TypeGuard, Union

from ..errors import SerializationError
from . import schema

PathOrFile = Union[str, os.PathLike[str], IO[bytes]]

_ALIGN = 64
_PAD_HEADER_ID = 0x6367  # an extra-field id no zip tool assigns a meaning to
_FIX_CORRUPT = ("The file is damaged or was not written by graphcap.save; save the program again "
                "(graphcap.save(ep, path)), or convert a torch.export file: load it with torch.export's "
                "load() in a process you trust, then graphcap.from_torch(program).")


def corrupt(what: str, where: Optional[str] = None) -> SerializationError:
    return SerializationError(what, where=where, fix=_FIX_CORRUPT)


def is_path(f: Any) -> TypeGuard[Union[str, os.PathLike[str]]]:
    return isinstance(f, (str, os.PathLike))


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------

def _write_zip(fileobj: IO[bytes], entries: dict[str, bytes]) -> None:
    manifest = {"magic": schema.MAGIC,
                "entries": {name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                            for name, data in entries.items()}}
    ordered = [(schema.VERSION_ENTRY, str(schema.FORMAT_VERSION).encode()),
               (schema.MANIFEST_ENTRY, json.dumps(manifest, indent=1, sort_keys=True).encode()),
               *entries.items()]
    with zipfile.ZipFile(fileobj, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, data in ordered:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            # Pad the local header's extra field so the entry's data starts on a
            # 64-byte boundary: memory-mapped weights are then aligned.
            start = fileobj.tell() + 30 + len(name.encode())
            pad = (-(start + 4)) % _ALIGN
            info.extra = struct.pack("<HH", _PAD_HEADER_ID, pad) + b"\0" * pad
            zf.writestr(info, data)


def _file_mode(path: str) -> int:
    """The mode a plain ``open(path, "wb")`` would give: the old file's, else 0o666 less the umask."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def _check_target(path: str, directory: str) -> None:
    """Refuse, naming the user's path, a target the rename into place could not reach: the
    temporary file's name would otherwise be all the error says."""
    if os.path.isdir(path):
        raise SerializationError(f"Cannot write {path!r}: it is a folder.", where="graphcap.save(ep, f)",
                                 fix=f"Name a file in it: graphcap.save(ep, {os.path.join(path, 'model.pt2')!r}).")
    if not os.path.isdir(directory):
        raise SerializationError(f"Cannot write {path!r}: its folder {directory!r} does not exist.",
                                 where="graphcap.save(ep, f)",
                                 fix=f"Create it first: os.makedirs({directory!r}, exist_ok=True).")


def write_archive(f: PathOrFile, entries: dict[str, bytes]) -> None:
    """Write ``entries`` (name → bytes) as a graphcap archive to a path or a binary file."""
    if not is_path(f):
        if not hasattr(f, "write"):
            raise SerializationError(
                f"graphcap.save expects a path or a binary file object, got {type(f).__name__}.",
                where="graphcap.save(ep, f)", fix="Pass a file name such as 'model.pt2' or open(..., 'wb').")
        buf = io.BytesIO()
        _write_zip(buf, entries)
        f.write(buf.getvalue())
        return
    path = os.fspath(f)
    directory = os.path.dirname(os.path.abspath(path))
    _check_target(path, directory)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".graphcap-", suffix=".pt2.tmp", dir=directory)
    except OSError as e:
        raise SerializationError(f"Cannot write {path!r}: {e.strerror or e} in its folder {directory!r}.",
                                 where="graphcap.save(ep, f)",
                                 fix="Save to a folder this process may write to.") from e
    try:
        with os.fdopen(fd, "wb") as out:
            _write_zip(out, entries)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, _file_mode(path))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# ---------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------

@dataclass
class EntryLocation:
    """Where an entry's bytes lie in the archive file (for memory-mapping)."""

    offset: int
    size: int


class ArchiveReader:
    """A checked view of a graphcap archive.

    Construction validates the zip directory, the version and the manifest;
    ``read(name)`` returns an entry's bytes after checking its hash.
    """

    def __init__(self, f: PathOrFile):
        self.path: Optional[str] = os.fspath(f) if is_path(f) else None
        try:
            if self.path is not None:
                self._fh: IO[bytes] = open(self.path, "rb")
            elif hasattr(f, "read"):
                data = f.read()
                if not isinstance(data, (bytes, bytearray)):
                    raise corrupt("The file object did not return bytes; open it in binary mode ('rb').")
                self._fh = io.BytesIO(data)
            else:
                raise SerializationError(
                    f"graphcap.load expects a path or a binary file object, got {type(f).__name__}.",
                    where="graphcap.load(f)", fix="Pass a file name such as 'model.pt2' or open(..., 'rb').")
        except OSError as e:
            raise SerializationError(f"Cannot read {f!r}: {e}", where=self._load_call(),
                                     fix="Check the path and its permissions.") from None
        self._size = self._fh.seek(0, io.SEEK_END)
        self._fh.seek(0)
        try:
            self._zip = zipfile.ZipFile(self._fh)
            infos = self._zip.infolist()
        except SerializationError:
            raise
        except Exception as e:  # zipfile raises many kinds on crafted input
            self.release()
            raise corrupt(f"Not a readable graphcap .pt2 archive (zip layer: {type(e).__name__}: {e}).",
                          where=self._load_call()) from None
        try:
            if len(infos) > schema.MAX_ENTRIES:
                raise corrupt(f"The archive has {len(infos)} entries, more than a graphcap file ever holds.")
            self._infos: dict[str, zipfile.ZipInfo] = {}
            for info in infos:
                if info.filename in self._infos:
                    raise corrupt(f"The archive holds the entry {info.filename!r} twice.", where=info.filename[:120])
                if info.compress_type != zipfile.ZIP_STORED:
                    raise corrupt(f"Entry {info.filename!r} is compressed; graphcap stores every entry "
                                  f"uncompressed.", where=info.filename[:120])
                if info.file_size > self._size or info.compress_size > self._size:
                    raise corrupt(f"Entry {info.filename!r} claims {info.file_size} bytes, more than the file.",
                                  where=info.filename[:120])
                self._infos[info.filename] = info
            self.version = self._read_version()
            self._manifest = self._read_manifest()
        except BaseException:
            self.release()
            raise

    def _load_call(self) -> str:
        """``graphcap.load('<path>')`` for a path, ``graphcap.load(f)`` for a file object."""
        return f"graphcap.load({self.path!r})" if self.path is not None else "graphcap.load(f)"

    def _raw(self, name: str) -> bytes:
        info = self._infos.get(name)
        if info is None:
            raise corrupt(f"The archive has no {name!r} entry.")
        try:
            return self._zip.read(info)
        except Exception as e:
            raise corrupt(f"Entry {name!r} cannot be read ({type(e).__name__}: {e}).", where=name) from None

    def _read_version(self) -> int:
        if schema.VERSION_ENTRY not in self._infos:
            what = f"Not a graphcap .pt2 file: it has no {schema.VERSION_ENTRY!r} entry."
            shown = repr(self.path) if self.path is not None else "f"
            if any(n.endswith(("archive_format", ".json")) and "/" in n for n in self._infos):
                from ..interop import torch_file_conversion  # the one module that names torch's calls
                raise SerializationError(
                    f"{what} It looks like a torch.export file.", where=self._load_call(),
                    fix=f"Load it with torch.export's load() in a process you trust and convert it: "
                        f"{torch_file_conversion(shown)}.")
            if any(n.endswith("/data.pkl") for n in self._infos):
                raise SerializationError(
                    f"{what} It looks like a torch.save checkpoint (a state_dict or a pickled model), "
                    f"which holds weights, not a program.", where=self._load_call(),
                    fix="Read it with torch's own load (weights only) into the model, "
                        "model.load_state_dict(state), then export the model: ep = graphcap.export(model, args).")
            raise corrupt(what, where=self._load_call())
        text = self._raw(schema.VERSION_ENTRY)
        if not (0 < len(text) <= 9 and text.isdigit()):
            raise corrupt(f"The format version entry is malformed: {text[:40]!r}.", where=schema.VERSION_ENTRY)
        version = int(text)
        if version not in schema.READABLE_VERSIONS:
            newest = max(schema.READABLE_VERSIONS)
            if version > newest:
                raise SerializationError(
                    f"The file uses graphcap format version {version}; this graphcap reads versions "
                    f"up to {newest}.", where=self._load_call(),
                    fix="Upgrade graphcap to a release that writes this format version: "
                        "pip install --upgrade graphcap.")
            raise corrupt(f"Unknown graphcap format version {version}.", where=schema.VERSION_ENTRY)
        return version

    def _read_manifest(self) -> dict[str, dict[str, Any]]:
        try:
            manifest = json.loads(self._raw(schema.MANIFEST_ENTRY))
        except SerializationError:
            raise
        except Exception as e:
            raise corrupt(f"The manifest is not valid JSON ({e}).", where=schema.MANIFEST_ENTRY) from None
        if not isinstance(manifest, dict) or manifest.get("magic") != schema.MAGIC \
                or not isinstance(manifest.get("entries"), dict):
            raise corrupt("The manifest is malformed.", where=schema.MANIFEST_ENTRY)
        entries: dict[str, dict[str, Any]] = manifest["entries"]
        for name, meta in entries.items():
            if not (isinstance(meta, dict) and isinstance(meta.get("sha256"), str)
                    and isinstance(meta.get("size"), int)):
                raise corrupt(f"The manifest entry for {name!r} is malformed.", where=schema.MANIFEST_ENTRY)
            if name not in self._infos:
                raise corrupt(f"The manifest lists {name!r} but the archive does not hold it.",
                              where=schema.MANIFEST_ENTRY)
        for name in self._infos:
            if name not in entries and name not in (schema.VERSION_ENTRY, schema.MANIFEST_ENTRY):
                raise corrupt(f"The archive holds {name!r}, which its manifest does not list.",
                              where=name[:120] or "(an entry with an empty name)")
        return entries

    def names(self) -> list[str]:
        return list(self._manifest)

    def has(self, name: str) -> bool:
        return name in self._manifest

    def read(self, name: str, *, check_hash: bool = True) -> bytes:
        """An entry's bytes, checked against its size and SHA-256 in the manifest."""
        meta = self._manifest.get(name)
        if meta is None:
            raise corrupt(f"The archive has no {name!r} entry.")
        data = self._raw(name)
        if len(data) != meta["size"]:
            raise corrupt(f"Entry {name!r} has {len(data)} bytes; the manifest says {meta['size']}.", where=name)
        if check_hash and hashlib.sha256(data).hexdigest() != meta["sha256"]:
            raise corrupt(f"Entry {name!r} does not match its content hash: the file was modified "
                          f"or damaged after it was saved.", where=name)
        return data

    def entry_sha256(self, name: str) -> Optional[str]:
        """The entry's SHA-256 as the manifest lists it."""
        meta = self._manifest.get(name)
        return meta["sha256"] if meta is not None else None

    def location(self, name: str) -> EntryLocation:
        """Byte range of an entry's data in the archive file, for memory-mapping."""
        info = self._infos.get(name)
        if info is None or name not in self._manifest:
            raise corrupt(f"The archive has no {name!r} entry.")
        self._fh.seek(info.header_offset)
        head = self._fh.read(30)
        if len(head) != 30 or head[:4] != b"PK\x03\x04":
            raise corrupt(f"The local header of entry {name!r} is damaged.", where=name)
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        offset = info.header_offset + 30 + name_len + extra_len
        if info.file_size != self._manifest[name]["size"]:
            raise corrupt(f"Entry {name!r} has {info.file_size} bytes; the manifest says "
                          f"{self._manifest[name]['size']}.", where=name)
        if offset + info.file_size > self._size:
            raise corrupt(f"Entry {name!r} runs past the end of the file.", where=name)
        return EntryLocation(offset, info.file_size)

    def release(self) -> None:
        """Close the archive (after everything needed was read)."""
        try:
            if getattr(self, "_zip", None) is not None:
                self._zip.close()
        finally:
            self._zip = None  # type: ignore[assignment]
            self._fh.close()

    def __enter__(self) -> "ArchiveReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def read_entries(f: PathOrFile) -> dict[str, bytes]:
    """Every user-level entry of an archive (name → bytes), hashes checked.

    With :func:`write_archive` this lets tools (and tests) rewrite a file: the
    manifest and version are regenerated on writing.
    """
    with ArchiveReader(f) as reader:
        return {name: reader.read(name) for name in reader.names()}
