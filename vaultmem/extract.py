"""The ``extract`` job: embed leaves (reusing sidecar vectors) and admit them.

Owns the order: vectors first go to each directory's ``_embeddings.json`` (the truth), then to the
``vectors`` cache table, then ``pending_extraction`` leaves become ``admitted``. A vector whose content
hash is already in the sidecar is reused, never recomputed. A corrupt or foreign sidecar is rebuilt from
the texts of every leaf in its directory.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from vaultmem import index, sidecar, vectors
from vaultmem.db import atomic
from vaultmem.embed import Embedder
from vaultmem.layout import Layout
from vaultmem.lifecycle import set_status
from vaultmem.model import Leaf, Status


@dataclass(frozen=True)
class ExtractReport:
    leaves: int
    embedded: int
    reused: int
    admitted: int
    rebuilt_sidecars: tuple[str, ...]
    busy: tuple[str, ...]  # leaves whose file was being edited; retried later


def embed_text(leaf: Leaf) -> str:
    """What the model sees for a leaf: the speaker's name helps "what did X say" questions."""
    return f"{leaf.speaker}: {leaf.text}" if leaf.speaker else leaf.text


def _leaves_in_dir(conn: sqlite3.Connection, rel_dir: str) -> list[Leaf]:
    # substr/instr, not LIKE: "_" in "_fresh" would be a LIKE wildcard and match sibling directories.
    prefix = rel_dir + "/"
    rows = conn.execute(
        "SELECT * FROM chunks WHERE kind = 'leaf' AND substr(path, 1, ?) = ? AND instr(substr(path, ?), '/') = 0",
        (len(prefix), prefix, len(prefix) + 1),
    )
    return [index.row_to_leaf(r) for r in rows]


def extract(
    conn: sqlite3.Connection, layout: Layout, embedder: Embedder, ids: Sequence[str]
) -> ExtractReport:
    leaves = index.leaves_by_ids(conn, ids)
    by_dir: dict[str, dict[str, Leaf]] = defaultdict(dict)
    for leaf in leaves:
        by_dir[str(PurePosixPath(leaf.path).parent)][leaf.id] = leaf
    model, dim = embedder.model_id, embedder.dim
    rebuilt: list[str] = []
    todo: list[tuple[str, Leaf]] = []  # (dir, leaf) needing a new vector
    ready: dict[str, dict[str, sidecar.Entry]] = defaultdict(dict)  # dir -> name -> entry
    for rel_dir, members in by_dir.items():
        current = sidecar.read(layout.abs(rel_dir), model, dim)
        if current.problem is not None:
            rebuilt.append(f"{rel_dir}/_embeddings.json: {current.problem}")
            for leaf in _leaves_in_dir(conn, rel_dir):
                members.setdefault(leaf.id, leaf)
        for leaf in members.values():
            name = PurePosixPath(leaf.path).name
            entry = current.entries.get(name)
            if entry is not None and entry.hash == leaf.content_hash:
                ready[rel_dir][name] = entry
            else:
                todo.append((rel_dir, leaf))
    fresh: dict[str, dict[str, sidecar.Entry]] = defaultdict(dict)
    if todo:
        matrix = embedder.embed([embed_text(leaf) for _, leaf in todo])
        for (rel_dir, leaf), vec in zip(todo, matrix, strict=True):
            fresh[rel_dir][PurePosixPath(leaf.path).name] = sidecar.Entry.of(leaf.content_hash, vec)
    for rel_dir in by_dir:
        if fresh.get(rel_dir) or any(r.startswith(f"{rel_dir}/_embeddings.json") for r in rebuilt):
            put = {**ready[rel_dir], **fresh[rel_dir]}
            sidecar.update(layout.state, layout.abs(rel_dir), model, dim, put)
    rows = []
    for rel_dir, members in by_dir.items():
        entries = {**ready[rel_dir], **fresh[rel_dir]}
        for leaf in members.values():
            entry = entries[PurePosixPath(leaf.path).name]
            rows.append(vectors.VectorRow(leaf.id, entry.hash, entry.vector(dim)))
    with atomic(conn):
        vectors.upsert(conn, model, rows)
    pending = [leaf for leaf in leaves if leaf.status is Status.PENDING]
    busy = set_status(conn, layout, pending, Status.ADMITTED)
    return ExtractReport(
        leaves=len(leaves),
        embedded=len(todo),
        reused=len(rows) - len(todo),
        admitted=len(pending) - len(busy),
        rebuilt_sidecars=tuple(rebuilt),
        busy=tuple(busy),
    )


def vectors_from_sidecars(
    conn: sqlite3.Connection, layout: Layout, model: str, dim: int
) -> tuple[int, list[str]]:
    """Load every matching sidecar vector into the ``vectors`` table (used by reindex).

    Returns (vectors loaded, ids of leaves with no usable vector)."""
    rows_by_dir: dict[str, list[sqlite3.Row]] = defaultdict(list)
    for row in conn.execute("SELECT id, path, content_hash FROM chunks WHERE kind = 'leaf'"):
        rows_by_dir[str(PurePosixPath(row["path"]).parent)].append(row)
    loaded: list[vectors.VectorRow] = []
    missing: list[str] = []
    for rel_dir, rows in rows_by_dir.items():
        current = sidecar.read(Path(layout.abs(rel_dir)), model, dim)
        for row in rows:
            entry = current.entries.get(PurePosixPath(row["path"]).name)
            if entry is not None and entry.hash == row["content_hash"]:
                loaded.append(vectors.VectorRow(row["id"], entry.hash, entry.vector(dim)))
            else:
                missing.append(row["id"])
    conn.execute("DELETE FROM vectors")
    vectors.upsert(conn, model, loaded)
    return len(loaded), missing
