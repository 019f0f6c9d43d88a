"""The leaf graph: leaves linked to the entities they mention and to their conversation, walked by
Personalized PageRank (HippoRAG 2's propagation, without its LLM-built phrase graph).

Owns: the graph (leaf <-> entity from the ``mentions`` table, leaf <-> conversation from ``source`` and
``session``) as compressed adjacency arrays, kept in step with the index through its change log
(``graph_changes``, written by triggers, migration 022): the leaves that appeared, went, moved or had
their entities rewritten since the graph was read are read again and only their edges are replaced; a
long gap (or a log that was cut past it) rebuilds the whole graph. The walk from seed leaves and seed
entities. Each leaf's previous and next leaf in its conversation (``SessionOrder``), kept in step from
the same log. Both are saved together in the leaf file (``.vaultmem/leafgraph.npz`` and its ``.json``
header, ``dump``/``load``), a cache a new process reads instead of building them (at 100,000 leaves the
graph took 1.7 s and the session order 1.3 s, loaded) and then brings up to date from the log like any
refresh. Must never: write the index, or keep a graph older than the rows it was read from; the leaf file
is trusted only for the index it names (``vectors_epoch``), whole, and when the log reaches back to it.
"""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Iterable
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from vaultmem import fsio, index
from vaultmem.db import chunks_generation
from vaultmem.errors import VaultError

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


def _changes(conn: sqlite3.Connection, seen: int, known: int) -> tuple[int, list[str] | None]:
    """(the log's last change, the leaves named since ``seen``), the leaves None when a whole rebuild is
    due: nothing read yet, a log that no longer reaches back or went backwards (another index), or more
    changed leaves than ``REBUILD_SHARE`` of the ``known`` ones. Raises ``sqlite3.OperationalError`` for
    an index without the log (before migration 022, opened read-only)."""
    # Two queries: SQLite reads a lone min() or max() off the primary key, both together by a scan.
    last = conn.execute("SELECT max(seq) FROM graph_changes").fetchone()[0] or 0
    if last == seen:
        return last, []
    first = conn.execute("SELECT min(seq) FROM graph_changes").fetchone()[0]
    if seen < 0 or last < seen or (first is not None and first > seen + 1):
        return last, None
    changed = list(
        dict.fromkeys(
            r[0]
            for r in conn.execute(
                "SELECT leaf FROM graph_changes WHERE seq > ? AND seq <= ? ORDER BY seq", (seen, last)
            )
        )
    )
    if len(changed) > REBUILD_SHARE * max(known, 1000):
        return last, None
    return last, changed


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
        try:
            last, changed = _changes(conn, self._seen, len(self.leaf_pos))
        except sqlite3.OperationalError:
            # An index from before migration 022 opened read-only (nothing migrates it): no log to follow,
            # so the graph is read whole whenever the rows' places move.
            stamp = -2 - chunks_generation(conn)
            if stamp != self._seen:
                self._rebuild(conn, stamp)
            return
        if changed is None:
            self._rebuild(conn, last)
        elif changed:
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
        self._index_edges()

    def _index_edges(self) -> None:
        # Adjacency in key order (by node, then by neighbour): the same arrays however the edges came.
        self._next = (self._keys & _LOW).astype(np.intp)
        self._degree = np.bincount((self._keys >> 32).astype(np.intp), minlength=len(self._ids))
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
            share *= 1.0 - RESTART
            if step == STEPS - 1:
                # The last step's nodes only add to ``found``: each one's mass summed over its edges in
                # their order (as np.unique's inverse summed it) and added where it is a leaf, without
                # sorting them (the largest step: ~1 ms of a search at 100,000 leaves). Nodes not reached
                # add 0.0, which changes nothing.
                summed = np.bincount(reached, weights=np.repeat(mass, degree), minlength=len(found))
                found += share * np.where(self._is_leaf, summed, 0.0)
                break
            nodes, inverse = np.unique(reached, return_inverse=True)
            mass = np.asarray(np.bincount(inverse, weights=np.repeat(mass, degree)), dtype=np.float64)
        hit = np.flatnonzero(found)
        if len(hit) > limit:
            hit = hit[np.argpartition(-found[hit], limit - 1)[:limit]]
        ids = self._ids
        best = sorted(hit.tolist(), key=lambda p: (-found[p], ids[p] or ""))
        return [i for p in best if (i := ids[p]) is not None]


class SessionOrder:
    """Each leaf's previous and next leaf in its conversation (same source and session, by time, then
    rowid and seq), and each leaf's size in tokens.

    Kept in step from the change log like the graph (migration 024 adds a leaf's time, seq and size to
    what it names): the conversations a changed leaf was or is in are read again, each by the
    ``chunks_source`` index; a long gap rebuilds it whole."""

    def __init__(self) -> None:
        self.rebuilds = 0
        self._seen = -1
        self._prev: dict[str, str] = {}
        self._next: dict[str, str] = {}
        self.tokens: dict[str, int] = {}
        self._spread: dict[str, tuple[tuple[str, float], ...]] = {}
        self._members: dict[tuple[str, str], list[str]] = {}  # a conversation's leaves, in order
        self._conversation: dict[str, tuple[str, str]] = {}

    def refresh(self, conn: sqlite3.Connection) -> None:
        try:
            last, changed = _changes(conn, self._seen, len(self._conversation))
        except sqlite3.OperationalError:  # no log (see ``LeafGraph.refresh``)
            stamp = -2 - chunks_generation(conn)
            if stamp != self._seen:
                self._rebuild(conn)
                self._seen = stamp
            return
        if changed is None:
            self._rebuild(conn)
        elif changed:
            self._update(conn, changed)
        self._seen = last

    def _rebuild(self, conn: sqlite3.Connection) -> None:
        self.rebuilds += 1
        self._prev, self._next, self.tokens, self._spread = {}, {}, {}, {}
        self._members, self._conversation = {}, {}
        members: list[str] = []
        last_key: tuple[str, str] | None = None
        for row_id, source, session, tokens in conn.execute(
            "SELECT id, source, session, tokens FROM chunks WHERE kind = 'leaf' AND session IS NOT NULL"
            " ORDER BY source, session, coalesce(ts, ''), rowid, seq"
        ):
            key = (source, session)
            if key != last_key:
                members = self._members[key] = []
                last_key = key
            members.append(row_id)
            self.tokens[row_id] = tokens
        for key, ids in self._members.items():
            self._link(key, ids)

    def _link(self, key: tuple[str, str], ids: list[str]) -> None:
        self._conversation.update(dict.fromkeys(ids, key))
        self._prev.update(zip(ids[1:], ids[:-1], strict=True))
        self._next.update(pairwise(ids))

    def _update(self, conn: sqlite3.Connection, changed: list[str]) -> None:
        """Read again every conversation a ``changed`` leaf was in or is in now."""
        keys = {k for i in changed if (k := self._conversation.get(i)) is not None}
        for part, marks in index.in_batches(changed):
            keys.update(
                (r[0], r[1])
                for r in conn.execute(
                    "SELECT source, session FROM chunks WHERE kind = 'leaf' AND session IS NOT NULL"
                    f" AND id IN ({marks})",
                    part,
                )
            )
        for key in keys:  # first every old link goes (a leaf may have moved between two of them) ...
            for row_id in self._members.pop(key, ()):
                for table in (self._prev, self._next, self.tokens, self._conversation):
                    table.pop(row_id, None)
        for key in sorted(keys):  # ... then each conversation is read as it is now
            rows = conn.execute(
                "SELECT id, tokens FROM chunks WHERE kind = 'leaf' AND source = ? AND session = ?"
                " ORDER BY coalesce(ts, ''), rowid, seq",
                key,
            ).fetchall()
            if rows:
                ids = self._members[key] = [r[0] for r in rows]
                self.tokens.update((r[0], r[1]) for r in rows)
                self._link(key, ids)
        self._spread = {}

    def neighbors(self, node_id: str) -> tuple[str, ...]:
        return tuple(n for n in (self._prev.get(node_id), self._next.get(node_id)) if n is not None)

    def after(self, node_id: str) -> str | None:
        """The leaf that follows ``node_id`` in its conversation (a user's turn: the reply it got)."""
        return self._next.get(node_id)

    def spread(self, node_id: str, full_tokens: int) -> tuple[tuple[str, float], ...]:
        """The node's neighbours with their size share ``min(1, full_tokens / tokens)`` (a long neighbour
        is worth less context than a short one), remembered until the next change."""
        known = self._spread.get(node_id)
        if known is None:
            known = self._spread[node_id] = tuple(
                (n, min(1.0, full_tokens / max(1, self.tokens.get(n, 1)))) for n in self.neighbors(node_id)
            )
        return known


# --- the leaf file -----------------------------------------------------------------------------------

FILE_VERSION = 1
_SEP = "\x1f"  # between the strings of one array (ids, entity keys, sources, sessions)
# From this many leaves the writer keeps a leaf file (``Vault.save_vectors``); below, a new process builds
# both in a few tenths of a second. It is rewritten when the log moved this many changes past it (a reader
# catches up on fewer from the log in milliseconds) or no longer reaches back to it.
FILE_MIN_LEAVES = 20_000
FILE_BEHIND = 1_000


def file_paths(state: Path) -> tuple[Path, Path]:
    """The leaf file and its header."""
    return state / "leafgraph.npz", state / "leafgraph.json"


def _joined(values: Iterable[str]) -> npt.NDArray[np.uint8]:
    items = list(values)
    if any(_SEP in v for v in items):
        raise ValueError("a string holds the separator")
    return np.frombuffer(_SEP.join(items).encode("utf-8"), dtype=np.uint8)


def _split(array: npt.NDArray[Any], count: int) -> list[str]:
    text = array.astype(np.uint8).tobytes().decode("utf-8")
    out = text.split(_SEP) if count else []
    if len(out) != count:
        raise ValueError("strings do not match their count")
    return out


def dump(graph: LeafGraph, order: SessionOrder, epoch: str) -> tuple[bytes, bytes] | None:
    """The leaf file and its header for ``graph`` and ``order`` (refreshed to the same change), or None
    when they cannot be saved (not at the same change, or a string that holds the separator)."""
    if graph._seen != order._seen or graph._seen < 0:
        return None
    conversations = list(order._members)
    leaves = list(graph.leaf_pos.values())
    try:
        arrays: dict[str, Any] = {
            "ids": _joined(i or "" for i in graph._ids),
            "leaf_nodes": np.asarray(leaves, dtype=np.int64),
            "entity_keys": _joined(graph.entity_pos),
            "entity_nodes": np.fromiter(
                graph.entity_pos.values(), dtype=np.int64, count=len(graph.entity_pos)
            ),
            "conv_sources": _joined(k[0] for k in graph._conversation_pos),
            "conv_sessions": _joined(k[1] for k in graph._conversation_pos),
            "conv_nodes": np.fromiter(
                graph._conversation_pos.values(), dtype=np.int64, count=len(graph._conversation_pos)
            ),
            "keys": graph._keys,
            "order_sources": _joined(k[0] for k in conversations),
            "order_sessions": _joined(k[1] for k in conversations),
            "order_sizes": np.asarray([len(order._members[k]) for k in conversations], dtype=np.int64),
            "order_ids": _joined(i for k in conversations for i in order._members[k]),
            "order_tokens": np.asarray(
                [order.tokens[i] for k in conversations for i in order._members[k]], dtype=np.int64
            ),
        }
    except ValueError:
        return None
    counts = {
        "ids": len(graph._ids),
        "entities": len(graph.entity_pos),
        "conversations": len(graph._conversation_pos),
        "order_conversations": len(conversations),
        "order_leaves": sum(len(v) for v in order._members.values()),
    }
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    header = {"version": FILE_VERSION, "epoch": epoch, "seen": graph._seen, "counts": counts}
    return buffer.getvalue(), json.dumps(header).encode("utf-8")


def save(root: Path, state: Path, graph: LeafGraph, order: SessionOrder, epoch: str) -> bool:
    """Write the leaf file and its header for ``graph`` and ``order`` (``dump``), under the caller's
    write lock; False when they cannot be saved or written (derived: a new process builds them)."""
    found = dump(graph, order, epoch)
    if found is None:
        return False
    data, header = file_paths(state)
    try:
        fsio.atomic_write(data, found[0], root=root)
        fsio.atomic_write(header, found[1], root=root)
    except (OSError, VaultError):
        return False
    return True


def rebuild_file(conn: sqlite3.Connection, root: Path, state: Path, epoch: str) -> bool:
    """Build the leaf graph and session order from the index and write their file (``check --fix``)."""
    graph, order = LeafGraph(), SessionOrder()
    graph.refresh(conn)
    order.refresh(conn)
    return save(root, state, graph, order, epoch)


def file_seen(state: Path, epoch: str | None) -> int | None:
    """The change the leaf file holds, when it is of this index (``epoch``); else None."""
    try:
        header = json.loads(file_paths(state)[1].read_text(encoding="utf-8"))
        if header.get("version") != FILE_VERSION or epoch is None or header.get("epoch") != epoch:
            return None
        return int(header["seen"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def load(state: Path, epoch: str | None) -> tuple[LeafGraph, SessionOrder] | None:
    """The graph and session order of the leaf file, at the change it holds (the caller's refresh brings
    them up to date from the log, or rebuilds them when the log no longer reaches back), or None when
    there is none for this index (``epoch``), or it does not hold what its header says (torn, damaged)."""
    import zipfile  # only here: a cold `vaultmem search` on a small vault never reads a leaf file

    data, header_path = file_paths(state)
    try:
        header = json.loads(header_path.read_text(encoding="utf-8"))
        if header.get("version") != FILE_VERSION or epoch is None or header.get("epoch") != epoch:
            return None
        seen, counts = int(header["seen"]), header["counts"]
        with np.load(io.BytesIO(data.read_bytes()), allow_pickle=False) as npz:
            a = {name: npz[name] for name in npz.files}
        graph = LeafGraph()
        ids = _split(a["ids"], int(counts["ids"]))
        graph._ids = [i or None for i in ids]
        size = len(ids)
        graph._is_leaf = np.fromiter(map(bool, ids), dtype=bool, count=size)
        leaf_nodes = a["leaf_nodes"].astype(np.intp)
        if len(leaf_nodes) and (leaf_nodes.min() < 0 or leaf_nodes.max() >= size):
            raise ValueError("a leaf node out of range")
        nodes = leaf_nodes.tolist()
        graph.leaf_pos = dict(zip([ids[n] for n in nodes], nodes, strict=True))
        if any(not k for k in graph.leaf_pos):
            raise ValueError("a leaf node without an id")
        entity_keys = _split(a["entity_keys"], int(counts["entities"]))
        entity_nodes = a["entity_nodes"].tolist()
        if len(entity_nodes) != len(entity_keys):
            raise ValueError("entities do not match their nodes")
        # In node order, as they were met: ``entity_words`` lists the names in the same order as a build.
        for node, entity in sorted(zip(entity_nodes, entity_keys, strict=True)):
            graph.entity_pos[entity] = int(node)
            name = tuple(entity.split(":", 1)[-1].split("-"))
            graph.entity_words.setdefault(name[0], []).append((name, entity))
        n_conv = int(counts["conversations"])
        sources, sessions = _split(a["conv_sources"], n_conv), _split(a["conv_sessions"], n_conv)
        conv_nodes = a["conv_nodes"].tolist()
        if len(conv_nodes) != n_conv:
            raise ValueError("conversations do not match their nodes")
        graph._conversation_pos = {
            (src, ses): int(n) for src, ses, n in zip(sources, sessions, conv_nodes, strict=True)
        }
        keys = np.ascontiguousarray(a["keys"], dtype=np.int64)
        if len(keys) and ((keys >> 32).max() >= size or (keys & _LOW).max() >= size or keys.min() < 0):
            raise ValueError("an edge out of range")
        if len(keys) > 1 and not bool(np.all(keys[1:] > keys[:-1])):
            raise ValueError("edges out of order")
        graph._keys = keys
        graph._index_edges()
        graph._seen = seen
        order = SessionOrder()
        n_order = int(counts["order_conversations"])
        sources, sessions = _split(a["order_sources"], n_order), _split(a["order_sessions"], n_order)
        sizes = a["order_sizes"].tolist()
        members = _split(a["order_ids"], int(counts["order_leaves"]))
        tokens = a["order_tokens"].tolist()
        if len(sizes) != n_order or sum(sizes) != len(members) or len(tokens) != len(members):
            raise ValueError("the session order does not match its counts")
        order.tokens = dict(zip(members, tokens, strict=True))
        start = 0
        for src, ses, n in zip(sources, sessions, sizes, strict=True):
            key = (src, ses)
            order._members[key] = members[start : start + n]
            order._link(key, order._members[key])
            start += n
        order._seen = seen
        return graph, order
    except (OSError, ValueError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile):
        return None
