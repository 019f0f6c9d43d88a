"""Rebuild chunks.db's derived tables from the vault's files alone.

Owns ``reindex``: every leaf file is read and validated, and the chunk rows (with their FTS indexes)
are replaced in one transaction, so a reader sees the old index or the new one. The job queue is kept;
work that the files imply (leaves still ``pending_extraction``) is re-queued. Never writes a vault file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from vaultmem import index, leaffile
from vaultmem.db import atomic
from vaultmem.errors import FrontmatterError, InvalidInput
from vaultmem.ingest import extract_job, read_leaf_file
from vaultmem.jobs import JobQueue
from vaultmem.layout import Layout
from vaultmem.model import Status
from vaultmem.scan import scan


@dataclass(frozen=True)
class ReindexReport:
    leaves: int
    skipped: tuple[tuple[str, str], ...]  # (path, reason): files that are not valid leaves
    duplicates: tuple[tuple[str, str], ...]  # (path, id) of files whose id another file already has
    requeued: int
    vectors: int = 0  # vectors restored from the _embeddings.json sidecars


def read_all_leaves(
    layout: Layout, max_bytes: int, progress: Callable[[int, int], None] | None = None
) -> tuple[list[tuple[object, ...]], list[tuple[str, str]], list[tuple[str, str]], list[str]]:
    """Read every leaf file: (rows, skipped, duplicates, pending ids)."""
    entries = [e for e in scan(layout).entries if not e.is_summary]
    rows: list[tuple[object, ...]] = []
    skipped: list[tuple[str, str]] = []
    duplicates: list[tuple[str, str]] = []
    pending: list[str] = []
    seen: set[str] = set()
    for n, entry in enumerate(entries, 1):
        if leaffile.id_from_filename(entry.rel.rsplit("/", 1)[-1]) is None:
            skipped.append((entry.rel, "not a leaf file (no leaf id in its name)"))
            continue
        try:
            leaf, stamp = read_leaf_file(layout, entry.rel, max_bytes)
        except (FrontmatterError, InvalidInput) as exc:
            skipped.append((entry.rel, str(exc)))
            continue
        if leaf.id in seen:
            duplicates.append((entry.rel, leaf.id))
            continue
        seen.add(leaf.id)
        rows.append(index.leaf_row(leaf, stamp))
        if leaf.status is Status.PENDING:
            pending.append(leaf.id)
        if progress is not None:
            progress(n, len(entries))
    return rows, skipped, duplicates, pending


def reindex(
    conn: sqlite3.Connection,
    layout: Layout,
    max_bytes: int,
    progress: Callable[[int, int], None] | None = None,
) -> ReindexReport:
    rows, skipped, duplicates, pending = read_all_leaves(layout, max_bytes, progress)
    with atomic(conn):
        # Empty the FTS tables wholesale first so the per-row delete triggers have nothing to do.
        conn.execute("DELETE FROM fts_words")
        conn.execute("DELETE FROM fts_trigram")
        conn.execute("DELETE FROM chunks")
        index.insert_leaves(conn, rows)
        requeued = JobQueue(conn).enqueue_many(extract_job(i) for i in pending)
    return ReindexReport(len(rows), tuple(skipped), tuple(duplicates), requeued)
