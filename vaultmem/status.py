"""Leaf status transitions, written to the leaf's frontmatter and its index row together.

Owns the rewrite of existing leaf files: only the engine's keys change (user keys are carried over
verbatim), only when the file still has the hash the index recorded (a file a person is editing is
left alone and reported back), and a whole batch is made durable with one filesystem sync. An intent
note naming every file and the hash written goes first and is removed once the rows commit, so a crash
between the files and the rows is healed on the next open (``ingest.heal_intents``), never taken for
a hand edit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import replace

from vaultmem import frontmatter, fsio, index, leaffile
from vaultmem.db import atomic
from vaultmem.errors import ConflictError, UnsafePath
from vaultmem.ingest import done_intent, write_intent
from vaultmem.layout import Layout
from vaultmem.model import Leaf, Status


def set_status(
    conn: sqlite3.Connection,
    layout: Layout,
    leaves: Sequence[Leaf],
    status: Status,
    entities: Mapping[str, tuple[str, ...]] | None = None,
    *,
    replace_entities: bool = False,
) -> list[str]:
    """Move ``leaves`` to ``status`` in files and rows, writing their ``entities`` too when given (leaf id
    -> canonical keys): added to the leaf's own, or instead of them with ``replace_entities``. Returns the ids left unchanged because their file changed on disk since it was
    indexed (the watcher or ``check --fix`` reconciles those first)."""
    if not leaves:
        return []
    stamps: dict[str, str] = {}
    parents: dict[str, str | None] = {}
    sizes: dict[str, tuple[int, int]] = {}
    for part, marks in index.in_batches([x.id for x in leaves]):
        for row in conn.execute(
            f"SELECT id, file_hash, file_size, file_mtime_ns, parent FROM chunks WHERE id IN ({marks})", part
        ):
            stamps[row["id"]] = row["file_hash"]
            parents[row["id"]] = row["parent"]
            sizes[row["id"]] = (row["file_size"], row["file_mtime_ns"])
    writes: list[fsio.PendingWrite] = []
    changed: list[Leaf] = []
    skipped: list[str] = []
    # A section of a note written by hand: its status and entities live in its row only (the engine
    # never writes into a person's note).
    in_place = []
    for leaf in leaves:
        if index.has_file(leaf.path) or leaf.id not in stamps:
            continue
        found = (entities or {}).get(leaf.id, ())
        merged = tuple(dict.fromkeys([*(() if replace_entities else leaf.entities), *found]))
        stamp = index.FileStamp(stamps[leaf.id], *sizes[leaf.id])
        in_place.append(
            index.leaf_row(replace(leaf, status=status, entities=merged), stamp, parents[leaf.id])
        )
    if in_place:
        with atomic(conn):
            index.upsert_rows(conn, in_place)
    for leaf in leaves:
        if not index.has_file(leaf.path):
            continue
        path = layout.abs(leaf.path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            skipped.append(leaf.id)
            continue
        digest = fsio.sha256_bytes(data)
        if digest != stamps.get(leaf.id):
            skipped.append(leaf.id)
            continue
        found = (entities or {}).get(leaf.id, ())
        merged = tuple(dict.fromkeys([*(() if replace_entities else leaf.entities), *found]))
        new_leaf = replace(leaf, status=status, entities=merged)
        new_data = frontmatter.replace_line(data, "status", leaf.status.value, status.value)
        if new_data is not None and merged != leaf.entities:
            new_data = _add_entities_line(new_data, status, merged)
        if new_data is None:
            doc = frontmatter.split(data.decode("utf-8-sig"), where=leaf.path)
            body = leaffile.keep_body(doc, leaf.text)
            text = frontmatter.render(
                leaffile.engine_meta(new_leaf), body, keep=doc, owned=leaffile.LEAF_KEYS
            )
            new_data = text.encode("utf-8")
        writes.append(fsio.PendingWrite(path, new_data, expected=digest))
        changed.append(new_leaf)
    if not writes:
        return skipped
    note = write_intent(layout, rewrites=[(layout.rel(w.path), fsio.sha256_bytes(w.data)) for w in writes])
    try:
        written = fsio.write_batch_durable(layout.root, writes)
    except (UnsafePath, ConflictError):
        done_intent(layout, note)  # refused before any file was replaced
        raise
    rows = []
    for leaf, done in zip(changed, written, strict=True):
        stamp = index.FileStamp(done.hash, done.size, done.mtime_ns)
        rows.append(index.leaf_row(leaf, stamp, parents.get(leaf.id)))
    with atomic(conn):
        index.upsert_rows(conn, rows)
    done_intent(layout, note)
    return skipped


def _add_entities_line(data: bytes, status: Status, keys: tuple[str, ...]) -> bytes | None:
    """Put an ``entities:`` line after the ``status:`` line; None when the file already has one (then
    the caller re-renders the frontmatter, keeping the user's keys)."""
    end = data.find(b"\n---", 3)
    head = data[: end + 1]
    if b"\nentities:" in head:
        return None
    line = b"\nstatus: " + status.value.encode() + b"\n"
    added = frontmatter.dump_mapping({"entities": list(keys)}).encode("utf-8")
    return head.replace(line, line + added, 1) + data[end + 1 :]
