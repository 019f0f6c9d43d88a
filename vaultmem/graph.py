"""The leaf graph: leaves linked to the entities they mention and to their conversation, walked by
Personalized PageRank (HippoRAG 2's propagation, without its LLM-built phrase graph).

Owns: the graph (leaf <-> entity from the ``mentions`` table, leaf <-> conversation from ``source`` and
``session``) as compressed adjacency arrays, rebuilt when ``chunks_gen`` or ``mentions_gen`` moves; the walk from seed
leaves and seed entities. Must never: write the index, or keep a graph older than the rows it was read
from.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import numpy.typing as npt

from vaultmem.db import chunks_generation, mentions_generation

# The walk restarts at its seeds with this probability at each step (HippoRAG 2 uses 0.5) and is cut
# after STEPS steps: leaf to entity or conversation to leaf, twice. The mass a longer walk would still
# move is (1 - RESTART)^STEPS (6%); on LoCoMo dev 4 steps ranked as 9 did (C@1024 0.860 both).
RESTART = 0.5
STEPS = 4
# A node with more edges than this passes nothing on (it still receives): a chat's speaker is on every
# one of its leaves and would give each of them almost nothing at the cost of touching all of them
# (a walk at 100,000 leaves: 379 ms through every node, under 2 ms without them).
HUB_EDGES = 200


class LeafGraph:
    """Leaves, entities and conversations as one undirected graph; a node's walk splits evenly over its
    edges."""

    def __init__(self) -> None:
        self._stamp: tuple[int, int] = (-1, -1)
        self.leaf_pos: dict[str, int] = {}
        self.leaf_ids: list[str] = []
        self.entity_pos: dict[str, int] = {}
        self.entity_words: dict[str, list[tuple[tuple[str, ...], str]]] = {}
        self._start: npt.NDArray[np.intp] = np.zeros(1, dtype=np.intp)
        self._next: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)
        self._degree: npt.NDArray[np.intp] = np.zeros(0, dtype=np.intp)
        self._size = 0

    def refresh(self, conn: sqlite3.Connection) -> None:
        # Rows appear, go or move (chunks_gen), or their entities are rewritten in place (mentions_gen).
        stamp = (chunks_generation(conn), mentions_generation(conn))
        if stamp == self._stamp:
            return
        leaf_pos: dict[str, int] = {}
        conversations: list[tuple[int, tuple[str, str]]] = []
        for leaf_id, source, session in conn.execute(
            "SELECT id, source, session FROM chunks WHERE kind = 'leaf'"
        ):
            pos = leaf_pos.setdefault(leaf_id, len(leaf_pos))
            if session is not None:
                conversations.append((pos, (source, session)))
        entity_pos: dict[str, int] = {}
        pairs: list[tuple[int, int]] = []
        for entity, leaf_id in conn.execute("SELECT entity, leaf FROM mentions"):
            leaf = leaf_pos.get(leaf_id)
            if leaf is not None:
                pairs.append((leaf, len(leaf_pos) + entity_pos.setdefault(entity, len(entity_pos))))
        base = len(leaf_pos) + len(entity_pos)
        numbers: dict[tuple[str, str], int] = {}
        for pos, key in conversations:
            pairs.append((pos, base + numbers.setdefault(key, len(numbers))))
        size = base + len(numbers)
        edges = np.array(pairs, dtype=np.intp).reshape(-1, 2)
        src = np.concatenate([edges[:, 0], edges[:, 1]])
        dst = np.concatenate([edges[:, 1], edges[:, 0]])
        order = np.argsort(src, kind="stable")
        self._next = dst[order]
        self._degree = np.bincount(src, minlength=size)
        self._start = np.concatenate([[0], np.cumsum(self._degree)]).astype(np.intp)
        words: dict[str, list[tuple[tuple[str, ...], str]]] = {}
        for entity in entity_pos:
            name = tuple(entity.split(":", 1)[-1].split("-"))
            words.setdefault(name[0], []).append((name, entity))
        self.leaf_pos, self.entity_pos, self.entity_words, self._size = leaf_pos, entity_pos, words, size
        self.leaf_ids = list(leaf_pos)
        self._stamp = stamp

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
        n = len(self.leaf_pos)
        for entity, weight in entities.items():
            pos = self.entity_pos.get(entity)
            if pos is not None:
                seed[n + pos] = seed.get(n + pos, 0.0) + weight
        total = sum(seed.values())
        if total <= 0:
            return []
        nodes = np.fromiter(seed, dtype=np.intp, count=len(seed))
        mass = np.fromiter(seed.values(), dtype=np.float64, count=len(seed)) / total
        found = np.zeros(n)
        share = RESTART
        for step in range(STEPS + 1):
            on_leaf = nodes < n
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
        best = sorted(hit.tolist(), key=lambda p: (-found[p], self.leaf_ids[p]))
        return [self.leaf_ids[p] for p in best]
