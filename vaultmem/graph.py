"""The leaf graph: leaves linked to the entities they mention and to their conversation, walked by
Personalized PageRank (HippoRAG 2's propagation, without its LLM-built phrase graph).

Owns: the graph (leaf <-> entity from the ``mentions`` table, leaf <-> conversation from ``source`` and
``session``) as compressed adjacency arrays, kept in step with the index through its change log
(``graph_changes``, written by triggers, migration 022): the leaves that appeared, went, moved or had
their entities rewritten since the graph was read are read again and only their edges are replaced; a
long gap (or a log that was cut past it) rebuilds the whole graph. The walk from seed leaves and seed
entities. Must never: write the index, or keep a graph older than the rows it was read from.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from vaultmem import index
from vaultmem.db import chunks_generation

# The walk restarts at its seeds with this probability at each step (HippoRAG 2 uses 0.5) and is cut
# after STEPS steps: leaf to entity or conversation to leaf, twice. The mass a longer walk would still
# move is (1 - RESTART)^STEPS (6%); on LoCoMo dev 4 steps ranked as 9 did (C@1024 0.860 both).
RESTART = 0.5
STEPS = 4
# A node with more edges than this passes nothing on (it still receives): a chat's speaker is on every
# one of its leaves and would give each of them almost nothing at the cost of touching all of them
# (a walk at 100,000 leaves: 379 ms through every node, under 2 ms without them).
HUB_EDGES = 200
# More changed leaves than this share of the graph's (or than the log still holds) are read by a whole
# rebuild: one pass over the table beats reading each of them by id.
REBUILD_SHARE = 0.2


_LOW = np.int64(0xFFFFFFFF)


def _key(node: npt.NDArray[np.integer], neighbour: npt.NDArray[np.integer]) -> npt.NDArray[np.int64]:
    return (node.astype(np.int64) << 32) | neighbour.astype(np.int64)


class LeafGraph:
    """Leaves, entities and conversations as one undirected graph; a node's walk splits evenly over its
    edges. Nodes are numbered as they are met and keep their number until the next whole rebuild (a leaf
    that goes keeps its node, without edges)."""

    def __init__(self) -> None:
        self.rebuilds = 0  # whole rebuilds so far (a measure for tests and benches)
        self._reset()

    def _reset(self) -> None:
        self._seen = -1  # the last change (``graph_changes.seq``) the graph holds
        self.leaf_pos: dict[str, int] = {}
        self.entity_pos: dict[str, int] = {}
        self.entity_words: dict[str, list[tuple[tuple[str, ...], str]]] = {}
        self._conversation_pos: dict[tuple[str, str], int] = {}
        self._ids: list[str | None] = []  # node -> its leaf id (None: an entity or a conversation)
        self._is_leaf: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)
        # Every edge both ways as ``node << 32 | neighbour``, sorted: the adjacency arrays are read off it.
        self._keys: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._start: npt.NDArray[np.intp] = np.zeros(1, dtype=np.intp)
        self._next: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)
        self._degree: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)

    def refresh(self, conn: sqlite3.Connection) -> None:
        """Bring the graph up to the index's rows: read again only the leaves the change log names since
        the last refresh, or everything when the gap is long."""
        # Two queries: SQLite reads a lone min() or max() off the primary key, both together by a scan.
        try:
            last = conn.execute("SELECT max(seq) FROM graph_changes").fetchone()[0] or 0
        except sqlite3.OperationalError:
            # An index from before migration 022 opened read-only (nothing migrates it): no log to follow,
            # so the graph is read whole whenever the rows' places move.
            stamp = -2 - chunks_generation(conn)
            if stamp != self._seen:
                self._rebuild(conn, stamp)
            return
        if last == self._seen:
            return
        first = conn.execute("SELECT min(seq) FROM graph_changes").fetchone()[0]
        if self._seen < 0 or last < self._seen or (first is not None and first > self._seen + 1):
            self._rebuild(conn, last)
            return
        changed = list(
            dict.fromkeys(
                r[0]
                for r in conn.execute(
                    "SELECT leaf FROM graph_changes WHERE seq > ? AND seq <= ? ORDER BY seq",
                    (self._seen, last),
                )
            )
        )
        if len(changed) > REBUILD_SHARE * max(len(self.leaf_pos), 1000):
            self._rebuild(conn, last)
            return
        self._update(conn, changed)
        self._seen = last

    def _rebuild(self, conn: sqlite3.Connection, last: int) -> None:
        self._reset()
        self.rebuilds += 1
        rows = conn.execute("SELECT id, source, session FROM chunks WHERE kind = 'leaf'").fetchall()
        mentions = conn.execute("SELECT entity, leaf FROM mentions").fetchall()
        self._add(rows, mentions)
        self._seen = last

    def _update(self, conn: sqlite3.Connection, changed: list[str]) -> None:
        """Replace the edges of the ``changed`` leaves by what the index holds for them now."""
        rows: list[tuple[str, str, str | None]] = []
        mentions: list[tuple[str, str]] = []
        for part, marks in index.in_batches(changed):
            rows += conn.execute(
                f"SELECT id, source, session FROM chunks WHERE kind = 'leaf' AND id IN ({marks})", part
            ).fetchall()
            mentions += conn.execute(
                f"SELECT entity, leaf FROM mentions WHERE leaf IN ({marks})", part
            ).fetchall()
        old = [p for i in changed if (p := self.leaf_pos.get(i)) is not None]
        if old:
            nodes = np.asarray(old, dtype=np.intp)
            degree = self._degree[nodes]
            offsets = np.arange(int(degree.sum())) - np.repeat(np.cumsum(degree) - degree, degree)
            other = self._next[np.repeat(self._start[nodes], degree) + offsets]
            mine = np.repeat(nodes, degree)
            gone = np.concatenate([_key(mine, other), _key(other, mine)])
            self._keys = self._keys[~np.isin(self._keys, gone, assume_unique=True)]
        present = {r[0] for r in rows}
        for leaf_id in changed:
            if leaf_id not in present and leaf_id in self.leaf_pos:
                del self.leaf_pos[leaf_id]  # gone (or no longer a leaf): its node stays, without edges
        self._add(rows, mentions)

    def _node(self, leaf_id: str | None) -> int:
        self._ids.append(leaf_id)
        return len(self._ids) - 1

    def _add(self, rows: Iterable[tuple[str, str, str | None]], mentions: Iterable[tuple[str, str]]) -> None:
        """Add the leaves ``rows`` (id, source, session) and their ``mentions`` (entity, leaf) as nodes and
        edges, then index the edges again."""
        pairs: list[tuple[int, int]] = []
        leaf_pos, entity_pos, conversation_pos = self.leaf_pos, self.entity_pos, self._conversation_pos
        known = len(self._ids)
        fresh = set()
        for leaf_id, source, session in rows:
            pos = leaf_pos.get(leaf_id)
            if pos is None:
                pos = leaf_pos[leaf_id] = self._node(leaf_id)
            fresh.add(leaf_id)
            if session is not None:
                conversation = conversation_pos.get((source, session))
                if conversation is None:
                    conversation = conversation_pos[(source, session)] = self._node(None)
                pairs.append((pos, conversation))
        for entity, leaf_id in mentions:
            if leaf_id not in fresh:
                continue
            node = entity_pos.get(entity)
            if node is None:
                node = entity_pos[entity] = self._node(None)
                name = tuple(entity.split(":", 1)[-1].split("-"))
                self.entity_words.setdefault(name[0], []).append((name, entity))
            pairs.append((leaf_pos[leaf_id], node))
        size = len(self._ids)
        added = np.fromiter((i is not None for i in self._ids[known:]), dtype=bool, count=size - known)
        self._is_leaf = np.concatenate([self._is_leaf, added])
        if pairs:
            edges = np.array(pairs, dtype=np.int64).reshape(-1, 2)
            new = np.sort(np.concatenate([_key(edges[:, 0], edges[:, 1]), _key(edges[:, 1], edges[:, 0])]))
            self._keys = np.insert(self._keys, np.searchsorted(self._keys, new), new)
        # Adjacency in key order (by node, then by neighbour): the same arrays however the edges came.
        self._next = (self._keys & _LOW).astype(np.intp)
        self._degree = np.bincount((self._keys >> 32).astype(np.intp), minlength=size)
        self._start = np.concatenate([[0], np.cumsum(self._degree)]).astype(np.intp)

    def entities_named(self, words: set[str]) -> list[str]:
        """The entities every word of whose name is in ``words`` ("pride month" names event:pride-month)."""
        return [
            entity
            for word in words
            for name, entity in self.entity_words.get(word, ())
            if all(w in words for w in name)
        ]

    def walk(self, leaves: dict[str, float], entities: dict[str, float], limit: int) -> list[str]:
        """The ``limit`` leaves of highest Personalized PageRank from the seeds (weights need not sum to
        one), best first: the share of a random walk restarting at the seeds that is found on each."""
        seed = {p: w for i, w in leaves.items() if (p := self.leaf_pos.get(i)) is not None}
        for entity, weight in entities.items():
            pos = self.entity_pos.get(entity)
            if pos is not None:
                seed[pos] = seed.get(pos, 0.0) + weight
        total = sum(seed.values())
        if total <= 0:
            return []
        nodes = np.fromiter(seed, dtype=np.intp, count=len(seed))
        mass = np.fromiter(seed.values(), dtype=np.float64, count=len(seed)) / total
        found = np.zeros(len(self._ids))
        share = RESTART
        for step in range(STEPS + 1):
            on_leaf = self._is_leaf[nodes]
            found[nodes[on_leaf]] += share * mass[on_leaf]  # a step's nodes are distinct
            if step == STEPS:
                break
            degree = self._degree[nodes]
            keep = (degree > 0) & (degree <= HUB_EDGES)
            nodes, mass, degree = nodes[keep], mass[keep] / degree[keep], degree[keep]
            if not len(nodes):
                break
            offsets = np.arange(int(degree.sum())) - np.repeat(np.cumsum(degree) - degree, degree)
            reached = self._next[np.repeat(self._start[nodes], degree) + offsets]
            nodes, inverse = np.unique(reached, return_inverse=True)
            mass = np.asarray(np.bincount(inverse, weights=np.repeat(mass, degree)), dtype=np.float64)
            share *= 1.0 - RESTART
        hit = np.flatnonzero(found)
        if len(hit) > limit:
            hit = hit[np.argpartition(-found[hit], limit - 1)[:limit]]
        ids = self._ids
        best = sorted(hit.tolist(), key=lambda p: (-found[p], ids[p] or ""))
        return [i for p in best if (i := ids[p]) is not None]
