"""Versions in retrieval (issue #20): a superseded leaf ranked right after the leaf that replaces it.

Owns how search and context treat validity: which leaves replace which (from either side of the link),
which successors count at a moment (``Filters``: valid then, held then), and the arranged ranking with
``supersedes`` / ``superseded_by`` in each hit's provenance. Reads the index; never writes.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from vaultmem import index
from vaultmem.search import Filters, Hit
from vaultmem.validity import SUPERSEDED_BY, SUPERSEDES
from vaultmem.vectors import Matrix, VectorCache

if TYPE_CHECKING:  # imported where judged: a process that only searches never loads the detector
    from vaultmem import detect

NEIGHBOURS = 8  # earlier leaves judged against each new one (the closest of up to ``read_for(8)``)
MAX_CHAIN = 16  # a chain of versions longer than this is followed no further (a cycle typed by hand)


def windowed(conn: sqlite3.Connection) -> bool:
    """Whether any leaf has a validity window (answered by a partial index: no scan)."""
    try:
        row = conn.execute(
            "SELECT 1 FROM chunks WHERE valid_from IS NOT NULL OR valid_to IS NOT NULL LIMIT 1"
        ).fetchone()
    except sqlite3.OperationalError:  # an index made before validity had columns (read-only vault)
        return False
    return row is not None


def successors(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, list[str]]:
    """Each of ``ids`` -> the leaves that say they replace it, from either side of the link (the old
    leaf's ``superseded_by`` or the new one's ``supersedes``: a person may write only one of them)."""
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    out: dict[str, list[str]] = {}
    try:
        rows = conn.execute(
            "SELECT c.id AS new, j.value AS old FROM chunks c, json_each(c.supersedes) j"
            f" WHERE c.supersedes <> '[]' AND j.value IN ({marks})"
            " UNION SELECT j.value AS new, c.id AS old FROM chunks c, json_each(c.superseded_by) j"
            f" WHERE c.id IN ({marks}) AND c.superseded_by <> '[]'",
            [*ids, *ids],
        ).fetchall()
    except sqlite3.OperationalError:
        return {}
    for row in rows:
        if row["new"] != row["old"] and row["new"] not in out.setdefault(row["old"], []):
            out[row["old"]].append(row["new"])
    return out


def current(conn: sqlite3.Connection, ids: Iterable[str], filters: Filters) -> set[str]:
    """Which of ``ids`` are indexed leaves that ``filters`` keep (valid at its moment, held then)."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return set()
    where, params = filters.sql()
    extra = f" AND {where}" if where else ""
    marks = ",".join("?" * len(wanted))
    return {
        r[0]
        for r in conn.execute(
            f"SELECT c.id FROM chunks c WHERE c.kind = 'leaf' AND c.id IN ({marks}){extra}",
            [*wanted, *params],
        )
    }


def arrange(
    conn: sqlite3.Connection,
    hits: Sequence[Hit],
    filters: Filters,
    fetch: Callable[[list[str]], list[Hit]],
    *,
    include_superseded: bool = False,
) -> list[Hit]:
    """``hits`` with validity in their provenance; unless ``include_superseded``, a superseded leaf right
    after its current successor (fetched with ``fetch`` when the search did not find it, and ranked
    where the old one was), so the old value never outranks the new one. A successor counts when
    ``filters`` keep it (``as_of``: it existed then and was valid)."""
    if not hits:
        return []
    leaf_ids = [h.id for h in hits if h.kind == "leaf"]
    links: dict[str, list[str]] = {}
    frontier = leaf_ids
    for _ in range(MAX_CHAIN):  # follow chains of versions: A -> B -> C
        found = successors(conn, [i for i in frontier if i not in links])
        if not found:
            break
        links.update(found)
        frontier = [n for news in found.values() for n in news]
    live = current(conn, [n for news in links.values() for n in news], filters)
    links = {old: [n for n in news if n in live] for old, news in links.items()}
    links = {old: news for old, news in links.items() if news}
    by_id = {h.id: h for h in hits}
    missing = [n for news in links.values() for n in news if n not in by_id]
    if missing and not include_superseded:
        by_id.update({h.id: h for h in fetch(list(dict.fromkeys(missing)))})
    replaced = _predecessors(conn, [i for i, h in by_id.items() if h.kind == "leaf"])
    marked = {i: _marked(h, links.get(i, ()), replaced.get(i, ())) for i, h in by_id.items()}
    if include_superseded:
        return [marked[h.id] for h in hits]
    out: list[Hit] = []
    emitted: set[str] = set()

    def emit(node_id: str, score: float, depth: int) -> None:
        if node_id in emitted or node_id not in marked or depth > MAX_CHAIN:
            return
        emitted.add(node_id)  # before its successors: a cycle typed by hand ends here
        hit = marked[node_id]
        for new in links.get(node_id, ()):
            emit(new, max(score, hit.score), depth + 1)
        top = out[-1].score if out else score
        own = max(hit.score, score) if depth else hit.score
        if any(new in emitted for new in links.get(node_id, ())):
            top = math.nextafter(top, -math.inf)  # strictly below the version that replaced it
        out.append(replace(hit, score=min(own, top)))

    for hit in hits:
        emit(hit.id, hit.score, 0)
    return out


def _predecessors(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    try:
        rows = conn.execute(
            f"SELECT id, supersedes FROM chunks WHERE id IN ({marks}) AND supersedes <> '[]'", list(ids)
        ).fetchall()
    except sqlite3.OperationalError:
        return {}
    return {r["id"]: tuple(json.loads(r["supersedes"])) for r in rows}


def _marked(hit: Hit, successors_: Sequence[str], replaces: Sequence[str]) -> Hit:
    extra = dict(hit.extra)
    if successors_:
        extra[SUPERSEDED_BY] = ", ".join(successors_)
    if replaces:
        extra[SUPERSEDES] = ", ".join(replaces)
    return hit if extra == hit.extra else replace(hit, extra=extra)


def is_superseded(hit: Hit) -> bool:
    return SUPERSEDED_BY in hit.extra


def marker(hit: Hit) -> str:
    """What a context line says of a version: ``[superseded]`` on an old value, ``[current]`` on the
    value that replaced one."""
    if SUPERSEDED_BY in hit.extra:
        return "[superseded] "
    if SUPERSEDES in hit.extra:
        return "[current] "
    return ""


def scoped(
    conn: sqlite3.Connection,
    filters: Filters,
    *,
    as_of: datetime | None = None,
    now: datetime | None = None,
    include_superseded: bool = False,
) -> Filters:
    """``filters`` for a query at a moment: ``as_of`` keeps only what the vault held then; unless
    ``include_superseded``, leaves outside their validity window at ``as_of`` (else ``now``, else the
    current time) are left out (checked only when some leaf has a window: most vaults pay nothing)."""
    valid_at = None
    if not include_superseded and windowed(conn):
        valid_at = as_of or now or datetime.now(UTC)
    return replace(filters, valid_at=valid_at, as_of=as_of)


def read_for(k: int = NEIGHBOURS) -> int:
    """How many of a leaf's closest leaves are read to find its ``k`` earlier neighbours (later ones and
    linked ones are left out): what ``Neighbours`` is made with for a scan."""
    return 4 * k + 1


def nearest_leaves(cache: VectorCache, pos: int, n: int) -> npt.NDArray[np.intp]:
    """The ``n`` leaf rows of ``cache`` closest to row ``pos`` (itself among them), best first: one
    matrix-vector product over every leaf. The reference ``Neighbours`` answers as."""
    leaves = cache.kind_rows("leaf")
    sims = cache.matrix[leaves] @ cache.matrix[pos]
    return np.asarray(leaves[np.argsort(-sims)][:n], dtype=np.intp)


class Neighbours:
    """``nearest_leaves`` for many rows known in advance (a scan's new leaves), answered in blocks.

    Each block of ``BLOCK`` upcoming rows is scored against every leaf by one matrix product and its
    ``n + 1`` best found by ``argpartition``, instead of a matrix-vector product and a full sort per row
    (at 100k leaves ~10 ms a row, so O(N²) over a first run). A matrix product adds in another order
    than a matrix-vector product, so a score may differ from the reference in its last bits: each is
    within ``gamma_d`` (``d * 2**-24`` over one minus that) times the two vectors' norms of the exact dot
    product, in any order, so the two differ by at most twice that. When the ``n``-th and ``n + 1``-th
    scores are more than four times that apart, both computations choose the same ``n`` rows (listed
    best first); when they are closer (a near-tie, or a tie at the cut: two leaves of the same text) the
    row is answered by the reference's own product (``_reference``), so the rows chosen are always the
    reference's, ties broken as it breaks them. A cache changed since a block was scored (a refresh) is
    scored again."""

    BLOCK = 64

    def __init__(self, cache: VectorCache, upcoming: Sequence[str], n: int) -> None:
        self.cache = cache
        self.n = n
        self.upcoming = list(upcoming)
        self._at = {row_id: i for i, row_id in enumerate(self.upcoming)}
        self._found: dict[str, npt.NDArray[np.intp] | None] = {}
        # The matrix the blocks were scored on (its id, rows and last sequence number read).
        self._scored: tuple[int, int, int] | None = None
        self._longest: float | None = None  # the longest vector's norm (of that matrix)
        self._rows: Matrix | None = None  # the leaves' rows, as the reference multiplies them
        self.exact = 0  # rows answered by the reference (near-ties at the cut): for tests and benches

    def __call__(self, leaf_id: str) -> npt.NDArray[np.intp] | None:
        """The ``n`` leaf rows closest to ``leaf_id`` (None: it has no vector)."""
        cache = self.cache
        pos = cache.pos.get(leaf_id)
        if pos is None:
            return None
        state = (id(cache.matrix), len(cache.ids), cache.seq)
        if state != self._scored:
            self._found, self._scored, self._longest, self._rows = {}, state, None, None
        if leaf_id not in self._found:
            start = self._at.get(leaf_id)
            block = [leaf_id] if start is None else self.upcoming[start : start + self.BLOCK]
            self._found.update(self._score([b for b in block if b in cache.pos]))
        found = self._found.pop(leaf_id)  # handed out once: a scan of 100k leaves keeps one block
        return self._reference(pos) if found is None else found

    def _reference(self, pos: int) -> npt.NDArray[np.intp]:
        """The reference's scores (its own matrix-vector product, on the leaves' rows copied once, not
        per row); its full sort only when two scores tie exactly at the cut (its order then decides)."""
        self.exact += 1
        cache, n = self.cache, self.n
        leaves = cache.kind_rows("leaf")
        if self._rows is None:
            self._rows = cache.matrix if len(leaves) == len(cache.ids) else cache.matrix[leaves]
        sims = self._rows @ cache.matrix[pos]
        if len(leaves) > n:
            best = np.argpartition(-sims, n)[: n + 1]
            best = best[np.argsort(-sims[best], kind="stable")]
            if sims[best[n - 1]] != sims[best[n]]:
                return np.asarray(leaves[best[:n]], dtype=np.intp)
        return np.asarray(leaves[np.argsort(-sims)][:n], dtype=np.intp)

    def _score(self, block: list[str]) -> dict[str, npt.NDArray[np.intp] | None]:
        """Each row of ``block`` with its ``n`` nearest leaves, or None where the cut is too close to
        call (the reference answers those)."""
        cache, n = self.cache, self.n
        leaves = cache.kind_rows("leaf")
        if len(leaves) <= n:  # every leaf is chosen: the reference's cheap case
            return dict.fromkeys(block)
        positions = np.fromiter((cache.pos[b] for b in block), dtype=np.intp, count=len(block))
        queries = cache.matrix[positions]
        sims = queries @ cache.matrix.T
        if len(leaves) != len(cache.ids):
            sims = sims[:, leaves]
        best = np.argpartition(-sims, n, axis=1)[:, : n + 1]
        if self._longest is None:
            self._longest = float(np.sqrt(np.max(np.einsum("ij,ij->i", cache.matrix, cache.matrix))))
        # gamma_d = d u / (1 - d u) bounds the rounding of a float32 dot product of d terms, in any
        # order, relative to the product of the norms; each score is that close to the exact one, so
        # this and the reference may differ by 2 gamma_d, and a gap of 4 gamma_d at the cut is safe.
        du = 2.0**-24 * cache.dim
        gamma = du / (1.0 - du) * self._longest * 1.01
        out: dict[str, npt.NDArray[np.intp] | None] = {}
        for i, row_id in enumerate(block):
            top = best[i][np.argsort(-sims[i, best[i]], kind="stable")]
            scores = sims[i, top]
            bound = 4.0 * gamma * float(np.linalg.norm(queries[i]))
            if not float(scores[n - 1]) - float(scores[n]) > bound:
                out[row_id] = None
            else:
                out[row_id] = np.asarray(leaves[top[:n]], dtype=np.intp)
        return out


def earlier_neighbours(
    conn: sqlite3.Connection,
    cache: VectorCache,
    leaf_id: str,
    k: int = NEIGHBOURS,
    nearest: Neighbours | None = None,
) -> list[tuple[sqlite3.Row, float]]:
    """The ``k`` leaves said before ``leaf_id`` that are closest to it in meaning, with their cosine:
    the candidates it may update (``detect.judge`` decides). Leaves already linked to it are left out.
    ``nearest`` (made with ``n = read_for(k)`` for the leaves of a scan) finds the closest leaves of many
    rows in blocks; the same rows as without it."""
    pos = cache.pos.get(leaf_id)
    me = conn.execute("SELECT rowid, ts, supersedes FROM chunks WHERE id = ?", (leaf_id,)).fetchone()
    if pos is None or me is None:
        return []
    if nearest is not None and nearest.cache is cache and nearest.n == read_for(k):
        order = nearest(leaf_id)
        if order is None:
            return []
    else:
        order = nearest_leaves(cache, pos, read_for(k))
    by_id = {
        cache.ids[i]: float(cache.matrix[i] @ cache.matrix[pos]) for i in order if cache.ids[i] != leaf_id
    }
    linked = set(json.loads(me["supersedes"] or "[]"))
    marks = ",".join("?" * len(by_id))
    rows = conn.execute(
        "SELECT rowid, id, text, speaker, role, ts, entities, path, provenance FROM chunks"
        f" WHERE kind = 'leaf' AND id IN ({marks})",
        list(by_id),
    ).fetchall()
    earlier = [
        r
        for r in rows
        if r["id"] not in linked and stated(r) and _before(r, me) and index.has_file(r["path"])
    ]
    earlier.sort(key=lambda r: -by_id[r["id"]])
    return [(r, by_id[r["id"]]) for r in earlier[:k]]


def _before(row: sqlite3.Row, me: sqlite3.Row) -> bool:
    """Whether ``row`` was said before ``me``: by their times, or when one has none (an undated note)
    by the order they were indexed, so that of two leaves only one may update the other."""
    if row["ts"] is not None and me["ts"] is not None:
        return bool(row["ts"] < me["ts"])
    return bool(row["rowid"] < me["rowid"])


def stated(row: sqlite3.Row) -> bool:
    """Whether a leaf states a fact someone holds: a person's turn, or what an agent chose to remember
    (``via`` in its provenance). An assistant's reply in a chat (explanations, lists, suggestions) is not
    one: measured on LongMemEval, it only brought false proposals (bench/updates.py)."""
    if (row["role"] or "user") not in ("assistant", "tool", "system"):
        return True
    try:
        return '"via"' in (row["provenance"] or "")
    except IndexError:
        return True


def candidates(
    conn: sqlite3.Connection, cache: VectorCache, row: sqlite3.Row, nearest: Neighbours | None = None
) -> list[tuple[sqlite3.Row, float, dict[str, Any]]]:
    """The earlier leaves the leaf ``row`` (id, text, speaker, role, entities, path, provenance) may update,
    before any judgement: each with its cosine and the keyword arguments ``detect.judge`` takes. A
    section of a note written by hand neither updates nor is updated: its note is edited in place (and a
    version link would have to write into it). ``nearest``: see ``earlier_neighbours``."""
    if not stated(row) or not index.has_file(row["path"]):
        return []
    from vaultmem import detect

    out = []
    for old, cosine in earlier_neighbours(conn, cache, row["id"], nearest=nearest):
        old_entities, new_entities = json.loads(old["entities"]), json.loads(row["entities"])
        facts = {
            "same_speaker": (old["speaker"] or old["role"]) == (row["speaker"] or row["role"]),
            "shared_entities": len(set(old_entities) & set(new_entities)),
            "other_people": detect.other_people(old_entities, new_entities),
        }
        out.append((old, cosine, facts))
    return out


def judged(
    conn: sqlite3.Connection, cache: VectorCache, row: sqlite3.Row, nearest: Neighbours | None = None
) -> list[tuple[sqlite3.Row, detect.Judgement]]:
    """The earlier leaves the leaf ``row`` may update, each with the detector's judgement (those it
    rules out are left out). ``nearest``: see ``earlier_neighbours``."""
    from vaultmem import detect

    out = []
    for old, cosine, facts in candidates(conn, cache, row, nearest):
        verdict = detect.judge(old["text"], row["text"], cosine, **facts)
        if verdict is not None:
            out.append((old, verdict))
    return out
