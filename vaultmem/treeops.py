"""Tree operations made durable: a compaction step either finishes, or finishes on the next open.

Owns the execution of one planned step (a seal, a merge, a condensation): summary files to write, leaf
files and level directories to move, sidecar entries to carry along, and the index rows that follow. A
write-ahead note in ``.vaultmem/treeops/`` records the whole step first; a crash at any point is repaired
by replaying the note, which is idempotent: a file already written, or a move already made, is skipped.
Leaf files are only ever renamed, never rewritten. Files the engine did not read are never overwritten
(every replacement carries the hash that was read).
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import numpy as np
import numpy.typing as npt

from vaultmem import fsio, index, sidecar, vectors
from vaultmem.db import atomic
from vaultmem.errors import ConflictError, FrontmatterError, InvalidInput
from vaultmem.ingest import extract_job, read_leaf_file, read_summary_file
from vaultmem.jobs import JobQueue, resummarize_job
from vaultmem.layout import SUMMARY_NAME, Layout
from vaultmem.leaffile import id_from_filename
from vaultmem.summaryfile import parse_summary, text_hash

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True)
class FileWrite:
    path: str  # vault-relative
    data: str
    expected: str | None  # None: a new file; else the hash of the file that was read


@dataclass(frozen=True)
class TreeOp:
    kind: str  # "seal" | "condense"
    source: str
    message: str  # one line, also the git commit message
    writes: tuple[FileWrite, ...] = ()
    moves: tuple[tuple[str, str], ...] = ()  # (from, to): leaf files or level directories
    stale: tuple[tuple[str, int], ...] = ()  # (summary id, depth) queued for re-summarisation
    vectors: Mapping[str, Vector] = field(default_factory=dict, compare=False)  # summary id -> vector

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "kind": self.kind,
                "source": self.source,
                "message": self.message,
                "writes": [[w.path, w.data, w.expected] for w in self.writes],
                "moves": [list(m) for m in self.moves],
                "stale": [list(s) for s in self.stale],
            },
            ensure_ascii=False,
        ).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> TreeOp:
        raw = json.loads(data.decode("utf-8"))
        return cls(
            kind=str(raw["kind"]),
            source=str(raw["source"]),
            message=str(raw["message"]),
            writes=tuple(FileWrite(str(p), str(d), e) for p, d, e in raw["writes"]),
            moves=tuple((str(a), str(b)) for a, b in raw["moves"]),
            stale=tuple((str(i), int(d)) for i, d in raw["stale"]),
        )


@dataclass(frozen=True)
class Applied:
    message: str
    skipped: tuple[str, ...] = ()  # steps a replay could not do (a file changed or vanished meanwhile)


def apply(conn: sqlite3.Connection, layout: Layout, op: TreeOp, model: str, dim: int) -> Applied:
    """Run ``op`` durably. Raises ConflictError, before changing anything, when a file it would replace
    or move changed since it was planned (the caller re-plans)."""
    layout.treeops.mkdir(parents=True, exist_ok=True)
    note = layout.treeops / f"{secrets.token_hex(8)}.json"
    fsio.atomic_write(note, op.to_json())
    try:
        result = _execute(conn, layout, op, model, dim, strict=True)
    except ConflictError:
        note.unlink(missing_ok=True)
        raise
    note.unlink(missing_ok=True)
    return result


def pending_notes(layout: Layout) -> list[Path]:
    return sorted(layout.treeops.glob("*.json")) if layout.treeops.is_dir() else []


def heal(conn: sqlite3.Connection, layout: Layout, model: str, dim: int) -> list[Applied]:
    """Finish every step a crash interrupted (idempotent; safe to run twice)."""
    done = []
    for note in pending_notes(layout):
        try:
            op = TreeOp.from_json(note.read_bytes())
        except (ValueError, KeyError, TypeError, OSError):
            note.unlink(missing_ok=True)  # a note torn by the crash itself: its step never began
            continue
        for write in op.writes:
            path = layout.abs(write.path)
            for stray in path.parent.glob(f"{fsio.TMP_PREFIX}*-{path.name}"):
                stray.unlink(missing_ok=True)
        done.append(_execute(conn, layout, op, model, dim, strict=False))
        note.unlink(missing_ok=True)
    return done


def _execute(
    conn: sqlite3.Connection, layout: Layout, op: TreeOp, model: str, dim: int, *, strict: bool
) -> Applied:
    skipped: list[str] = []
    writes: list[fsio.PendingWrite] = []
    for w in op.writes:
        path = layout.abs(w.path)
        data = w.data.encode("utf-8")
        current = fsio.file_hash(path)
        if current == fsio.sha256_bytes(data):
            continue  # written before the crash
        if current != w.expected:
            if strict:
                raise ConflictError(f"{path} changed on disk since it was read; compaction will re-plan")
            skipped.append(f"{w.path}: changed meanwhile, left as it is")
            continue
        writes.append(fsio.PendingWrite(path, data, w.expected))
    moves: list[tuple[Path, Path]] = []
    for src_rel, dst_rel in op.moves:
        src, dst = layout.abs(src_rel), layout.abs(dst_rel)
        if src.exists() and not dst.exists():
            moves.append((src, dst))
        elif dst.exists() and not src.exists():
            continue  # moved before the crash
        elif strict:
            raise ConflictError(f"cannot move {src_rel} to {dst_rel}: source missing or target exists")
        else:
            skipped.append(f"{src_rel} -> {dst_rel}: source missing or target exists")
    fsio.write_batch_durable(layout.root, writes)
    for src, dst in moves:
        fsio.move_file(src, dst)
    _carry_vectors(conn, layout, op, model, dim)
    _index(conn, layout, op, model)
    return Applied(op.message, tuple(skipped))


def _carry_vectors(conn: sqlite3.Connection, layout: Layout, op: TreeOp, model: str, dim: int) -> None:
    """Give moved leaves and new summaries their entries in the destination directory's sidecar.

    Entries left behind in the old directory are harmless (keyed by a file name that is gone) and are
    pruned at the end of a compaction pass, so a big ``_fresh/`` sidecar is rewritten once per pass."""
    put: dict[str, dict[str, sidecar.Entry]] = defaultdict(dict)
    moved_ids: dict[str, tuple[str, str]] = {}
    for _src, dst in op.moves:
        leaf_id = id_from_filename(PurePosixPath(dst).name)
        if leaf_id is not None:
            moved_ids[leaf_id] = (str(PurePosixPath(dst).parent), PurePosixPath(dst).name)
    for part, marks in index.in_batches(list(moved_ids)):
        for row in conn.execute(
            f"SELECT id, content_hash, vec FROM vectors WHERE model = ? AND id IN ({marks})", [model, *part]
        ):
            rel_dir, name = moved_ids[row["id"]]
            put[rel_dir][name] = sidecar.Entry.of(row["content_hash"], np.frombuffer(row["vec"], dtype="<f4"))
    for w in op.writes:
        node = parse_summary(w.data, w.path)[0]
        summary_vec = op.vectors.get(node.id)
        if summary_vec is not None:
            put[node.directory][SUMMARY_NAME] = sidecar.Entry.of(text_hash(node.searchable), summary_vec)
    for rel_dir, entries in put.items():
        sidecar.update(layout.state, layout.abs(rel_dir), model, dim, entries)


def _index(conn: sqlite3.Connection, layout: Layout, op: TreeOp, model: str) -> None:
    """Bring the rows in line with the files the step produced, in one transaction."""
    with atomic(conn):
        touched_summaries: list[str] = []
        for src, dst in op.moves:
            if id_from_filename(PurePosixPath(dst).name) is None:  # a level directory
                old, new = src + "/", dst + "/"
                conn.execute(
                    "UPDATE chunks SET path = ? || substr(path, ?) WHERE path >= ? AND path < ?",
                    (new, len(old) + 1, *index.prefix_range(old)),
                )
                touched_summaries.append(f"{dst}/{SUMMARY_NAME}")
        for w in op.writes:
            touched_summaries.append(w.path)
        summary_rows = []
        for rel in dict.fromkeys(touched_summaries):
            try:
                node, stamp = read_summary_file(layout, rel, 1 << 30)
            except (FileNotFoundError, FrontmatterError, InvalidInput):
                continue
            summary_rows.append((node, stamp))
        before: dict[str, str] = {}
        for part, marks in index.in_batches([n.id for n, _ in summary_rows]):
            before.update(
                conn.execute(f"SELECT id, content_hash FROM chunks WHERE id IN ({marks})", part).fetchall()
            )
        index.upsert_rows(conn, (index.summary_row(n, s, None) for n, s in summary_rows))
        for node, _stamp in summary_rows:
            parent_dir = str(PurePosixPath(node.directory).parent)
            conn.execute(
                "UPDATE chunks SET parent = (SELECT id FROM chunks WHERE path = ?) WHERE id = ?",
                (f"{parent_dir}/{SUMMARY_NAME}", node.id),
            )
        leaf_rows = []
        reembed = []
        old_hash: dict[str, str] = {}
        leaf_ids = [i for i in (id_from_filename(PurePosixPath(d).name) for _, d in op.moves) if i]
        for part, marks in index.in_batches(leaf_ids):
            old_hash.update(
                conn.execute(f"SELECT id, content_hash FROM chunks WHERE id IN ({marks})", part).fetchall()
            )
        for _src, dst in op.moves:
            if id_from_filename(PurePosixPath(dst).name) is None:
                continue
            try:
                leaf, stamp = read_leaf_file(layout, dst, 1 << 30)
            except (FileNotFoundError, FrontmatterError, InvalidInput):
                continue
            parent = conn.execute(
                "SELECT id FROM chunks WHERE path = ?", (f"{PurePosixPath(dst).parent}/{SUMMARY_NAME}",)
            ).fetchone()
            leaf_rows.append(index.leaf_row(leaf, stamp, parent[0] if parent else None))
            if old_hash.get(leaf.id) != leaf.content_hash:
                reembed.append(leaf.id)  # edited by hand while it waited in the buffer
        index.upsert_rows(conn, leaf_rows)
        vectors.upsert(
            conn,
            model,
            [
                vectors.VectorRow(n.id, text_hash(n.searchable), op.vectors[n.id])
                for n, _ in summary_rows
                if n.id in op.vectors
            ],
        )
        # A summary whose text changed and came without a vector (a replayed step) is embedded later.
        missing = [
            n.id
            for n, _ in summary_rows
            if n.id not in op.vectors and before.get(n.id) != text_hash(n.searchable)
        ]
        queue = JobQueue(conn)
        queue.enqueue_many(extract_job(i) for i in [*reembed, *missing])
        queue.enqueue_many(resummarize_job(i, d) for i, d in op.stale)
