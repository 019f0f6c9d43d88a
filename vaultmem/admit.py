"""The ``admit`` job: embed leaves and summaries (reusing sidecar vectors) and admit leaves.

Owns the order: vectors first go to each directory's ``_embeddings.json`` (the truth), then to the
``vectors`` cache table, then ``pending_extraction`` leaves become ``admitted``. A vector whose content
hash is already in the sidecar is reused, never recomputed. A corrupt or foreign sidecar is rebuilt from
the texts of every leaf in its directory.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from vaultmem import entities, index, sidecar, vectors
from vaultmem.db import atomic
from vaultmem.embed import Embedder
from vaultmem.errors import FrontmatterError, InvalidInput
from vaultmem.layout import SIDECAR_NAME, Layout
from vaultmem.model import Leaf, Status
from vaultmem.scan import read_leaf_file
from vaultmem.status import set_status


@dataclass(frozen=True)
class AdmitReport:
    leaves: int
    embedded: int
    reused: int
    admitted: int
    rebuilt_sidecars: tuple[str, ...]
    busy: tuple[str, ...]  # leaves whose file was being edited; retried later


def embed_text(leaf: Leaf) -> str:
    """What the model sees for a leaf: the speaker's name helps "what did X say" questions."""
    return f"{leaf.speaker}: {leaf.text}" if leaf.speaker else leaf.text


@dataclass(frozen=True)
class _Node:
    """What embedding needs of a leaf or a summary."""

    id: str
    path: str
    content_hash: str
    text: str  # what the model sees


def _node(row: sqlite3.Row) -> _Node:
    text = f"{row['speaker']}: {row['text']}" if row["kind"] == "leaf" and row["speaker"] else row["text"]
    return _Node(row["id"], row["path"], row["content_hash"], text)


def _nodes_in_dir(conn: sqlite3.Connection, rel_dir: str) -> list[_Node]:
    # A range on the path index, not LIKE: "_" in "_fresh" would be a LIKE wildcard matching siblings.
    prefix = rel_dir + "/"
    rows = conn.execute(
        "SELECT * FROM chunks WHERE path >= ? AND path < ? AND instr(substr(path, ?), '/') = 0",
        (*index.prefix_range(prefix), len(prefix) + 1),
    )
    return [_node(r) for r in rows]


def _nodes_by_ids(conn: sqlite3.Connection, ids: Sequence[str]) -> list[_Node]:
    found: list[_Node] = []
    for part, marks in index.in_batches(ids):
        found.extend(_node(r) for r in conn.execute(f"SELECT * FROM chunks WHERE id IN ({marks})", part))
    return found


EntityFinder = Callable[[Leaf], tuple[str, ...]]


def find_entities(leaf: Leaf) -> tuple[str, ...]:
    """The rule-based entity keys of a leaf (the default; an LLM extractor may add to them)."""

    return tuple(m.key for m in entities.extract(leaf.text, speaker=leaf.speaker, ts=leaf.ts))


def rules_behind(conn: sqlite3.Connection) -> bool:
    """The admitted leaves were read by older entity rules than ``entities.RULES_VERSION`` (the version
    the index's ``meta`` records), so every one of them is to be read anew."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'entity_rules'").fetchone()
    return row is None or int(row[0]) < entities.RULES_VERSION


def mark_rules_read(conn: sqlite3.Connection) -> None:
    """Record that every leaf was read by the current entity rules (a new vault; a whole rescan)."""
    with atomic(conn):
        conn.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('entity_rules', ?)",
            (str(entities.RULES_VERSION),),
        )


def rescan_ids(conn: sqlite3.Connection, *, every: bool) -> list[str]:
    """The admitted and sealed leaves to read again for entities, in path order: those that list none,
    or (``every``) all of them."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT id FROM chunks WHERE kind = 'leaf' AND status IN ('admitted', 'sealed')"
            + ("" if every else " AND entities = '[]'")
            + " ORDER BY path"
        )
    ]


def rescan_entities(
    conn: sqlite3.Connection, layout: Layout, ids: Sequence[str], finder: EntityFinder
) -> tuple[int, int]:
    """Write what ``finder`` finds now into these leaves' ``entities`` (replacing their lists) where it
    differs. The caller holds the write lock. Returns (changed, busy): busy leaves changed on disk since
    they were indexed and were left as they are."""
    leaves = index.leaves_by_ids(conn, ids)
    # A sealed leaf's file says "admitted" (sealed is where it lives): keep that line.
    as_filed = [replace(x, status=Status.ADMITTED) for x in leaves]
    keys = {x.id: tuple(finder(x)) for x in as_filed}
    todo = [x for x in as_filed if keys[x.id] != x.entities]
    skipped = set_status(conn, layout, todo, Status.ADMITTED, keys, replace_entities=True)
    return len(todo) - len(skipped), len(skipped)


def admit(
    conn: sqlite3.Connection,
    layout: Layout,
    embedder: Embedder,
    ids: Sequence[str],
    finder: EntityFinder | None = find_entities,
) -> AdmitReport:
    """Embed the leaves and summaries ``ids`` (reusing sidecar vectors) and admit pending leaves,
    writing the entities ``finder`` finds in each into its frontmatter as it is admitted."""
    nodes = _nodes_by_ids(conn, ids)
    by_dir: dict[str, dict[str, _Node]] = defaultdict(dict)
    # A section of a note written by hand has no file and no sidecar: nothing of the engine's goes into
    # the person's folders. Its vector lives in the index only (``reindex`` embeds it again).
    in_place = [node for node in nodes if not index.has_file(node.path)]
    for node in nodes:
        if index.has_file(node.path):
            by_dir[str(PurePosixPath(node.path).parent)][node.id] = node
    model, dim = embedder.model_id, embedder.dim
    rebuilt: list[str] = []
    todo: list[tuple[str, _Node]] = []  # (dir, node) needing a new vector
    ready: dict[str, dict[str, sidecar.Entry]] = defaultdict(dict)  # dir -> name -> entry
    for rel_dir, members in by_dir.items():
        current = sidecar.read(layout.abs(rel_dir), model, dim)
        if current.problem is not None:
            rebuilt.append(f"{rel_dir}/_embeddings.json: {current.problem}")
            for node in _nodes_in_dir(conn, rel_dir):
                members.setdefault(node.id, node)
        for node in members.values():
            name = PurePosixPath(node.path).name
            entry = current.entries.get(name)
            if entry is not None and entry.hash == node.content_hash:
                ready[rel_dir][name] = entry
            else:
                todo.append((rel_dir, node))
    rows: list[vectors.VectorRow] = []
    if in_place:
        held = {
            r[0]: r[1]
            for part, marks in index.in_batches([n.id for n in in_place])
            for r in conn.execute(
                f"SELECT id, content_hash FROM vectors WHERE model = ? AND id IN ({marks})", [model, *part]
            )
        }
        todo += [("", node) for node in in_place if held.get(node.id) != node.content_hash]
    fresh: dict[str, dict[str, sidecar.Entry]] = defaultdict(dict)
    if todo:
        matrix = embedder.embed([node.text for _, node in todo])
        for (rel_dir, node), vec in zip(todo, matrix, strict=True):
            if not rel_dir:
                rows.append(vectors.VectorRow(node.id, node.content_hash, vec))
                continue
            fresh[rel_dir][PurePosixPath(node.path).name] = sidecar.Entry.of(node.content_hash, vec)
    for rel_dir in by_dir:
        if fresh.get(rel_dir) or any(r.startswith(f"{rel_dir}/_embeddings.json") for r in rebuilt):
            put = {**ready[rel_dir], **fresh[rel_dir]}
            sidecar.update(layout, layout.abs(rel_dir), model, dim, put)
    for rel_dir, members in by_dir.items():
        entries = {**ready[rel_dir], **fresh[rel_dir]}
        for node in members.values():
            entry = entries[PurePosixPath(node.path).name]
            rows.append(vectors.VectorRow(node.id, entry.hash, entry.vector(dim)))
    with atomic(conn):
        vectors.upsert(conn, model, rows)
    leaves = index.leaves_by_ids(conn, [n.id for n in nodes])
    pending = [leaf for leaf in leaves if leaf.status is Status.PENDING]
    found = {leaf.id: finder(leaf) for leaf in pending} if finder is not None else None
    busy = set_status(conn, layout, pending, Status.ADMITTED, found)
    return AdmitReport(
        leaves=len(nodes),
        embedded=len(todo),
        reused=len(rows) - len(todo),
        admitted=len(pending) - len(busy),
        rebuilt_sidecars=tuple(rebuilt),
        busy=tuple(busy),
    )


@dataclass(frozen=True)
class Reread:
    """What ``reread_pending`` found in the files of leaves that changed while they waited."""

    ids: tuple[str, ...] = ()  # rows brought in line with their edited file: admit them now
    broken: dict[str, str] = field(default_factory=dict)  # id -> why the file is no leaf any more
    waiting: tuple[str, ...] = ()  # gone for now (an editor's save in progress), or inside a level


def reread_pending(conn: sqlite3.Connection, layout: Layout, ids: Sequence[str], max_bytes: int) -> Reread:
    """Re-read pending ``_fresh`` leaves whose file was edited since it was indexed (what the watcher
    would do), so their admission can go on with the edited text instead of waiting for a catch-up.

    A leaf inside a level is left to the catch-up (its ancestors go stale with it); a file that is gone
    may be an editor's save in progress."""
    refreshed: list[tuple[object, ...]] = []
    broken: dict[str, str] = {}
    waiting: list[str] = []
    rows: dict[str, sqlite3.Row] = {}
    for part, marks in index.in_batches(list(ids)):
        rows.update(
            (r["id"], r)
            for r in conn.execute(f"SELECT id, path, parent FROM chunks WHERE id IN ({marks})", part)
        )
    for leaf_id in ids:
        row = rows.get(leaf_id)
        if row is None:
            continue
        if row["parent"] is not None:
            waiting.append(leaf_id)
            continue
        try:
            leaf, stamp = read_leaf_file(layout, row["path"], max_bytes)
        except FileNotFoundError:
            waiting.append(leaf_id)
            continue
        except (FrontmatterError, InvalidInput) as exc:
            broken[leaf_id] = str(exc)
            continue
        if leaf.id != leaf_id:
            broken[leaf_id] = f"{row['path']} now holds leaf {leaf.id}"
            continue
        refreshed.append(index.leaf_row(leaf, stamp, None))
    with atomic(conn):
        index.upsert_rows(conn, refreshed)
    return Reread(tuple(str(r[0]) for r in refreshed), broken, tuple(waiting))


def reload_vectors(
    conn: sqlite3.Connection, layout: Layout, rels: Sequence[str], model: str, dim: int
) -> int:
    """Load into the ``vectors`` table the sidecar vectors of the nodes in the folders of ``rels`` whose
    entry matches their row (files put back as they were, e.g. by ``Vault.restore``)."""
    loaded: list[vectors.VectorRow] = []
    for rel_dir in sorted({str(PurePosixPath(r).parent) for r in rels}):
        current = sidecar.read(Path(layout.abs(rel_dir)), model, dim)
        lo, hi = index.prefix_range(rel_dir + "/")
        for row in conn.execute(
            "SELECT id, path, content_hash FROM chunks WHERE path >= ? AND path < ?", (lo, hi)
        ):
            if str(PurePosixPath(row["path"]).parent) != rel_dir:
                continue
            entry = current.entries.get(PurePosixPath(row["path"]).name)
            if entry is not None and entry.hash == row["content_hash"]:
                loaded.append(vectors.VectorRow(row["id"], entry.hash, entry.vector(dim)))
    with atomic(conn):
        vectors.upsert(conn, model, loaded)
    return len(loaded)


def _parent(rel: str) -> str:
    """``str(PurePosixPath(rel).parent)`` for the normalised paths of rows, without a path object per
    row (a reindex asks it of every row)."""
    parts = rel.split("/")
    if "" in parts or "." in parts:
        return str(PurePosixPath(rel).parent)
    return rel.rpartition("/")[0] or "."


# A sidecar read ahead: the file's (inode, size, mtime_ns) when it was read (None: there was none).
ReadAhead = dict[str, tuple[tuple[int, int, int] | None, sidecar.Sidecar]]


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def read_sidecars(layout: Layout, rel_dirs: Sequence[str], model: str, dim: int) -> ReadAhead:
    """The sidecars of ``rel_dirs``, each with its file's stamp (before it was read, so a file replaced
    meanwhile is never taken as current): what ``vectors_from_sidecars`` takes as read ahead. A reindex
    reads them in a forked process while it inserts the rows (``forking.Ahead``)."""
    out: ReadAhead = {}
    for rel_dir in rel_dirs:
        directory = Path(layout.abs(rel_dir))
        stamp = _stamp(directory / SIDECAR_NAME)
        out[rel_dir] = (stamp, sidecar.read(directory, model, dim))
    return out


def leaf_dirs(paths: Iterable[str]) -> list[str]:
    """The directories (as ``vectors_from_sidecars`` groups rows) of the rows with these paths."""
    return list(dict.fromkeys(_parent(p) for p in paths))


def vectors_from_sidecars(
    conn: sqlite3.Connection, layout: Layout, model: str, dim: int, ahead: ReadAhead | None = None
) -> tuple[int, list[str]]:
    """Load every matching sidecar vector into the ``vectors`` table (used by reindex). ``ahead``:
    sidecars already read (``read_sidecars``); one whose file changed since (its stamp) is read again.

    Returns (vectors loaded, ids of leaves with no usable vector)."""
    rows_by_dir: dict[str, list[sqlite3.Row]] = defaultdict(list)
    for row in conn.execute("SELECT id, path, content_hash FROM chunks"):
        rows_by_dir[_parent(row["path"])].append(row)
    loaded: list[vectors.VectorRow] = []
    missing: list[str] = []
    for rel_dir, rows in rows_by_dir.items():
        directory = Path(layout.abs(rel_dir))
        got = ahead.get(rel_dir) if ahead is not None else None
        if got is not None and got[0] == _stamp(directory / SIDECAR_NAME):
            current = got[1]
        else:
            current = sidecar.read(directory, model, dim)
        found: list[tuple[str, str]] = []  # (id, hash) of the rows whose vector the sidecar holds
        raws: list[str] = []
        for row in rows:
            entry = current.entries.get(row["path"].rpartition("/")[2])
            if entry is not None and entry.hash == row["content_hash"]:
                found.append((row["id"], entry.hash))
                raws.append(entry.raw)
            else:
                missing.append(row["id"])
        decoded = sidecar.decode_vectors(raws, dim)  # a directory's vectors in one call
        loaded.extend(vectors.VectorRow(i, h, v) for (i, h), v in zip(found, decoded, strict=True))
    conn.execute("DELETE FROM vectors")
    vectors.upsert(conn, model, loaded)
    return len(loaded), missing
