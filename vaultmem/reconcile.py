"""Catching up with edits made outside the engine: hand-edited, deleted or replaced node files.

Owns the rule "a change to a node makes every level above it stale": an edited leaf is re-read (same id,
same provenance), re-embedded and its ancestors are marked stale; an edited summary is re-read and its
ancestors are marked stale (its own text is kept, and pinned at its next re-summarisation); a deleted
file's row goes and its ancestors are marked stale. Files are compared with the index by size and mtime
first, then by hash, so an untouched vault costs one ``stat`` per file. Never deletes or rewrites a
person's file; only summary ``stale:`` flags are written.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field

from vaultmem import fsio, index
from vaultmem.compact import ancestors_of, mark_stale
from vaultmem.db import atomic
from vaultmem.errors import FrontmatterError, InvalidInput
from vaultmem.ingest import extract_job, read_leaf_file, read_summary_file
from vaultmem.jobs import JobQueue
from vaultmem.layout import Layout


@dataclass
class CatchUp:
    changed: list[str] = field(default_factory=list)  # paths re-read
    deleted: list[str] = field(default_factory=list)  # paths whose rows went
    invalid: list[str] = field(default_factory=list)  # edited into something unreadable (check reports)
    stale: list[str] = field(default_factory=list)  # summary ids marked stale


def catch_up(conn: sqlite3.Connection, layout: Layout, max_bytes: int) -> CatchUp:
    out = CatchUp()
    rows = conn.execute(
        "SELECT id, kind, path, parent, file_hash, file_size, file_mtime_ns FROM chunks"
    ).fetchall()
    upserts: list[tuple[object, ...]] = []
    reembed: list[str] = []
    gone: list[str] = []
    touched: list[str] = []  # ids whose ancestors go stale
    for row in rows:
        path = layout.abs(row["path"])
        try:
            st = os.stat(path)
        except FileNotFoundError:
            gone.append(row["id"])
            out.deleted.append(row["path"])
            if row["parent"]:
                touched.append(row["id"])
            continue
        if st.st_size == row["file_size"] and st.st_mtime_ns == row["file_mtime_ns"]:
            continue
        if fsio.file_hash(path) == row["file_hash"]:
            continue  # touched, not changed
        try:
            if row["kind"] == "summary":
                node, stamp = read_summary_file(layout, row["path"], max_bytes)
                upserts.append(index.summary_row(node, stamp, row["parent"]))
            else:
                leaf, stamp = read_leaf_file(layout, row["path"], max_bytes)
                if leaf.id != row["id"]:
                    out.invalid.append(row["path"])
                    continue
                upserts.append(index.leaf_row(leaf, stamp, row["parent"]))
                reembed.append(leaf.id)
        except (FrontmatterError, InvalidInput):
            out.invalid.append(row["path"])
            continue
        out.changed.append(row["path"])
        touched.append(row["id"])
    parents = {}
    for node_id in touched:
        parents[node_id] = ancestors_of(conn, node_id)
    with atomic(conn):
        conn.executemany("DELETE FROM chunks WHERE id = ?", [(i,) for i in gone])
        index.upsert_rows(conn, upserts)
        JobQueue(conn).enqueue_many(extract_job(i) for i in reembed)
    stale = [a for node_id in touched for a in parents[node_id] if a not in gone]
    if stale:
        out.stale = mark_stale(conn, layout, stale, max_bytes)
    return out
