"""Vectors in chunks.db, and the in-memory matrix search uses.

Owns the ``vectors`` table (a cache of the sidecars) and ``VectorCache``, which holds every vector of
one model as a float32 matrix with the row metadata search filters on, refreshed incrementally: new or
changed vectors are fetched by their ``seq``; a deletion triggers one full reload.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

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
    start = conn.execute("SELECT coalesce(max(seq), 0) FROM vectors").fetchone()[0]
    conn.executemany(
        "INSERT INTO vectors(id, model, content_hash, vec, seq) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT(id) DO UPDATE SET model = excluded.model, content_hash = excluded.content_hash,"
        " vec = excluded.vec, seq = excluded.seq",
        [
            (r.id, model, r.content_hash, np.asarray(r.vector, dtype="<f4").tobytes(), start + i)
            for i, r in enumerate(items, 1)
        ],
    )


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
RESCORE = 20  # candidates re-scored exactly per result asked for


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

    def top(self, query: Matrix, n: int, rows: npt.NDArray[np.intp] | None = None) -> npt.NDArray[np.intp]:
        """Indices of the ``n`` rows most similar to ``query`` (best first), among ``rows`` if given.

        Exact below ``APPROX_ABOVE`` rows; above, the best ``RESCORE * n`` by sign-bit Hamming distance
        are re-scored exactly (tests check the overlap with the exact answer)."""
        total = len(self.ids) if rows is None else len(rows)
        n = min(n, total)
        if n <= 0:
            return np.zeros(0, dtype=np.intp)
        candidates: npt.NDArray[np.intp] | None = rows
        if rows is None and total > APPROX_ABOVE and RESCORE * n < total:
            if self._bits is None or len(self._bits) != total:
                self._bits = sign_bits(self.matrix)
            distance = np.bitwise_count(self._bits ^ sign_bits(query[None, :])[0]).sum(axis=1, dtype=np.int32)
            candidates = np.argpartition(distance, RESCORE * n)[: RESCORE * n]
        sims = self.matrix @ query if candidates is None else self.matrix[candidates] @ query
        best = np.argpartition(-sims, n - 1)[:n]
        best = best[np.argsort(-sims[best], kind="stable")]
        return np.asarray(best if candidates is None else candidates[best], dtype=np.intp)

    def kind_rows(self, kind: str) -> npt.NDArray[np.intp]:
        """Rows of one node kind, without asking the index: summary ids start with ``s``, leaf ids are
        hex (``model.LEAF_ID_RE`` / ``SUMMARY_ID_RE``)."""
        if self._kinds is None or len(self._kinds) != len(self.ids):
            self._kinds = np.fromiter((i[:1] == "s" for i in self.ids), dtype=bool, count=len(self.ids))
        mask = self._kinds if kind == "summary" else ~self._kinds
        return np.flatnonzero(mask).astype(np.intp)

    def refresh(self, conn: sqlite3.Connection) -> None:
        count = conn.execute("SELECT count(*) FROM vectors WHERE model = ?", (self.model,)).fetchone()[0]
        rows = conn.execute(
            "SELECT id, vec, seq FROM vectors WHERE model = ? AND seq > ? ORDER BY seq",
            (self.model, self.seq),
        ).fetchall()
        if not rows and count == len(self.ids):
            return
        new_ids: list[str] = []
        new_vecs: list[bytes] = []
        for row_id, blob, seq in rows:
            self.seq = max(self.seq, seq)
            if row_id in self.pos:
                self.matrix[self.pos[row_id]] = np.frombuffer(blob, dtype="<f4")
                self._bits = None
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

    def _reload(self, conn: sqlite3.Connection) -> None:
        rows = conn.execute(
            "SELECT id, vec, seq FROM vectors WHERE model = ? ORDER BY seq", (self.model,)
        ).fetchall()
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
