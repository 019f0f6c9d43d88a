"""Tree-aware candidates for context assembly: leaves and summaries ranked together.

Owns how the tree changes what a query retrieves. Three modes, measured against each other on LoCoMo
and LongMemEval (bench/retrieval.py --modes) and documented in docs/architecture.md; ``walk`` is the
default:

- ``flat``: leaves only, as ranked by hybrid search (the tree is ignored);
- ``collapsed``: leaves and summaries in one ranking (the collapsed tree). A summary that ranks high is
  itself a candidate, and it attracts its own leaves: each leaf directly under one of the best
  summaries gains ``ATTRACT`` times that summary's score, so the turns of a matching topic come along;
- ``walk``: a top-down walk. The source tops are scored by the cosine of their summary with the query,
  the best ``BEAM`` branches are followed down to their depth-1 levels, and the leaves of those levels
  gain ``WALK`` times their level's cosine.

Every bonus is scaled by the leaf's size (``min(1, SIZE_FULL / tokens)``): a long leaf pulled in by its
topic would take the budget of several short ones that match the question directly.

Candidates are ``Hit`` values in rank order, without their evidence (``Searcher.find``: `context` judges
only the few dozen it assembles); ``ancestors`` tells the assembler which nodes overlap. Never
writes anything.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from vaultmem import index
from vaultmem.embed import Embedder
from vaultmem.search import Filters, Hit, Searcher

MODES = ("flat", "collapsed", "walk")
ATTRACT = 0.5  # share of a summary's score given to each of its leaves
ATTRACTORS = 5  # summaries (best first) that attract their leaves
BEAM = 3  # branches followed at each level of the walk
WALK = 0.01  # scale of the walk's bonus (fused scores are RRF sums of about 0.01-0.2)
SUMMARIES_CHOSEN = True
SIZE_FULL = 64  # tokens; a longer leaf gets a proportionally smaller share of a bonus  # in collapsed mode, summaries may be chosen into the context themselves


@dataclass(frozen=True)
class Tree:
    """The summary skeleton of the source trees: each summary's parent and depth (a few thousand rows
    even for big vaults). Topic and digest nodes are left out: they link leaves that live in the source
    trees, so neither the walk nor the overlap rule can see what they cover."""

    parent: dict[str, str | None]
    depth: dict[str, int]

    @classmethod
    def load(cls, conn: sqlite3.Connection) -> Tree:
        parent: dict[str, str | None] = {}
        depth: dict[str, int] = {}
        for row in conn.execute(
            "SELECT id, parent, depth FROM chunks WHERE kind = 'summary' AND path >= 'sources/' AND path < 'sources0'"
        ):
            parent[row[0]] = row[1]
            depth[row[0]] = row[2]
        return cls(parent, depth)

    def ancestors(self, first_parent: str | None) -> tuple[str, ...]:
        out: list[str] = []
        current = first_parent
        while current is not None and current not in out:
            out.append(current)
            current = self.parent.get(current)
        return tuple(out)

    def children(self) -> dict[str | None, list[str]]:
        kids: dict[str | None, list[str]] = {}
        for node_id, parent in self.parent.items():
            kids.setdefault(parent, []).append(node_id)
        return kids


def _parents(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for part, marks in index.in_batches(list(ids)):
        out.update(conn.execute(f"SELECT id, parent FROM chunks WHERE id IN ({marks})", part).fetchall())
    return out


def ancestors_of(conn: sqlite3.Connection, tree: Tree, hits: Sequence[Hit]) -> dict[str, tuple[str, ...]]:
    parents = _parents(conn, [h.id for h in hits])
    return {h.id: tree.ancestors(parents.get(h.id)) for h in hits}


def _leaves_under(
    conn: sqlite3.Connection, summary_ids: Sequence[str], filters: Filters
) -> dict[str, tuple[str, float]]:
    """leaf id -> (the summary of ``summary_ids`` it sits directly under, its size share).

    The share is ``min(1, SIZE_FULL / tokens)``: a long leaf pulled in by its topic would eat the
    budget that several short, directly matching ones could use (the same rule as neighbour spreading)."""
    out: dict[str, tuple[str, float]] = {}
    where, params = replace(filters, kind="leaf").sql()
    for part, marks in index.in_batches(list(summary_ids)):
        for row in conn.execute(
            f"SELECT c.id, c.parent, c.tokens FROM chunks c WHERE c.parent IN ({marks}) AND {where}",
            [*part, *params],
        ):
            out[row[0]] = (row[1], min(1.0, SIZE_FULL / max(1, row[2])))
    return out


def _rescore(searcher: Searcher, base: Sequence[Hit], bonus: dict[str, float]) -> list[Hit]:
    scores = {h.id: h.score for h in base}
    for node_id, extra in bonus.items():
        scores[node_id] = scores.get(node_id, 0.0) + extra
    known = {h.id: h for h in base}
    missing = [i for i in bonus if i not in known]
    for hit in searcher.hits([(i, 0.0, None, None) for i in missing]):
        known[hit.id] = hit
    ranked = sorted((i for i in scores if i in known), key=lambda i: (-scores[i], i))
    return [known[i] if known[i].score == scores[i] else replace(known[i], score=scores[i]) for i in ranked]


def candidates(
    mode: str,
    searcher: Searcher,
    conn: sqlite3.Connection,
    query: str,
    k: int,
    filters: Filters,
    embedder: Callable[[], Embedder],
    tree: Tree | None = None,
) -> list[Hit]:
    """Ranked candidates (leaves, and summaries in the tree modes) for ``query``."""
    if mode == "flat":
        return searcher.find(query, k, replace(filters, kind="leaf"))
    tree = tree or Tree.load(conn)
    if mode == "collapsed":
        hits = [
            h
            for h in searcher.find(query, k, replace(filters, kind=None))
            if h.id in tree.depth or h.kind == "leaf"
        ]
        best = [h for h in hits if h.kind == "summary" and tree.depth.get(h.id) == 1][:ATTRACTORS]
        score_of = {h.id: h.score for h in best}
        bonus = {
            leaf: ATTRACT * share * score_of[parent]
            for leaf, (parent, share) in _leaves_under(conn, list(score_of), filters).items()
        }
        ranked = _rescore(searcher, hits, bonus)
        return ranked if SUMMARIES_CHOSEN else [h for h in ranked if h.kind == "leaf"]
    if mode == "walk":
        leaves = searcher.find(query, k, replace(filters, kind="leaf"))
        levels = _walk(searcher, tree, query, embedder)
        bonus = {
            leaf: WALK * share * levels[parent]
            for leaf, (parent, share) in _leaves_under(conn, list(levels), filters).items()
        }
        return _rescore(searcher, leaves, bonus)
    raise ValueError(f"unknown context mode {mode!r}; one of {', '.join(MODES)}")


def _walk(searcher: Searcher, tree: Tree, query: str, embedder: Callable[[], Embedder]) -> dict[str, float]:
    """Depth-1 levels reached by following the best branches from the top: level id -> cosine."""
    if not tree.parent:
        return {}
    model = embedder()
    cache = searcher.vectors(model)
    q = searcher.query_vector(model, query)  # shared with the search it follows: one forward pass
    sims: dict[str, float] = {}
    rows = [cache.pos[i] for i in tree.parent if i in cache.pos]
    if rows:
        values = cache.matrix[np.asarray(rows, dtype=np.intp)] @ q
        for node_id, value in zip((cache.ids[r] for r in rows), values, strict=True):
            sims[node_id] = float(value)
    kids = tree.children()
    frontier = sorted(kids.get(None, []), key=lambda i: -sims.get(i, -1.0))[:BEAM]
    reached: dict[str, float] = {}
    while frontier:
        nxt: list[str] = []
        for node_id in frontier:
            if tree.depth.get(node_id, 1) <= 1:
                reached[node_id] = max(0.0, sims.get(node_id, 0.0))
            else:
                nxt.extend(kids.get(node_id, []))
        frontier = sorted(nxt, key=lambda i: -sims.get(i, -1.0))[:BEAM]
    return reached
