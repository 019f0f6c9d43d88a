"""``_embeddings.json``: the vectors of one directory's nodes, kept beside them.

Owns the sidecar format and its safe update. A copied folder keeps its vectors; a vector whose file's
content hash is unchanged is reused and never recomputed. Updates happen under a per-directory
``filelock`` (lock files live in ``.vaultmem/locks/``, not in the user's folders), read-modify-write, and
keep every entry they were not asked to change. A corrupt sidecar, or one written for another model, is
reported as such so the caller rebuilds it from the texts; it is never silently emptied.

Encoding: each vector is base64 of its little-endian float32 bytes.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from filelock import FileLock

from vaultmem import fsio
from vaultmem.layout import SIDECAR_NAME, Layout

FORMAT = "vaultmem-embeddings/1"
ENCODING = "base64-float32-le"


@dataclass(frozen=True)
class Entry:
    """One file's vector. Read from disk it stays base64 (``raw``) until ``vector`` is asked for, so an
    update that touches a few entries never decodes and re-encodes the rest."""

    hash: str
    raw: str

    @classmethod
    def of(cls, content_hash: str, vector: npt.NDArray[np.float32]) -> Entry:
        return cls(content_hash, encode_vector(vector))

    def vector(self, dim: int) -> npt.NDArray[np.float32]:
        return decode_vector(self.raw, dim)


@dataclass
class Sidecar:
    """The parsed contents of one ``_embeddings.json``. ``problem`` is set when it could not be used."""

    model: str
    dim: int
    entries: dict[str, Entry] = field(default_factory=dict)
    problem: str | None = None
    file_hash: str | None = None  # hash of the bytes read, for the guarded write


def encode_vector(vector: npt.NDArray[np.float32]) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(text: str, dim: int) -> npt.NDArray[np.float32]:
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    if len(raw) != dim * 4:
        raise ValueError(f"vector has {len(raw) // 4} values, expected {dim}")
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def decode_vectors(texts: Sequence[str], dim: int) -> list[npt.NDArray[np.float32]]:
    """``decode_vector`` of each text. When ``dim`` floats need no base64 padding (``dim`` a multiple of
    3, MiniLM's 384) and each text has their length, all are decoded in one call (a reindex of 10,000
    leaves called it 10,000 times); anything that call refuses is decoded text by text, so a bad text
    raises as ``decode_vector`` says it."""
    size = 4 * ((dim * 4 + 2) // 3)
    if texts and (dim * 4) % 3 == 0 and all(len(t) == size for t in texts):
        try:
            raw = base64.b64decode("".join(texts).encode("ascii"), validate=True)
        except ValueError:
            raw = b""
        if len(raw) == dim * 4 * len(texts):
            return list(np.frombuffer(raw, dtype="<f4").astype(np.float32).reshape(len(texts), dim))
    return [decode_vector(t, dim) for t in texts]


def read(directory: Path, model: str, dim: int) -> Sidecar:
    """Read a directory's sidecar. Missing: empty. Corrupt or another model's: empty with ``problem``."""
    path = directory / SIDECAR_NAME
    try:
        data_bytes = path.read_bytes()
    except FileNotFoundError:
        return Sidecar(model, dim)
    file_hash = fsio.sha256_bytes(data_bytes)
    try:
        data = json.loads(data_bytes.decode("utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("encoding") != ENCODING:
            raise ValueError("not a vaultmem embeddings file")
        if data.get("model") != model or data.get("dim") != dim:
            return Sidecar(
                model,
                dim,
                problem=f"written for model {data.get('model')!r} (dim {data.get('dim')})",
                file_hash=file_hash,
            )
        entries: dict[str, Entry] = {}
        raw_entries = data.get("entries")
        if not isinstance(raw_entries, dict):
            raise ValueError("'entries' is not a mapping")
        for name, item in raw_entries.items():
            raw = str(item["vector"])
            if len(raw) != 4 * ((dim * 4 + 2) // 3):
                raise ValueError(f"entry {name!r} does not hold {dim} float32 values")
            entries[str(name)] = Entry(str(item["hash"]), raw)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        return Sidecar(model, dim, problem=f"corrupt: {exc}", file_hash=file_hash)
    return Sidecar(model, dim, entries, None, file_hash)


def render(sidecar: Sidecar) -> bytes:
    body: dict[str, Any] = {
        "format": FORMAT,
        "model": sidecar.model,
        "dim": sidecar.dim,
        "encoding": ENCODING,
        "entries": {
            name: {"hash": entry.hash, "vector": entry.raw} for name, entry in sorted(sidecar.entries.items())
        },
    }
    return (json.dumps(body, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def lock_for(layout: Layout, directory: Path) -> FileLock:
    name = hashlib.sha1(str(directory.resolve()).encode("utf-8")).hexdigest()[:16]
    return fsio.file_lock(layout.root, layout.state / "locks" / f"{name}.lock", timeout=60)


def update(
    layout: Layout,
    directory: Path,
    model: str,
    dim: int,
    put: Mapping[str, Entry],
    remove: frozenset[str] = frozenset(),
) -> None:
    """Add or replace ``put`` entries and drop ``remove`` names, keeping every other entry (the lock
    files are in the vault's ``.vaultmem/locks/``)."""
    root = layout.root
    with lock_for(layout, directory):
        path, data, expected = _merged(directory, model, dim, put, remove)
        if data is None:
            if expected is not None:
                fsio.remove_file(root, path)
            return
        fsio.atomic_write(path, data, root=root, expected=expected)


@dataclass(frozen=True)
class Change:
    """What ``update_many`` does to one directory's sidecar: ``put`` entries in, ``remove`` names out.
    ``only_if_readable``: leave a sidecar that cannot be read (corrupt, another model's) as it is,
    instead of replacing it with the ``put`` entries alone."""

    put: Mapping[str, Entry] = field(default_factory=dict)
    remove: frozenset[str] = frozenset()
    only_if_readable: bool = False


def update_many(layout: Layout, model: str, dim: int, changes: Mapping[Path, Change]) -> None:
    """``update`` of several directories' sidecars, made durable together: one filesystem sync for all
    the files, then each directory synced once (``fsio.write_batch_durable``), instead of a file sync and
    a directory sync per sidecar. Every directory's lock is held, taken in path order, from its read to
    its write. A crash before the sync leaves every sidecar as it was (and temp files); after it, each
    is the old or the new file."""
    root = layout.root
    directories = sorted(changes)
    writes: list[fsio.PendingWrite] = []
    gone: list[Path] = []
    with contextlib.ExitStack() as locks:
        for directory in directories:
            locks.enter_context(lock_for(layout, directory))
        for directory in directories:
            change = changes[directory]
            path, data, expected = _merged(
                directory, model, dim, change.put, change.remove, change.only_if_readable
            )
            if data is not None:
                writes.append(fsio.PendingWrite(path, data, expected))
            elif expected is not None and path.exists():
                gone.append(path)
        fsio.write_batch_durable(root, writes)
        for path in gone:
            fsio.remove_file(root, path)


def _merged(
    directory: Path,
    model: str,
    dim: int,
    put: Mapping[str, Entry],
    remove: frozenset[str],
    only_if_readable: bool = False,
) -> tuple[Path, bytes | None, str | None]:
    """A sidecar with ``put`` in and ``remove`` out, as (path, bytes to write, hash of the file read).
    The bytes are None when nothing is to be written: no entry left (the file, if any, goes), or an
    unreadable sidecar left alone (``only_if_readable``; the hash is then None too). The caller holds the
    directory's lock."""
    path = directory / SIDECAR_NAME
    current = read(directory, model, dim)
    if current.problem is not None:
        if only_if_readable:
            return path, None, None  # never rewrite what cannot be read
        # The caller rebuilt every entry from the texts; anything unreadable is replaced whole.
        current = Sidecar(model, dim, file_hash=current.file_hash)
    current.entries.update(put)
    for name in remove:
        current.entries.pop(name, None)
    if not current.entries:
        return path, None, current.file_hash
    return path, render(current), current.file_hash
