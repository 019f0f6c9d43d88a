"""Tree operations made durable: a step on the tree either finishes, or finishes on the next open.

Owns the execution of one planned step (a seal, a merge, a condensation, a document operation): files to
write (summaries, and leaves a document operation creates or edits), leaf files and level directories to
move, node files to remove, sidecar entries to carry along or prune, and the index rows that follow. A
write-ahead note in ``.vaultmem/treeops/`` records the whole step first; a crash at any point is repaired
by replaying the note, which is idempotent: a file already written, a move already made or a file already
removed is skipped. Compaction only ever renames leaf files. Files the engine did not read are never
overwritten or removed: every replacement and every removal carries the hash that was read (only the
engine's own ``_embeddings.json`` is removed unguarded), and a directory is removed only when empty.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

import numpy as np
import numpy.typing as npt

from vaultmem import fsio, index, sidecar, vectors
from vaultmem.db import atomic
from vaultmem.embed import Embedder
from vaultmem.errors import ConflictError, FrontmatterError, InvalidInput, UnsafePath
from vaultmem.jobs import JobQueue, NewJob, admit_job, digest_job, resummarise_job, topic_route_job
from vaultmem.layout import SIDECAR_NAME, SUMMARY_NAME, Layout
from vaultmem.leaffile import id_from_filename, parse_leaf
from vaultmem.model import parse_ts
from vaultmem.scan import read_leaf_file, read_summary_file
from vaultmem.summarise import Summariser
from vaultmem.summaryfile import parse_summary, text_hash

Vector = npt.NDArray[np.float32]
# Files a step has just written (or replays after a crash) are read back to index them whatever the
# vault's ``max_file_bytes``: the engine wrote them, and a step half-indexed because of a read cap would
# leave the index behind its files. The bound is only a guard against reading a runaway file whole.
OWN_FILE_MAX_BYTES = 1 << 30


LockFactory = Callable[[], AbstractContextManager[object]]


@dataclass(frozen=True, kw_only=True)
class StepEnv:
    """What a job that writes the tree works with (one object instead of the same six arguments on
    every re-summarise, digest and topic route): where, with which summariser and embedder (a factory:
    the model loads on first use), under the vault's write lock, the largest file it reads, and how a
    finished step is recorded (git auto-commit; None when off)."""

    layout: Layout
    summariser: Summariser
    embedder: Callable[[], Embedder]
    lock: LockFactory
    max_bytes: int
    commit: Callable[[str], None] | None = None


@dataclass(frozen=True)
class FileWrite:
    path: str  # vault-relative
    data: str
    expected: str | None  # None: a new file; else the hash of the file that was read


@dataclass(frozen=True)
class TreeOp:
    """One durable step. ``writes`` are ``_summary.md`` files or leaf files (a name ending in the leaf id);
    writes happen first, then moves, then removals. A write to a path that is also moved is done at the
    old place, then moved. ``removes`` lists node files and sidecars as (path, hash that was read; None
    only for an engine-owned ``_embeddings.json``); ``rmdirs`` are directories removed once empty."""

    kind: str  # "seal" | "condense" | "resummarise" | "stale" | "docmem" | "link"
    source: str
    message: str  # one line, also the git commit message
    writes: tuple[FileWrite, ...] = ()
    moves: tuple[tuple[str, str], ...] = ()  # (from, to): leaf files or level directories
    stale: tuple[tuple[str, int], ...] = ()  # (summary id, depth) queued for re-summarisation
    vectors: Mapping[str, Vector] = field(default_factory=dict, compare=False)  # node id -> vector
    removes: tuple[tuple[str, str | None], ...] = ()
    rmdirs: tuple[str, ...] = ()

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "kind": self.kind,
                "source": self.source,
                "message": self.message,
                "writes": [[w.path, w.data, w.expected] for w in self.writes],
                "moves": [list(m) for m in self.moves],
                "stale": [list(s) for s in self.stale],
                "removes": [list(r) for r in self.removes],
                "rmdirs": list(self.rmdirs),
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
            # Notes written before removals existed have neither key.
            removes=tuple((str(p), None if e is None else str(e)) for p, e in raw.get("removes", [])),
            rmdirs=tuple(str(d) for d in raw.get("rmdirs", [])),
        )


@dataclass(frozen=True)
class Applied:
    message: str
    skipped: tuple[str, ...] = ()  # steps a replay could not do (a file changed or vanished meanwhile)


def apply(conn: sqlite3.Connection, layout: Layout, op: TreeOp, model: str, dim: int) -> Applied:
    """Run ``op`` durably. Raises ConflictError, before changing anything, when a file it would replace
    or move changed since it was planned (the caller re-plans)."""
    note = layout.treeops / f"{secrets.token_hex(8)}.json"
    fsio.atomic_write(note, op.to_json(), root=layout.root)
    try:
        result = _execute(conn, layout, op, model, dim, strict=True)
    except (ConflictError, UnsafePath):
        fsio.remove_file(layout.root, note)  # refused before anything changed
        raise
    fsio.remove_file(layout.root, note)
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
            fsio.remove_file(layout.root, note)  # a note torn by the crash itself: its step never began
            continue
        for write in op.writes:
            path = layout.abs(write.path)
            for stray in path.parent.glob(f"{fsio.TMP_PREFIX}*-{path.name}"):
                fsio.remove_file(layout.root, stray)
        done.append(_execute(conn, layout, op, model, dim, strict=False))
        # What the crashed process did before dying was never reported: report the whole step now.
        fsio.changed(_op_files(layout, op))
        fsio.remove_file(layout.root, note)
    return done


def heal_recorded(
    conn: sqlite3.Connection,
    layout: Layout,
    embedder: Embedder,
    commit: Callable[[str], None] | None,
    why: str,
) -> list[str]:
    """``heal``, each finished step recorded for git auto-commit (``commit``; None: not recorded) as its
    message followed by ``why`` in brackets; returns the messages. The caller holds the write lock."""
    done = heal(conn, layout, embedder.model_id, embedder.dim)
    if commit is not None:
        for step in done:
            commit(f"{step.message} ({why})")
    return [step.message for step in done]


def _op_files(layout: Layout, op: TreeOp) -> list[Path]:
    """Every file a step writes, moves (both ends, every file of a moved directory) or removes."""
    out = [layout.abs(w.path) for w in op.writes] + [layout.abs(rel) for rel, _ in op.removes]
    for src, dst in op.moves:
        target = layout.abs(dst)
        if target.is_dir():
            moved = [p for p in target.rglob("*") if not p.is_dir()]
            out += moved + [layout.abs(src) / p.relative_to(target) for p in moved]
        else:
            out += [layout.abs(src), target]
    return out


def _execute(
    conn: sqlite3.Connection, layout: Layout, op: TreeOp, model: str, dim: int, *, strict: bool
) -> Applied:
    skipped: list[str] = []
    writes: list[fsio.PendingWrite] = []
    moved_to = dict(op.moves)
    for w in op.writes:
        path = layout.abs(w.path)
        data = w.data.encode("utf-8")
        current = fsio.file_hash(path)
        if current == fsio.sha256_bytes(data):
            continue  # written before the crash
        if current is None and w.path in moved_to and layout.abs(moved_to[w.path]).exists():
            continue  # written, then moved, before the crash
        if current != w.expected:
            if strict:
                raise ConflictError(
                    f"{path} changed on disk since it was read; nothing was changed (plan again)"
                )
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
    removes: list[Path] = []
    for rel, expected in op.removes:
        path = layout.abs(rel)
        current = fsio.file_hash(path)
        if current is None:
            continue  # removed before the crash
        if expected is not None and current != expected:
            if strict:
                raise ConflictError(f"{path} changed on disk since it was read; refusing to remove it")
            skipped.append(f"{rel}: changed meanwhile, not removed")
            continue
        removes.append(path)
    # Every path of the step must stay inside the vault, checked before the first change.
    fsio.check_inside(
        layout.root,
        [w.path for w in writes] + [p for pair in moves for p in pair] + [p.parent for p in removes],
    )
    fsio.write_batch_durable(layout.root, writes)
    fsio.move_files(layout.root, moves)
    skipped.extend(_remove(layout, removes, op.rmdirs))
    _carry_vectors(conn, layout, op, model, dim)
    _index(conn, layout, op, model)
    return Applied(op.message, tuple(skipped))


def _remove(layout: Layout, files: list[Path], rmdirs: tuple[str, ...]) -> list[str]:
    """Remove the files (already checked against their hashes), then the directories, deepest first,
    when nothing else is left in them. Returns what could not be removed."""
    skipped: list[str] = []
    for path in files:
        fsio.remove_file(layout.root, path)
    for parent in sorted({p.parent for p in files}):
        if parent.is_dir():
            fsio.fsync_dir(parent)
    for rel in sorted(rmdirs, key=lambda d: d.count("/"), reverse=True):
        path = layout.abs(rel)
        if not path.is_dir():
            continue
        if not fsio.remove_empty_dir(layout.root, path):
            skipped.append(f"{rel}/: not empty (a file appeared meanwhile), left as it is")
    return skipped


def _is_summary(rel: str) -> bool:
    return PurePosixPath(rel).name == SUMMARY_NAME


def _carry_vectors(conn: sqlite3.Connection, layout: Layout, op: TreeOp, model: str, dim: int) -> None:
    """Give moved leaves, new summaries and new leaves their entries in the destination directory's
    sidecar; drop the entries of removed files from the sidecars of directories that stay.

    Entries left behind in the old directory of a move are harmless (keyed by a file name that is gone)
    and are pruned at the end of a compaction pass, so a big ``_fresh/`` sidecar is rewritten once per
    pass."""
    put: dict[str, dict[str, sidecar.Entry]] = defaultdict(dict)
    moved_to = dict(op.moves)
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
        if _is_summary(w.path):
            node = parse_summary(w.data, w.path)[0]
            summary_vec = op.vectors.get(node.id)
            if summary_vec is not None:  # into the folder where the file ends up (it may move)
                put[_after_moves(node.directory, op.moves)][SUMMARY_NAME] = sidecar.Entry.of(
                    text_hash(node.searchable), summary_vec
                )
            continue
        leaf_id = id_from_filename(PurePosixPath(w.path).name)
        leaf_vec = op.vectors.get(leaf_id) if leaf_id else None
        if leaf_vec is not None:
            leaf = parse_leaf(w.data, w.path)[0]
            rel = moved_to.get(w.path, w.path)
            put[str(PurePosixPath(rel).parent)][PurePosixPath(rel).name] = sidecar.Entry.of(
                leaf.content_hash, leaf_vec
            )
    gone: dict[str, set[str]] = defaultdict(set)
    for rel, _expected in op.removes:
        name = PurePosixPath(rel).name
        if name != SIDECAR_NAME and not layout.abs(rel).exists():
            gone[str(PurePosixPath(rel).parent)].add(name)
    changes = {layout.abs(rel_dir): sidecar.Change(put=entries) for rel_dir, entries in put.items()}
    for rel_dir, names in gone.items():
        directory = layout.abs(rel_dir)
        if not directory.is_dir():
            continue  # removed whole
        # A sidecar that cannot be read (another model's) is never rewritten only to prune it.
        old = changes.get(directory)
        changes[directory] = sidecar.Change(
            put=old.put if old else {}, remove=frozenset(names), only_if_readable=old is None
        )
    # All of the step's sidecars synced at once (the step's note, still there, replays this on a crash).
    sidecar.update_many(layout, model, dim, changes)


def _after_moves(rel_dir: str, moves: tuple[tuple[str, str], ...]) -> str:
    for src, dst in moves:
        if rel_dir == src or rel_dir.startswith(src + "/"):
            return dst + rel_dir[len(src) :]
    return rel_dir


def _queue_link_repairs(conn: sqlite3.Connection, layout: Layout, op: TreeOp) -> None:
    """Leaves this step removes may be linked from topics and day digests: queue their rewrites."""
    jobs: list[NewJob] = []
    for rel, _expected in op.removes:
        if layout.abs(rel).exists():
            continue
        row = conn.execute(
            "SELECT id, ts, file_mtime_ns FROM chunks WHERE path = ? AND kind = 'leaf'", (rel,)
        ).fetchone()
        if row is None:
            continue
        stamp = parse_ts(row["ts"]) or datetime.fromtimestamp((row["file_mtime_ns"] or 0) / 1e9, UTC)
        jobs.append(digest_job(stamp.date()))
        jobs.extend(topic_route_job(entity) for entity in followed_entities(conn, [row["id"]]))
    JobQueue(conn).enqueue_many(jobs)


def followed_entities(conn: sqlite3.Connection, leaf_ids: Sequence[str]) -> list[str]:
    """The entities these leaves mention that have a topic tree (whose topic reads the leaves)."""
    marks = ",".join("?" * len(leaf_ids))
    return [
        entity
        for (entity,) in conn.execute(
            f"SELECT DISTINCT m.entity FROM mentions m WHERE m.leaf IN ({marks}) AND EXISTS"
            " (SELECT 1 FROM chunks s WHERE s.kind = 'summary' AND s.path LIKE 'topics/%'"
            " AND json_extract(s.provenance, '$.entity') = m.entity)",
            list(leaf_ids),
        )
    ]


def _index(conn: sqlite3.Connection, layout: Layout, op: TreeOp, model: str) -> None:
    """Bring the rows in line with the files the step produced, in one transaction."""
    with atomic(conn):
        _queue_link_repairs(conn, layout, op)
        for rel, _expected in op.removes:
            if not layout.abs(rel).exists():
                conn.execute("DELETE FROM chunks WHERE path = ?", (rel,))
        for rel in op.rmdirs:
            if not layout.abs(rel).exists():
                conn.execute("DELETE FROM chunks WHERE path >= ? AND path < ?", index.prefix_range(rel + "/"))
        touched_summaries: list[str] = []
        for src, dst in op.moves:
            if id_from_filename(PurePosixPath(dst).name) is None:  # a level directory
                old, new = src + "/", dst + "/"
                conn.execute(
                    "UPDATE chunks SET path = ? || substr(path, ?) WHERE path >= ? AND path < ?",
                    (new, len(old) + 1, *index.prefix_range(old)),
                )
                touched_summaries.append(f"{dst}/{SUMMARY_NAME}")
        moved_from = {src for src, _ in op.moves}
        leaf_paths: list[str] = []
        for w in op.writes:
            if _is_summary(w.path):
                touched_summaries.append(w.path)
            elif w.path not in moved_from:  # a leaf written, then moved: indexed at its destination
                leaf_paths.append(w.path)
        summary_rows = []
        for rel in dict.fromkeys(touched_summaries):
            try:
                node, stamp = read_summary_file(layout, rel, OWN_FILE_MAX_BYTES)
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
        leaf_vectors = []
        reembed = []
        old_hash: dict[str, str] = {}
        leaf_paths += [d for _, d in op.moves if id_from_filename(PurePosixPath(d).name) is not None]
        leaf_ids = [i for i in (id_from_filename(PurePosixPath(p).name) for p in leaf_paths) if i]
        for part, marks in index.in_batches(leaf_ids):
            old_hash.update(
                conn.execute(f"SELECT id, content_hash FROM chunks WHERE id IN ({marks})", part).fetchall()
            )
        for rel in leaf_paths:
            try:
                leaf, stamp = read_leaf_file(layout, rel, OWN_FILE_MAX_BYTES)
            except (FileNotFoundError, FrontmatterError, InvalidInput):
                continue
            parent = conn.execute(
                "SELECT id FROM chunks WHERE path = ?", (f"{PurePosixPath(rel).parent}/{SUMMARY_NAME}",)
            ).fetchone()
            leaf_rows.append(index.leaf_row(leaf, stamp, parent[0] if parent else None))
            if leaf.id in op.vectors:
                leaf_vectors.append(vectors.VectorRow(leaf.id, leaf.content_hash, op.vectors[leaf.id]))
            elif old_hash.get(leaf.id) != leaf.content_hash:
                reembed.append(leaf.id)  # new, edited, or edited by hand while it waited in the buffer
        index.upsert_rows(conn, leaf_rows)
        vectors.upsert(
            conn,
            model,
            [
                vectors.VectorRow(n.id, text_hash(n.searchable), op.vectors[n.id])
                for n, _ in summary_rows
                if n.id in op.vectors
            ]
            + leaf_vectors,
        )
        # A summary whose text changed and came without a vector (a replayed step) is embedded later.
        missing = [
            n.id
            for n, _ in summary_rows
            if n.id not in op.vectors and before.get(n.id) != text_hash(n.searchable)
        ]
        queue = JobQueue(conn)
        queue.enqueue_many(admit_job(i) for i in [*reembed, *missing])
        queue.enqueue_many(resummarise_job(i, d) for i, d in op.stale)
