"""Rebuild chunks.db's derived tables from the vault's files alone.

Owns ``reindex``: every summary and leaf file is read and validated, and the chunk rows (with their FTS indexes)
are replaced in one transaction, so a reader sees the old index or the new one (``Vault.reindex`` makes
the agent's memory files, the sections of notes indexed in place and the vectors part of that same
transaction). The job queue is kept;
work that the files imply (leaves still ``pending_extraction``) is re-queued. Never writes a vault file.
"""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from vaultmem import forking, index, leaffile
from vaultmem.db import atomic, bulk_delete
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
    processes: int = 1  # how many processes parsed the leaf files


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
    processes: int = 1  # how many processes parsed the leaf files


PARALLEL_MIN_LEAVES = 2_000  # below this a worker's start costs more than the parsing it takes over

# One leaf file read: (rel, id, row, pending), or (rel, None, why, False) when it is not a valid leaf.
LeafRead = tuple[str, str | None, tuple[object, ...] | str, bool]


def read_vault(
    layout: Layout,
    max_bytes: int,
    progress: Callable[[int, int], None] | None = None,
    *,
    workers: int | None = None,
) -> VaultFiles:
    """Read every summary and leaf file. Summaries first: a node's ``parent`` is the id of the
    ``_summary.md`` in the directory above it (for a leaf: in its own directory).

    Leaf files are parsed by a process per core (``workers``: how many processes in all, this one
    included; default: the cores this process may use) when there are enough of them and this process
    runs no other thread (a forked child of a threaded process could inherit a held lock); otherwise
    here. Either way the results are taken in the order of the files, so the rows are the same."""
    entries = scan(layout).entries
    out = VaultFiles()
    dir_summary: dict[str, str] = {}
    summaries: list[tuple[str, SummaryNode, index.FileStamp]] = []
    total = len(entries)
    done = 0
    for entry in entries:
        if not entry.is_summary:
            continue
        done += 1
        if progress is not None:
            progress(done, total)
        try:
            node, stamp = read_summary_file(layout, entry.rel, max_bytes)
        except (FrontmatterError, InvalidInput) as exc:
            out.skipped.append((entry.rel, str(exc)))
            continue
        if _duplicate(out, entry.rel, node.id):
            continue
        dir_summary[node.directory] = node.id
        summaries.append((entry.rel, node, stamp))
    leaf_rels: list[str] = []
    for entry in entries:
        if entry.is_summary:
            continue
        if entry.rel.split("/", 1)[0] in AGENT_TOPS and "/" in entry.rel:
            done += 1  # the agent's own memory: memindex reads those
            continue
        leaf_rels.append(entry.rel)
    if progress is not None and done:
        progress(done, total)
    out.processes = _processes(len(leaf_rels), workers)
    for rel, leaf_id, row, pending in _read_leaves(
        layout, max_bytes, leaf_rels, dir_summary, out.processes, progress, done, total
    ):
        if leaf_id is None:
            out.skipped.append((rel, str(row)))
            continue
        if _duplicate(out, rel, leaf_id):
            continue
        assert isinstance(row, tuple)
        out.rows[leaf_id] = row
        out.leaves += 1
        if pending:
            out.pending.append(leaf_id)
    for _rel, node, stamp in summaries:
        out.rows[node.id] = index.summary_row(node, stamp, dir_summary.get(_dir(node.directory)))
        out.summaries += 1
        if node.stale:
            out.stale.append((node.id, node.depth))
    return out


def _read_leaves(
    layout: Layout,
    max_bytes: int,
    rels: list[str],
    dir_summary: dict[str, str],
    count: int,
    progress: Callable[[int, int], None] | None,
    done: int,
    total: int,
) -> Iterator[LeafRead]:
    """The rows of the leaf files ``rels``, in their order: in ``count`` slices, the first read here
    while worker processes read the others (fork: they start without importing anything again)."""
    if count == 1:
        for n, rel in enumerate(rels, 1):
            if progress is not None:
                progress(done + n, total)
            yield _read_leaf(layout, max_bytes, rel, dir_summary)
        return
    size = -(-len(rels) // count)
    slices = [rels[i : i + size] for i in range(0, len(rels), size)]
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=len(slices) - 1, mp_context=context) as pool:
        futures = [pool.submit(_read_slice, layout, max_bytes, part, dir_summary) for part in slices[1:]]
        first = _read_slice(layout, max_bytes, slices[0], dir_summary)
        for result in (first, *(f.result() for f in futures)):  # the first slice's wait is the others' work
            done += len(result)
            if progress is not None:
                progress(done, total)
            yield from result


def _processes(leaves: int, workers: int | None) -> int:
    """How many processes read ``leaves`` leaf files: one per core (``workers`` when given), one per
    ``PARALLEL_MIN_LEAVES // 2`` files at most, and only this one while it runs threads not marked
    ``fork_safe``."""
    cores = workers if workers is not None else _cores()
    count = min(cores, leaves // (PARALLEL_MIN_LEAVES // 2))
    if count < 2 or not forking.can_fork():
        return 1
    return count


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _read_slice(
    layout: Layout, max_bytes: int, rels: list[str], dir_summary: dict[str, str]
) -> list[LeafRead]:
    return [_read_leaf(layout, max_bytes, rel, dir_summary) for rel in rels]


def _read_leaf(layout: Layout, max_bytes: int, rel: str, dir_summary: dict[str, str]) -> LeafRead:
    if leaffile.id_from_filename(rel.rsplit("/", 1)[-1]) is None:
        return rel, None, "not a leaf file (no leaf id in its name)", False
    try:
        leaf, stamp = read_leaf_file(layout, rel, max_bytes)
    except (FrontmatterError, InvalidInput) as exc:
        return rel, None, str(exc), False
    return (
        rel,
        leaf.id,
        index.leaf_row(leaf, stamp, dir_summary.get(_dir(rel))),
        leaf.status is Status.PENDING,
    )


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
    *,
    workers: int | None = None,
    read: Callable[[VaultFiles], object] | None = None,
) -> ReindexReport:
    """Replace every chunk row by the rows of the files (``workers``: see ``read_vault``). Every vector
    goes too: the caller (``Vault.reindex``) loads them again from the sidecars. ``read`` is told the
    files read, before their rows are written (the caller starts reading the sidecars there)."""
    files = read_vault(layout, max_bytes, progress, workers=workers)
    if read is not None:
        read(files)
    with atomic(conn):
        # Empty the FTS tables and the vectors wholesale first (the delete triggers' set form then finds
        # nothing there; the caller loads every vector again from the sidecars), then every row with the
        # delete triggers' work done once (mentions, the graph log).
        for table in ("fts_words", "fts_trigram", "fts_nav_words", "fts_nav_trigram", "vectors"):
            conn.execute(f"DELETE FROM {table}")
        bulk_delete(conn)
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
        processes=files.processes,
    )
