"""Vectors in chunks.db, the matrix file beside it, and the in-memory matrix search uses.

Owns the ``vectors`` table (a cache of the sidecars), the vector matrix file (``.vaultmem/vectors-*.npy``
and its ``.json``: every vector of one model as float32 rows, a cache of the table that a new process
memory-maps instead of reading 100,000 blobs) and ``VectorCache``, which holds every vector of one model
as a float32 matrix with the row metadata search filters on, refreshed incrementally: new or changed
vectors are fetched by their ``seq``; a deletion triggers one full reload.

``seq`` never repeats within one index (``meta.vectors_seq`` remembers the highest ever given, so a
deleted last row cannot lend its number to the next one), and ``meta.vectors_epoch`` names the index a
matrix file was written from: a file of another index (rebuilt, copied) is never read.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from vaultmem import ann
from vaultmem.db import atomic, write_stamp

Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True)
class VectorRow:
    id: str
    content_hash: str
    vector: Matrix


def upsert(conn: sqlite3.Connection, model: str, rows: Iterable[VectorRow]) -> None:
    items = list(rows)
    if not items:
        return
    start = _next_seq(conn, len(items))
    conn.executemany(
        "INSERT INTO vectors(id, model, content_hash, vec, seq) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT(id) DO UPDATE SET model = excluded.model, content_hash = excluded.content_hash,"
        " vec = excluded.vec, seq = excluded.seq",
        [
            (r.id, model, r.content_hash, np.asarray(r.vector, dtype="<f4").tobytes(), start + i)
            for i, r in enumerate(items, 1)
        ],
    )


def _next_seq(conn: sqlite3.Connection, count: int) -> int:
    """Reserve ``count`` new sequence numbers; returns the one before the first."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'vectors_seq'").fetchone()
    top = max(
        int(row[0]) if row else 0, conn.execute("SELECT coalesce(max(seq), 0) FROM vectors").fetchone()[0]
    )
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('vectors_seq', ?)", (str(top + count),))
    return int(top)


def by_ids(conn: sqlite3.Connection, model: str, ids: Iterable[str]) -> dict[str, Matrix]:
    """The stored vectors of ``ids`` for ``model`` (ids without one are left out)."""
    wanted = list(dict.fromkeys(ids))
    out: dict[str, Matrix] = {}
    for start in range(0, len(wanted), 500):
        part = wanted[start : start + 500]
        marks = ",".join("?" * len(part))
        for row in conn.execute(
            f"SELECT id, vec FROM vectors WHERE model = ? AND id IN ({marks})", [model, *part]
        ):
            out[row["id"]] = np.frombuffer(row["vec"], dtype="<f4").astype(np.float32)
    return out


# Above this many vectors, candidates are pre-selected by Hamming distance on sign bits (a 32x smaller
# array than the float32 matrix, so the scan is no longer memory-bound) and re-scored exactly.
APPROX_ABOVE = 50_000
RESCORE = (
    40  # candidates re-scored exactly per result asked for (20 gave recall@10 0.983 on MiniLM, under 0.99)
)
# With an HNSW graph (``ann``): it is asked for this many times the results wanted (divided by the share of
# rows a filter keeps); it is not used for a filter keeping under GRAPH_SHARE of the rows (a source: exact
# or sign bits within it), nor when more than GRAPH_UNKNOWN of the rows were added or changed since it was
# built (the matrix file and its graph are rewritten at ``MATRIX_STALE``, well before).
GRAPH_MARGIN = 1.25
GRAPH_SHARE = 0.5
GRAPH_UNKNOWN = 0.2


def sign_bits(matrix: Matrix) -> npt.NDArray[np.uint64]:
    """Sign bits of each row, packed and padded to whole 64-bit words."""
    packed = np.packbits(matrix > 0, axis=1)
    pad = (-packed.shape[1]) % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


class VectorCache:
    """All vectors of one model in memory, aligned with their ids; cheap to refresh after writes."""

    def __init__(self, model: str, dim: int) -> None:
        self.model = model
        self.dim = dim
        self.ids: list[str] = []
        self.pos: dict[str, int] = {}
        self.matrix: Matrix = np.zeros((0, dim), dtype=np.float32)
        self.seq = 0
        self._bits: npt.NDArray[np.uint64] | None = None  # built lazily for large caches
        self._kinds: npt.NDArray[np.bool_] | None = None  # True for summaries, built lazily
        # The last kind asked of ``kind_rows``: (kind, its rows, their mask), dropped with ``_kinds``.
        self._kind_rows: tuple[str, npt.NDArray[np.intp], npt.NDArray[np.bool_]] | None = None
        self._stamp: tuple[int, int, int] | None = None  # the index's state at the last refresh
        # The HNSW graph over the first ``graph.count`` rows as the matrix file held them (``ann``), and
        # those of its rows whose vector changed since: always scored exactly, as are rows added since.
        # ``key`` names the matrix file the first rows came from (None: read from the index), so a graph
        # built later in the background (``adopt``) is taken only if it was built from those rows.
        self.graph: ann.Graph | None = None
        self.key: dict[str, Any] | None = None
        self._file_rows = 0
        self._moved: set[int] = set()
        self._graph_lock = threading.Lock()

    def top(self, query: Matrix, n: int, rows: npt.NDArray[np.intp] | None = None) -> npt.NDArray[np.intp]:
        """Indices of the ``n`` rows most similar to ``query`` (best first), among ``rows`` if given.

        Exact below ``APPROX_ABOVE`` rows (of ``rows`` when given). Above, candidates are re-scored
        exactly: those the HNSW graph proposes when there is one (``ann``; rows added or changed since it
        was built are always candidates), else the best ``RESCORE * n`` by sign-bit Hamming distance
        (tests check both against the exact answer)."""
        total = len(self.ids) if rows is None else len(rows)
        n = min(n, total)
        if n <= 0:
            return np.zeros(0, dtype=np.intp)
        candidates: npt.NDArray[np.intp] | None = rows
        proposed = self._graph_candidates(query, n, rows) if total > APPROX_ABOVE else None
        if proposed is not None:
            candidates = proposed
        elif total > APPROX_ABOVE and RESCORE * n < total:
            if self._bits is None or len(self._bits) != len(self.ids):
                self._bits = sign_bits(self.matrix)
            bits = self._bits if rows is None else self._bits[rows]
            distance = np.bitwise_count(bits ^ sign_bits(query[None, :])[0]).sum(axis=1, dtype=np.int32)
            candidates = np.argpartition(distance, RESCORE * n)[: RESCORE * n]
            if rows is not None:
                candidates = rows[candidates]
        if candidates is None:
            sims = self.matrix @ query
        elif 2 * len(candidates) >= len(self.ids):
            # Most rows (leaves only, say): scoring all of them beats copying the rows out first.
            sims = (self.matrix @ query)[candidates]
        else:
            sims = self.matrix[candidates] @ query
        best = np.argpartition(-sims, n - 1)[:n]
        best = best[np.argsort(-sims[best], kind="stable")]
        return np.asarray(best if candidates is None else candidates[best], dtype=np.intp)

    def _graph_candidates(
        self, query: Matrix, n: int, rows: npt.NDArray[np.intp] | None
    ) -> npt.NDArray[np.intp] | None:
        """Candidate rows from the graph (with every row it does not know as it is now), or None when
        there is no graph, it is too far behind, or ``rows`` are too few of all for it to find them."""
        graph = self.graph
        if graph is None:
            return None
        unknown = len(self.ids) - graph.count + len(self._moved)
        if unknown > GRAPH_UNKNOWN * len(self.ids):
            return None
        share = 1.0 if rows is None else len(rows) / max(1, len(self.ids))
        if share < GRAPH_SHARE:
            return None
        # Asked for more than n, and more again when only some rows count (leaves of leaves+summaries).
        found = graph.search(query, int(n * GRAPH_MARGIN / share) + 16)
        extra = [np.arange(graph.count, len(self.ids), dtype=np.intp)]
        if self._moved:
            extra.append(np.fromiter(self._moved, dtype=np.intp, count=len(self._moved)))
        candidates = np.unique(np.concatenate([found, *extra]))
        if rows is not None:
            candidates = candidates[self._member(rows)[candidates]]
        return candidates if len(candidates) >= n else None

    def _member(self, rows: npt.NDArray[np.intp]) -> npt.NDArray[np.bool_]:
        """A mask of the cache's rows that are in ``rows``; the mask of a kind's rows (``kind_rows``, the
        common "leaves only" search) is kept with them instead of being built for every search."""
        kept = self._kind_rows
        if kept is not None and rows is kept[1]:
            return kept[2]
        member = np.zeros(len(self.ids), dtype=bool)
        member[rows] = True
        return member

    def kind_rows(self, kind: str) -> npt.NDArray[np.intp]:
        """Rows of one node kind, without asking the index: summary ids start with ``s``, leaf ids are
        hex (``model.LEAF_ID_RE`` / ``SUMMARY_ID_RE``)."""
        if self._kinds is None or len(self._kinds) != len(self.ids):
            self._kinds = np.fromiter((i[:1] == "s" for i in self.ids), dtype=bool, count=len(self.ids))
            self._kind_rows = None
        kept = self._kind_rows
        if kept is None or kept[0] != kind:
            # Kept until the kinds are read again: listing 100,000 rows cost each search ~0.4 ms.
            mask = self._kinds if kind == "summary" else ~self._kinds
            rows = np.flatnonzero(mask).astype(np.intp)
            rows.setflags(write=False)
            kept = self._kind_rows = (kind, rows, mask)
        return kept[1]

    def refresh(self, conn: sqlite3.Connection, files: MatrixFile | None = None) -> None:
        """Bring the cache up to date with the index. The first refresh of an empty cache starts from
        the matrix file when there is a current one (``files``), then reads only newer rows."""
        if files is not None and not self.ids and self.seq == 0:
            found = read_matrix(conn, files, self.model, self.dim)
            if found is not None:
                self.ids, self.matrix, self.seq = found
                self.pos = {row_id: i for i, row_id in enumerate(self.ids)}
                self._bits = None
                self._kinds = None
                self._moved_clear()
                key = self._key(conn)
                with self._graph_lock:
                    self.key, self._file_rows = key, len(self.ids)
                    self.graph = ann.open_graph(files.graph, key)
        # Nothing was written since the last refresh (by this connection: its change counter; by any
        # other: the file's data version) -> nothing to read. Counting 100,000 vectors took 5-70 ms.
        stamp = write_stamp(conn)
        if stamp is not None and stamp == self._stamp:
            return
        count = conn.execute("SELECT count(*) FROM vectors WHERE model = ?", (self.model,)).fetchone()[0]
        rows = conn.execute(
            "SELECT id, vec, seq FROM vectors WHERE model = ? AND seq > ? ORDER BY seq",
            (self.model, self.seq),
        ).fetchall()
        if not rows and count == len(self.ids):
            self._stamp = stamp
            return
        new_ids: list[str] = []
        new_vecs: list[bytes] = []
        for row_id, blob, seq in rows:
            self.seq = max(self.seq, seq)
            if row_id in self.pos:
                self.matrix[self.pos[row_id]] = np.frombuffer(blob, dtype="<f4")
                self._bits = None
                if self.pos[row_id] < self._file_rows:  # tracked with or without a graph (``adopt``)
                    self._moved.add(self.pos[row_id])
            else:
                new_ids.append(row_id)
                new_vecs.append(blob)
        if new_ids:
            block = np.frombuffer(b"".join(new_vecs), dtype="<f4").reshape(len(new_ids), self.dim)
            self.matrix = np.vstack([self.matrix, block]) if len(self.ids) else block.copy()
            for row_id in new_ids:
                self.pos[row_id] = len(self.ids)
                self.ids.append(row_id)
            self._bits = None
        if count != len(self.ids):
            self._reload(conn)
        self._stamp = stamp

    def _moved_clear(self) -> None:
        self._moved = set()

    def adopt(self, graph: ann.Graph, key: dict[str, Any]) -> bool:
        """Take ``graph`` (built in the background from the matrix file named ``key``) when this cache's
        first rows are that file's; one assignment, so a search sees either no graph or the whole one.
        False: the cache holds other rows (a newer file, or the index after a deletion)."""
        with self._graph_lock:
            if self.key != key or graph.count != self._file_rows:
                return False
            self.graph = graph
            return True

    def _key(self, conn: sqlite3.Connection) -> dict[str, Any]:
        """The name of the matrix this cache holds (``ann.matrix_key``), as a graph built from it has."""
        return ann.matrix_key(self.model, self.dim, epoch(conn) or "", self.seq, self.ids)

    def _reload(self, conn: sqlite3.Connection) -> None:
        rows = conn.execute(
            "SELECT id, vec, seq FROM vectors WHERE model = ? ORDER BY seq", (self.model,)
        ).fetchall()
        with self._graph_lock:
            self.graph = None  # rows moved: the graph's keys no longer name them
            self.key, self._file_rows = None, 0
        self._moved_clear()
        self._bits = None
        self._kinds = None
        self.ids = [r[0] for r in rows]
        self.pos = {row_id: i for i, row_id in enumerate(self.ids)}
        self.seq = rows[-1][2] if rows else 0
        if rows:
            self.matrix = (
                np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), self.dim).copy()
            )
        else:
            self.matrix = np.zeros((0, self.dim), dtype=np.float32)


# --- the matrix file ---------------------------------------------------------------------------------

# Below this many vectors, reading them from the index costs a new process a few tens of milliseconds, less
# than writing the file costs each writer: none is kept.
MATRIX_MIN = 20_000
# The file is rewritten when this share of its rows (or more) changed or came since it was written;
# until then a new process maps it and reads only the newer rows from the index.
MATRIX_STALE = 0.05


@dataclass(frozen=True)
class MatrixFile:
    """Where one model's matrix lives: ``<state>/vectors-<key>.npy`` and its ``.json`` header."""

    data: Path
    header: Path

    @classmethod
    def of(cls, state: Path, model: str) -> MatrixFile:
        import hashlib

        key = hashlib.sha256(model.encode("utf-8")).hexdigest()[:16]
        return cls(state / f"vectors-{key}.npy", state / f"vectors-{key}.json")

    @property
    def graph(self) -> ann.GraphFile:
        """The HNSW graph built from this matrix file (``vectors-<key>.hnsw``, ``.hnsw.json``)."""
        return ann.GraphFile.beside(self.data)


def epoch(conn: sqlite3.Connection) -> str | None:
    """The index's ``vectors_epoch`` (None until a matrix file was first written)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'vectors_epoch'").fetchone()
    return str(row[0]) if row else None


def ensure_epoch(conn: sqlite3.Connection) -> str:
    """The index's ``vectors_epoch``, given one first if it has none (it names the index the files derived
    from it were written from: the matrix file, the leaf file)."""
    current = epoch(conn)
    if current is None:
        current = secrets.token_hex(8)
        with atomic(conn):
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('vectors_epoch', ?)", (current,))
    return current


def read_matrix(
    conn: sqlite3.Connection, files: MatrixFile, model: str, dim: int
) -> tuple[list[str], Matrix, int] | None:
    """(ids, memory-mapped rows, seq) of the matrix file, or None when there is none for this index and
    model, or it does not hold what its header says (torn, damaged: the index is read instead)."""
    try:
        header = json.loads(files.header.read_text(encoding="utf-8"))
        current = epoch(conn)
        if current is None or header.get("epoch") != current or header.get("model") != model:
            return None
        if header.get("dim") != dim:
            return None
        ids = header["ids"].split("\n") if header["ids"] else []
        matrix = np.load(files.data, mmap_mode="c")  # copy on write: refreshes may change a row
        if matrix.dtype != np.float32 or matrix.shape != (len(ids), dim):
            return None
        # A plain array over the same mapping (kept open by it): np.memmap's Python-level indexing cost
        # each search ~0.1 ms for its dozen row lookups, for nothing (the file is never flushed).
        return ids, matrix.view(np.ndarray), int(header["seq"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def matrix_behind(conn: sqlite3.Connection, files: MatrixFile, model: str) -> bool:
    """True when the matrix file should be (re)written: none, of another index, or ``MATRIX_STALE`` of
    its rows changed, came or went since. Cheap: two counts and the header."""
    count, top = conn.execute(
        "SELECT count(*), coalesce(max(seq), 0) FROM vectors WHERE model = ?", (model,)
    ).fetchone()
    if count < MATRIX_MIN:
        return False
    try:
        header = json.loads(files.header.read_text(encoding="utf-8"))
        seq, rows = int(header["seq"]), int(header["count"])
    except (OSError, ValueError, KeyError, TypeError):
        return True
    if header.get("epoch") != epoch(conn) or header.get("model") != model:
        return True
    newer = conn.execute("SELECT count(*) FROM vectors WHERE model = ? AND seq > ?", (model, seq)).fetchone()[
        0
    ]
    gone = rows - (count - newer)  # rows of the file no longer in the index (or changed: counted as newer)
    return bool(newer + max(0, gone) >= MATRIX_STALE * max(rows, 1) or top < seq)


def write_matrix(conn: sqlite3.Connection, root: Path, files: MatrixFile, model: str, dim: int) -> int:
    """Write every vector of ``model`` to the matrix file (atomically, the header last); returns the rows.
    Derived like the index: a file that cannot be written is skipped, search reads the index instead."""
    from vaultmem import fsio
    from vaultmem.errors import VaultError

    current = ensure_epoch(conn)
    rows = conn.execute("SELECT id, vec, seq FROM vectors WHERE model = ? ORDER BY seq", (model,)).fetchall()
    ids = [r[0] for r in rows]
    matrix = (
        np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), dim)
        if rows
        else np.zeros((0, dim), dtype=np.float32)
    )
    header = {
        "model": model,
        "dim": dim,
        "epoch": current,
        "seq": rows[-1][2] if rows else 0,
        "count": len(rows),
        "ids": "\n".join(ids),
    }
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.ascontiguousarray(matrix, dtype=np.float32))
    try:
        fsio.atomic_write(files.data, buffer.getvalue(), root=root)
        fsio.atomic_write(files.header, json.dumps(header).encode("utf-8"), root=root)
    except (OSError, VaultError):
        return 0
    return len(rows)


@dataclass(frozen=True)
class GraphJob:
    """Building the HNSW graph of one matrix file: everything it needs read beforehand, so it runs without
    the index's connection (in a background thread, ``Vault.save_vectors``)."""

    root: Path
    files: MatrixFile
    matrix: Matrix
    key: dict[str, Any]

    def run(self) -> int:
        """Build and write the graph (atomically: the graph, then its header). Returns the rows (0: done by
        another process meanwhile, or it could not be written). One process builds at a time (a lock file
        beside it; the others skip)."""
        from filelock import Timeout

        from vaultmem import fsio
        from vaultmem.errors import VaultError

        graph = self.files.graph
        try:
            with fsio.file_lock(self.root, graph.data.with_suffix(".hnsw.lock"), timeout=0):
                if not ann.graph_behind(graph, self.key):
                    return 0
                data = ann.build(self.matrix)
                fsio.atomic_write(graph.data, data, root=self.root)
                fsio.atomic_write(graph.header, ann.header_bytes(self.key), root=self.root)
        except (OSError, VaultError, Timeout):
            return 0
        return int(self.key["count"])


def graph_imports() -> None:
    """Import what ``GraphJob.run`` uses, on the calling thread: the builder thread then never takes an
    import lock (``forking.fork_safe``: a reader forked beside it could wait on one forever)."""
    import filelock  # noqa: F401

    ann.available()


def graph_job(
    conn: sqlite3.Connection, root: Path, files: MatrixFile, model: str, dim: int
) -> GraphJob | None:
    """The build of the current matrix file's HNSW graph when it has ``ann.GRAPH_MIN`` rows or more and
    none of its own; else None.

    The build runs outside the write lock (at 100,000 rows it takes a minute or two): the header names the
    matrix it was built from, so a graph built while the matrix was rewritten is simply never opened."""
    found = read_matrix(conn, files, model, dim)
    if found is None:
        return None
    ids, matrix, seq = found
    key = ann.matrix_key(model, dim, epoch(conn) or "", seq, ids)
    if not ann.graph_behind(files.graph, key):
        return None
    return GraphJob(root, files, matrix, key)


def write_graph(conn: sqlite3.Connection, root: Path, files: MatrixFile, model: str, dim: int) -> int:
    """Build the current matrix file's graph now (``graph_job``); returns the rows (0: nothing done)."""
    job = graph_job(conn, root, files, model, dim)
    return job.run() if job is not None else 0
