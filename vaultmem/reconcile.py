"""Catching up with edits made outside the engine: hand-edited, deleted or replaced node files.

Owns the rule "a change to a node makes every level above it stale": an edited leaf is re-read (same id,
same provenance), re-embedded and its ancestors are marked stale; an edited summary is re-read and its
ancestors are marked stale (its own text is kept, and pinned at its next re-summarisation); a deleted
file's row goes and its ancestors are marked stale. Files are compared with the index by size and mtime
first, then by hash, so an untouched vault costs one ``stat`` per file. Never deletes or rewrites a
person's file; only summary ``stale:`` flags are written.

``reconcile_paths`` does the same for a set of paths the watcher reported, and also handles files the
index does not know: a valid node file (moved, restored by git) is indexed by its frontmatter id (a moved
node keeps its id; its row's path and parent follow it), and a Markdown file outside ``sources/`` that is
not a node (a note written in Obsidian) is handed to ``read_note`` to be kept as a document (the
file itself is left untouched), and so is a note that is gone (its document leaves the index). ``changed_paths`` finds, by ``stat`` alone, which paths need that.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from vaultmem import fsio, index
from vaultmem.db import atomic
from vaultmem.errors import FrontmatterError, InvalidInput
from vaultmem.jobs import JobQueue, admit_job, resummarise_job
from vaultmem.layout import SIDECAR_NAME, SOURCES, SUMMARY_NAME, Layout, is_ignored
from vaultmem.leaffile import id_from_filename
from vaultmem.scan import read_leaf_file, read_summary_file, scan
from vaultmem.stale import ancestors_of, mark_stale


@dataclass
class CatchUp:
    changed: list[str] = field(default_factory=list)  # paths re-read
    deleted: list[str] = field(default_factory=list)  # paths whose rows went
    invalid: list[str] = field(default_factory=list)  # edited into something unreadable (check reports)
    stale: list[str] = field(default_factory=list)  # summary ids marked stale


HandEdits = Callable[
    [list[str]], None
]  # told the paths of a person's edits before anything derives from them


def catch_up(
    conn: sqlite3.Connection, layout: Layout, max_bytes: int, on_hand_edits: HandEdits | None = None
) -> CatchUp:
    out = CatchUp()
    # Only rows with a file of their own: a note's sections are compared with their note whole
    # (``Vault.documents_out_of_step``), never taken for deleted files here.
    rows = conn.execute(
        f"SELECT id, kind, path, parent, file_hash, file_size, file_mtime_ns FROM chunks WHERE {index.WITH_FILE}"
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
        JobQueue(conn).enqueue_many(admit_job(i) for i in reembed)
    if on_hand_edits is not None and (out.changed or out.deleted or out.invalid):
        on_hand_edits([*out.changed, *out.deleted, *out.invalid])
    stale = [a for node_id in touched for a in parents[node_id] if a not in gone]
    if stale:
        out.stale = mark_stale(conn, layout, stale, max_bytes, unless_current=True)
    return out


Stamp = tuple[int, int]  # (size, mtime_ns): what a cheap rescan compares


@dataclass
class PathsReport:
    """What ``reconcile_paths`` did. Paths are vault-relative."""

    new: list[str] = field(default_factory=list)  # node files indexed for the first time (or restored)
    moved: list[tuple[str, str]] = field(default_factory=list)  # (old path, new path), id kept
    changed: list[str] = field(default_factory=list)  # node files re-read in place
    deleted: list[str] = field(default_factory=list)  # paths whose rows went
    notes: list[str] = field(default_factory=list)  # non-node Markdown files read as documents
    added: list[str] = field(default_factory=list)  # leaf ids those documents added
    invalid: list[tuple[str, str]] = field(default_factory=list)  # (path, why): reported, never touched
    stale: list[str] = field(default_factory=list)  # summary ids marked stale
    unchanged: int = 0  # paths whose file already matches the index (the engine's own writes)
    seen: dict[str, Stamp] = field(default_factory=dict)  # non-node files handled, with their stamps

    @property
    def work(self) -> int:
        """How many paths led to a change in the index (0 for the engine's own writes)."""
        return len(self.new) + len(self.moved) + len(self.changed) + len(self.deleted) + len(self.added)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "seen"}


def _parent_of(conn: sqlite3.Connection, rel: str, is_summary: bool) -> str | None:
    """The id of the ``_summary.md`` over a node: in its own directory for a leaf, the one above for a
    summary (the same rule reindex uses)."""
    directory = PurePosixPath(rel).parent
    if is_summary:
        directory = directory.parent
    if str(directory) in ("", "."):
        return None
    row = conn.execute(
        "SELECT id FROM chunks WHERE path = ? AND kind = 'summary'", (f"{directory}/{SUMMARY_NAME}",)
    ).fetchone()
    return str(row["id"]) if row is not None else None


def _stamp(st: os.stat_result) -> Stamp:
    return (st.st_size, st.st_mtime_ns)


def reconcile_paths(
    conn: sqlite3.Connection,
    layout: Layout,
    rels: Iterable[str],
    max_bytes: int,
    read_note: Callable[[list[str], list[str]], list[str]] | None = None,
    seen: Mapping[str, Stamp] | None = None,
    on_hand_edits: HandEdits | None = None,
) -> PathsReport:
    """Bring the index in step with these paths (files created, edited, moved or deleted).

    A path whose file matches its row by hash is a no-op, so the engine's own writes (indexed with
    their hash when written) never cause work. Present files are handled before missing ones, and
    summaries before leaves, so a folder moved in one batch keeps every id and parent link. The caller
    holds the vault's write lock. ``seen``: non-node files already handled, with their stamps (skipped
    while the stamp is the same). ``on_hand_edits`` is told the paths of what a person did (files new,
    moved, changed, deleted, notes, invalid files) before any note is read or any summary marked stale."""
    out = PathsReport()
    seen = seen or {}
    wanted = sorted({r for r in rels if r.endswith(".md") and not is_ignored(r)})
    present: list[tuple[str, os.stat_result]] = []
    missing: list[str] = []
    for rel in wanted:
        path = layout.abs(rel)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            missing.append(rel)
            continue
        if path.is_symlink() or not path.is_file():
            continue
        present.append((rel, st))
    # A leaf file keeps its name wherever it moves: a vanished one found elsewhere in its source tree
    # moved there (git writes the new place after removing the old, and its event may still be on its
    # way). Handled as a move in this batch, it keeps its row and vector instead of being dropped and
    # re-created, which would re-embed it and re-run everything downstream.
    known = {rel for rel, _ in present}
    for rel in _moved_leaves(layout, conn, missing):
        if rel not in known:
            try:
                present.append((rel, os.lstat(layout.abs(rel))))
            except FileNotFoundError:
                continue
    # Summaries first, shallow first: a leaf's parent is looked up by its directory's summary.
    present.sort(key=lambda p: (not p[0].endswith("/" + SUMMARY_NAME), p[0].count("/"), p[0]))
    upserts = 0
    reembed: list[str] = []
    resummarise: list[tuple[str, int]] = []
    touched: set[str] = set()  # summary ids that go stale
    gone: set[str] = set()
    notes: list[tuple[str, Stamp]] = []
    missing_set = set(missing)
    gone_notes: list[str] = []
    sidecars: dict[str, set[str]] = {}
    with atomic(conn):
        for rel, st in present:
            row = conn.execute(
                "SELECT id, parent, file_hash, file_size, file_mtime_ns FROM chunks WHERE path = ?", (rel,)
            ).fetchone()
            if row is None and seen.get(rel) == _stamp(st):
                out.unchanged += 1
                continue
            if row is not None and (st.st_size, st.st_mtime_ns) == (row["file_size"], row["file_mtime_ns"]):
                out.unchanged += 1
                continue
            digest = fsio.file_hash(layout.abs(rel))
            if row is not None and digest == row["file_hash"]:
                conn.execute(
                    "UPDATE chunks SET file_size = ?, file_mtime_ns = ? WHERE id = ?",
                    (st.st_size, st.st_mtime_ns, row["id"]),
                )
                out.unchanged += 1
                continue
            name = rel.rsplit("/", 1)[-1]
            is_summary = name == SUMMARY_NAME
            try:
                node_id, depth, is_stale, new_row = _read_node(layout, conn, rel, is_summary, max_bytes)
            except _NotANode:
                if row is not None:
                    out.invalid.append((rel, "no longer a vaultmem node file; `vaultmem check` shows why"))
                elif rel.split("/", 1)[0] == SOURCES:
                    out.invalid.append((rel, "not a vaultmem node; move it outside sources/ to ingest it"))
                    out.seen[rel] = _stamp(st)
                else:
                    notes.append((rel, _stamp(st)))
                continue
            except (FrontmatterError, InvalidInput) as exc:
                out.invalid.append((rel, str(exc)))
                if row is None:
                    out.seen[rel] = _stamp(st)
                continue
            if row is not None and row["id"] != node_id:
                gone.add(row["id"])  # another node now lives at this path
                touched.update(ancestors_of(conn, row["id"]))
                conn.execute("DELETE FROM chunks WHERE id = ?", (row["id"],))
            existing = conn.execute("SELECT path FROM chunks WHERE id = ?", (node_id,)).fetchone()
            if existing is not None and existing["path"] != rel:
                old = str(existing["path"])
                if old not in missing_set and layout.abs(old).exists():
                    out.invalid.append((rel, f"duplicate id {node_id}: {old} has it too; remove one copy"))
                    out.seen[rel] = _stamp(st)
                    continue
                touched.update(ancestors_of(conn, node_id))
                out.moved.append((old, rel))
                # Its vector must reach the new folder's sidecar (git restores sidecars with the files;
                # a hand move does not), so the files alone still rebuild the index.
                if not is_summary and rel.rsplit("/", 1)[-1] not in _sidecar_names(layout, rel, sidecars):
                    reembed.append(node_id)
            elif existing is not None:
                out.changed.append(rel)
                touched.update(ancestors_of(conn, node_id))
                if not is_summary:
                    reembed.append(node_id)
            else:
                out.new.append(rel)
                reembed.append(node_id)
                if is_stale:
                    resummarise.append((node_id, depth))
            index.upsert_rows(conn, [new_row])
            upserts += 1
            touched.update(ancestors_of(conn, node_id))
        for rel in missing:
            row = conn.execute("SELECT id FROM chunks WHERE path = ?", (rel,)).fetchone()
            if row is None:
                if rel.split("/", 1)[0] != SOURCES:
                    gone_notes.append(rel)  # a note deleted or renamed: its document goes with it
                continue  # never indexed, or its node already moved on in this batch
            touched.update(ancestors_of(conn, row["id"]))
            conn.execute("DELETE FROM chunks WHERE id = ?", (row["id"],))
            gone.add(row["id"])
            out.deleted.append(rel)
        queue = JobQueue(conn)
        queue.enqueue_many(admit_job(i) for i in reembed)
        queue.enqueue_many(resummarise_job(i, d) for i, d in resummarise)
    if on_hand_edits is not None:
        hand = [
            *out.new,
            *out.changed,
            *out.deleted,
            *(rel for rel, _ in notes),
            *(rel for rel, _ in out.invalid),
        ]
        hand += [p for move in out.moved for p in move]
        if hand:
            on_hand_edits(hand)
    if (notes or gone_notes) and read_note is not None:
        out.added = read_note([rel for rel, _ in notes], gone_notes)
        out.notes = [rel for rel, _ in notes]
        out.seen.update(notes)
    stale = sorted(touched - gone)
    if stale:
        out.stale = mark_stale(conn, layout, stale, max_bytes, unless_current=True)
    return out


def _moved_leaves(layout: Layout, conn: sqlite3.Connection, missing: list[str]) -> list[str]:
    """Where indexed leaf files among ``missing`` are now: files of the same name elsewhere in the same
    source tree (one walk of each source folder concerned; only when leaves vanished)."""
    wanted: dict[str, dict[str, str]] = {}  # source folder -> file name -> old path
    for rel in missing:
        parts = rel.split("/")
        if len(parts) < 3 or parts[0] != SOURCES or id_from_filename(parts[-1]) is None:
            continue
        if conn.execute("SELECT 1 FROM chunks WHERE path = ? AND kind = 'leaf'", (rel,)).fetchone() is None:
            continue
        wanted.setdefault(f"{SOURCES}/{parts[1]}", {})[parts[-1]] = rel
    found: list[str] = []
    for folder, names in wanted.items():
        for dirpath, dirnames, filenames in os.walk(layout.abs(folder)):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            base = layout.rel(Path(dirpath))
            found.extend(f"{base}/{name}" for name in filenames if name in names)
    return [rel for rel in found if rel not in missing and not is_ignored(rel)]


def _sidecar_names(layout: Layout, rel: str, cache: dict[str, set[str]]) -> set[str]:
    """File names that have an entry in the ``_embeddings.json`` of ``rel``'s folder (any model)."""
    directory = rel.rsplit("/", 1)[0] if "/" in rel else ""
    if directory not in cache:
        try:
            data = json.loads((layout.abs(directory) / SIDECAR_NAME).read_bytes() if directory else b"{}")
            entries = data.get("entries") if isinstance(data, dict) else None
            cache[directory] = set(entries) if isinstance(entries, dict) else set()
        except (OSError, ValueError):
            cache[directory] = set()
    return cache[directory]


class _NotANode(Exception):
    pass


def _read_node(
    layout: Layout, conn: sqlite3.Connection, rel: str, is_summary: bool, max_bytes: int
) -> tuple[str, int, bool, tuple[object, ...]]:
    """(id, depth, stale, row) of a node file; _NotANode for Markdown that is not one."""
    if is_summary:
        node, stamp = read_summary_file(layout, rel, max_bytes)
        return node.id, node.depth, node.stale, index.summary_row(node, stamp, _parent_of(conn, rel, True))
    if id_from_filename(rel.rsplit("/", 1)[-1]) is None:
        raise _NotANode(rel)
    leaf, stamp = read_leaf_file(layout, rel, max_bytes)
    return leaf.id, 0, False, index.leaf_row(leaf, stamp, _parent_of(conn, rel, False))


def changed_paths(conn: sqlite3.Connection, layout: Layout, seen: Mapping[str, Stamp]) -> list[str]:
    """Paths whose file differs from what the index (or ``seen``) remembers, by ``stat`` alone: rows
    whose file is gone or has another size or mtime, and Markdown files nobody has read yet."""
    known: dict[str, Stamp] = dict(seen)
    out: list[str] = []
    for row in conn.execute("SELECT path, file_size, file_mtime_ns FROM chunks"):
        # A section of a note indexed in place stands for its note, with the stamp the note was read at.
        known[index.file_of(row["path"])] = (row["file_size"], row["file_mtime_ns"])
    on_disk = {entry.rel for entry in scan(layout).entries}
    for rel in on_disk:
        try:
            st = os.stat(layout.abs(rel))
        except FileNotFoundError:
            out.append(rel)
            continue
        if known.get(rel) != _stamp(st):
            out.append(rel)
    out.extend(rel for rel in known if rel not in on_disk and rel not in seen)
    return sorted(set(out))
