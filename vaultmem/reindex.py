"""Rebuild chunks.db's derived tables from the vault's files alone.

Owns ``reindex``: every summary and leaf file is read and validated, and the chunk rows (with their FTS indexes)
are replaced in one transaction, so a reader sees the old index or the new one (``Vault.reindex`` makes
the agent's memory files, the sections of notes indexed in place and the vectors part of that same
transaction). The job queue is kept;
work that the files imply (leaves still ``pending_extraction``) is re-queued. Never writes a vault file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field

from vaultmem import index, leaffile
from vaultmem.db import atomic
from vaultmem.errors import FrontmatterError, InvalidInput
from vaultmem.jobs import JobQueue, admit_job, resummarise_job
from vaultmem.layout import AGENT_TOPS, Layout
from vaultmem.model import Status
from vaultmem.scan import read_leaf_file, read_summary_file, scan
from vaultmem.summaryfile import SummaryNode


@dataclass(frozen=True)
class ReindexReport:
    leaves: int
    skipped: tuple[tuple[str, str], ...]  # (path, reason): files that are not valid nodes
    duplicates: tuple[tuple[str, str], ...]  # (path, id) of files whose id another file already has
    requeued: int
    vectors: int = 0  # vectors restored from the _embeddings.json sidecars
    summaries: int = 0
    memory_files: int = 0  # the agent's own memory files (memindex)


@dataclass
class VaultFiles:
    """Every node file of a vault as index rows, and what could not be read."""

    rows: dict[str, tuple[object, ...]] = field(default_factory=dict)  # id -> row
    paths: dict[str, str] = field(default_factory=dict)  # id -> rel path
    skipped: list[tuple[str, str]] = field(default_factory=list)
    duplicates: list[tuple[str, str, str]] = field(default_factory=list)  # (rel, id, first rel)
    pending: list[str] = field(default_factory=list)  # leaves still pending_extraction
    stale: list[tuple[str, int]] = field(default_factory=list)  # (id, depth) of stale summaries
    leaves: int = 0
    summaries: int = 0


def read_vault(
    layout: Layout, max_bytes: int, progress: Callable[[int, int], None] | None = None
) -> VaultFiles:
    """Read every summary and leaf file. Summaries first: a node's ``parent`` is the id of the
    ``_summary.md`` in the directory above it (for a leaf: in its own directory)."""
    entries = scan(layout).entries
    out = VaultFiles()
    dir_summary: dict[str, str] = {}
    ordered = [e for e in entries if e.is_summary] + [e for e in entries if not e.is_summary]
    summaries: list[tuple[str, SummaryNode, index.FileStamp]] = []
    for n, entry in enumerate(ordered, 1):
        if progress is not None:
            progress(n, len(ordered))
        if entry.is_summary:
            try:
                node, stamp = read_summary_file(layout, entry.rel, max_bytes)
            except (FrontmatterError, InvalidInput) as exc:
                out.skipped.append((entry.rel, str(exc)))
                continue
            if _duplicate(out, entry.rel, node.id):
                continue
            dir_summary[node.directory] = node.id
            summaries.append((entry.rel, node, stamp))
            continue
        if entry.rel.split("/", 1)[0] in AGENT_TOPS and "/" in entry.rel:
            continue  # the agent's own memory: memindex reads those
        if leaffile.id_from_filename(entry.rel.rsplit("/", 1)[-1]) is None:
            out.skipped.append((entry.rel, "not a leaf file (no leaf id in its name)"))
            continue
        try:
            leaf, stamp = read_leaf_file(layout, entry.rel, max_bytes)
        except (FrontmatterError, InvalidInput) as exc:
            out.skipped.append((entry.rel, str(exc)))
            continue
        if _duplicate(out, entry.rel, leaf.id):
            continue
        out.rows[leaf.id] = index.leaf_row(leaf, stamp, dir_summary.get(_dir(entry.rel)))
        out.leaves += 1
        if leaf.status is Status.PENDING:
            out.pending.append(leaf.id)
    for _rel, node, stamp in summaries:
        out.rows[node.id] = index.summary_row(node, stamp, dir_summary.get(_dir(node.directory)))
        out.summaries += 1
        if node.stale:
            out.stale.append((node.id, node.depth))
    return out


def _dir(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def _duplicate(out: VaultFiles, rel: str, node_id: str) -> bool:
    first = out.paths.get(node_id)
    if first is not None:
        out.duplicates.append((rel, node_id, first))
        return True
    out.paths[node_id] = rel
    return False


def reindex(
    conn: sqlite3.Connection,
    layout: Layout,
    max_bytes: int,
    progress: Callable[[int, int], None] | None = None,
) -> ReindexReport:
    files = read_vault(layout, max_bytes, progress)
    with atomic(conn):
        # Empty the FTS tables wholesale first so the per-row delete triggers have nothing to do.
        for table in ("fts_words", "fts_trigram", "fts_nav_words", "fts_nav_trigram"):
            conn.execute(f"DELETE FROM {table}")
        conn.execute("DELETE FROM chunks")
        index.insert_rows(conn, files.rows.values())
        queue = JobQueue(conn)
        requeued = queue.enqueue_many(admit_job(i) for i in files.pending)
        requeued += queue.enqueue_many(resummarise_job(i, depth) for i, depth in files.stale)
    return ReindexReport(
        files.leaves,
        tuple(files.skipped),
        tuple((rel, node_id) for rel, node_id, _ in files.duplicates),
        requeued,
        summaries=files.summaries,
    )
