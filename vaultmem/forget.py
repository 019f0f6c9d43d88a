"""Forgetting a leaf so it can come back (issue #20): the tombstone a forgotten leaf is kept in.

Owns the tombstone folder ``.trash/vaultmem/forgotten/<leaf id>/``: the leaf's file with its exact bytes,
``tombstone.json`` saying where it lived, the hash of those bytes, its vector's sidecar entry (so
restoring never re-embeds) and when and why it was forgotten, and under ``derived/`` the bytes the
summaries, digests, topics and sidecars above it had before forgetting re-wrote them (with the hash
forgetting left), so a restore with nothing changed in between puts the vault back byte for byte; what
changed since is re-summarised instead. ``.trash/`` is never indexed, so a
forgotten leaf is out of search, context, topics and digests; the engine commits the tombstone with git
like any file it writes. Writes only through ``fsio``; the caller holds the write lock and removes the
leaf from the tree (``Vault.delete``) or puts it back. A restore writes its note in
``.vaultmem/restoring/`` first (``begin_restore``), so one a crash interrupts is finished on the next open.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vaultmem import fsio
from vaultmem.errors import InvalidInput, NodeNotFound
from vaultmem.layout import SIDECAR_NAME, SUMMARY_NAME, TOMBSTONES, Layout
from vaultmem.model import LEAF_ID_RE, check_node_id
from vaultmem.stale import ancestors_of

NOTE = "tombstone.json"
FORMAT = "vaultmem-tombstone/1"


@dataclass(frozen=True)
class Tombstone:
    id: str
    path: str  # where the leaf lived, vault-relative
    hash: str  # sha256 of the file's bytes
    forgotten_at: str
    reason: str | None = None
    model: str | None = None  # the sidecar entry of its vector, when it had one
    vector_hash: str | None = None
    vector: str | None = None
    derived: dict[str, str | None] | None = None  # path -> hash forgetting left there (None: removed)
    level: str | None = None  # the level forgotten as a whole with it (``restore <level id>`` undoes it)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def as_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "path": self.path, "forgotten_at": self.forgotten_at, "reason": self.reason}
        return out | ({"level": self.level} if self.level else {})


def folder(layout: Layout, leaf_id: str) -> Path:
    return layout.root / TOMBSTONES / check_node_id(leaf_id)


def bury(layout: Layout, tomb: Tombstone, data: bytes) -> list[str]:
    """Write the tombstone of a leaf (its bytes, then the note); returns the vault-relative paths."""
    where = folder(layout, tomb.id)
    fsio.make_dirs(layout.root, where)  # refused when .trash/ leads out of the vault
    return _write(layout, where, tomb, data)


def _write(layout: Layout, where: Path, tomb: Tombstone, data: bytes) -> list[str]:
    leaf = where / tomb.name
    note = where / NOTE
    fsio.atomic_write(leaf, data, root=layout.root, expected=fsio.file_hash(leaf))
    body = {"format": FORMAT, **asdict(tomb)}
    text = json.dumps(body, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    fsio.atomic_write(note, text.encode("utf-8"), root=layout.root, expected=fsio.file_hash(note))
    return [layout.rel(leaf), layout.rel(note)]


def read_tomb(layout: Layout, leaf_id: str) -> tuple[Tombstone, bytes]:
    """A forgotten leaf's tombstone and its file's bytes; ``NodeNotFound`` when it has none."""
    where = folder(layout, leaf_id)
    try:
        data = json.loads((where / NOTE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NodeNotFound(
            f"{leaf_id} is not forgotten (no {TOMBSTONES}/{leaf_id}/); `vaultmem forgotten` lists what is"
        ) from None
    except (OSError, ValueError) as exc:
        raise InvalidInput(
            f"{TOMBSTONES}/{leaf_id}/{NOTE} cannot be read ({exc}); restore it by hand"
        ) from exc
    fields = {k: data.get(k) for k in Tombstone.__dataclass_fields__}
    tomb = Tombstone(**fields)
    if tomb.id != leaf_id or "/" not in tomb.path or ".." in tomb.path.split("/"):
        raise InvalidInput(
            f"{TOMBSTONES}/{leaf_id}/{NOTE} does not describe leaf {leaf_id}; restore it by hand"
        )
    blob = (where / tomb.name).read_bytes()
    if fsio.sha256_bytes(blob) != tomb.hash:
        raise InvalidInput(
            f"{TOMBSTONES}/{leaf_id}/{tomb.name} changed since it was forgotten; restore it by hand"
            " (move it back into its source) or forget it again"
        )
    return tomb, blob


def derived_folders(
    conn: sqlite3.Connection, leaf_id: str, leaf_path: str, entities: Sequence[str], day: str | None
) -> list[str]:
    """The folders whose summary or sidecar forgetting a leaf may rewrite: its own and its ancestors'
    (source tree), its day's digest with its week and month, and the topics of its entities."""
    paths = [leaf_path]
    for node_id in ancestors_of(conn, leaf_id):
        row = conn.execute("SELECT path FROM chunks WHERE id = ?", (node_id,)).fetchone()
        if row is not None:
            paths.append(row["path"])
    rows: list[sqlite3.Row] = []
    if day:
        rows += conn.execute(
            "SELECT id, path FROM chunks WHERE kind = 'summary' AND path LIKE 'global/%' AND path LIKE ?",
            (f"%/{day}/%",),
        ).fetchall()
    if entities:
        marks = ",".join("?" * len(entities))
        rows += conn.execute(
            "SELECT id, path FROM chunks WHERE kind = 'summary' AND path LIKE 'topics/%'"
            f" AND json_extract(provenance, '$.entity') IN ({marks})",
            list(entities),
        ).fetchall()
    for row in rows:
        paths.append(row["path"])
        for node_id in ancestors_of(conn, row["id"]):
            up = conn.execute("SELECT path FROM chunks WHERE id = ?", (node_id,)).fetchone()
            if up is not None:
                paths.append(up["path"])
    return sorted({p.rsplit("/", 1)[0] for p in paths})


def snapshot(layout: Layout, folders: Sequence[str]) -> dict[str, bytes | None]:
    """The bytes of the summary and sidecar files in ``folders`` (None: no such file)."""
    out: dict[str, bytes | None] = {}
    for rel_dir in folders:
        for name in (SUMMARY_NAME, SIDECAR_NAME):
            rel = f"{rel_dir}/{name}"
            try:
                out[rel] = layout.abs(rel).read_bytes()
            except FileNotFoundError:
                out[rel] = None
    return out


def keep_derived(layout: Layout, tomb: Tombstone, before: dict[str, bytes | None]) -> Tombstone:
    """Record in the tombstone what forgetting changed among ``before``: the old bytes under
    ``derived/`` and the hash left in place (a file forgetting created is not recorded)."""
    where = folder(layout, tomb.id)
    changed: dict[str, str | None] = {}
    for rel, old in before.items():
        if old is None:
            continue
        now = fsio.file_hash(layout.abs(rel))
        if now == fsio.sha256_bytes(old):
            continue
        keep = where / "derived" / rel
        fsio.make_dirs(layout.root, keep.parent)
        fsio.atomic_write(keep, old, root=layout.root, expected=fsio.file_hash(keep))
        changed[rel] = now
    done = replace(tomb, derived=changed)
    _write(layout, where, done, (where / tomb.name).read_bytes())
    return done


def undo_derived(layout: Layout, tomb: Tombstone) -> list[str]:
    """Put back the summaries and sidecars forgetting rewrote, each only if it still holds exactly what
    forgetting left (else it stays, and re-summarising brings it up to date). Returns the paths."""
    where = folder(layout, tomb.id)
    done = []
    for rel, left in sorted((tomb.derived or {}).items()):
        target = layout.abs(rel)
        if fsio.file_hash(target) != left or not target.parent.is_dir():
            continue
        data = (where / "derived" / rel).read_bytes()
        fsio.atomic_write(target, data, root=layout.root, expected=left)
        done.append(rel)
    return done


def begin_restore(layout: Layout, leaves: Mapping[str, str], derived: Sequence[str]) -> Path:
    """Write (durably) the note of a restore about to put ``leaves`` (id -> the path it goes back to) and
    the ``derived`` files forgetting rewrote back in place; ``end_restore`` removes it once their rows
    are committed. A note a crash left is finished on the next open (``pending_restores``)."""
    note = layout.restoring / f"{secrets.token_hex(8)}.json"
    fsio.make_dirs(layout.root, layout.restoring)
    body = {"leaves": dict(leaves), "derived": list(dict.fromkeys(derived))}
    fsio.atomic_write(note, json.dumps(body).encode("utf-8"), root=layout.root)
    return note


def end_restore(layout: Layout, note: Path) -> None:
    fsio.remove_file(layout.root, note)


def pending_restores(layout: Layout) -> list[tuple[Path, dict[str, str], list[str]]]:
    """The notes of restores a crash interrupted: (note, leaves, derived paths). A note torn by the
    crash itself (its restore never began) comes empty."""
    out = []
    for note in sorted(layout.restoring.glob("*.json")) if layout.restoring.is_dir() else []:
        try:
            body = json.loads(note.read_text(encoding="utf-8"))
            leaves = {str(k): str(v) for k, v in body["leaves"].items()}
            derived = [str(p) for p in body["derived"]]
        except (ValueError, KeyError, TypeError, AttributeError, OSError):
            leaves, derived = {}, []
        out.append((note, leaves, derived))
    return out


def finish_restore(layout: Layout, leaf_id: str, rel: str) -> bool:
    """After a crash: remove the tombstone of a leaf whose file is back at ``rel`` with its exact bytes
    (the restore got that far; its rows are the caller's). Returns whether the leaf is back."""
    try:
        tomb, _data = read_tomb(layout, leaf_id)
    except NodeNotFound:
        return fsio.file_hash(layout.abs(rel)) is not None  # removed before the crash
    except (InvalidInput, OSError):
        return False
    if fsio.file_hash(layout.abs(rel)) != tomb.hash:
        return False  # never written: the leaf is still forgotten
    unbury(layout, tomb)
    return True


def unbury(layout: Layout, tomb: Tombstone) -> list[str]:
    """Remove a tombstone once its leaf is back; returns the vault-relative paths removed."""
    where = folder(layout, tomb.id)
    removed = []
    kept = where / "derived"
    for rel in tomb.derived or {}:
        path = kept / rel
        if path.exists():
            fsio.remove_file(layout.root, path)
            removed.append(layout.rel(path))
            up = path.parent
            while up != where and fsio.remove_empty_dir(layout.root, up):
                up = up.parent
    for path in (where / tomb.name, where / NOTE):
        if path.exists():
            fsio.remove_file(layout.root, path)
            removed.append(layout.rel(path))
    for directory in (where, where.parent, where.parent.parent):
        if not fsio.remove_empty_dir(layout.root, directory):
            break
    return removed


def tombstones(layout: Layout) -> list[Tombstone]:
    """Every forgotten leaf, the most recently forgotten first."""
    base = layout.root / TOMBSTONES
    out = []
    for child in sorted(base.iterdir()) if base.is_dir() else []:
        if LEAF_ID_RE.match(child.name) and (child / NOTE).is_file():
            try:
                out.append(read_tomb(layout, child.name)[0])
            except (InvalidInput, NodeNotFound, OSError):
                continue
    return sorted(out, key=lambda t: t.forgotten_at, reverse=True)


def ids(layout: Layout) -> set[str]:
    base = layout.root / TOMBSTONES
    return {c.name for c in base.iterdir() if LEAF_ID_RE.match(c.name)} if base.is_dir() else set()


def tombstone_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
