"""Navigating the tree: children of a node, the tree read as one document, a node expanded to a budget.

Owns read-only walks over levels and leaves, in reading order (``order.sibling_order``):

- ``drill_down(node)``: the children of a level (or the tops of every source for ``None``), ranked by a
  query when one is given;
- ``serialize(node)``: depth-first, the subtree read as one Markdown document;
- ``expand_to_length(node, budget)``: breadth-first, the node's summary, then its children's, and so on
  until the next level would not fit.

Never writes anything. What it renders as text is for a model to read, so every piece of memory text
goes through ``frame.neutralise`` (a stored ``</memory>`` cannot close the frame it is pasted into).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vaultmem import index
from vaultmem.embed import Embedder
from vaultmem.errors import NodeNotFound
from vaultmem.frame import neutralise
from vaultmem.layout import FRESH, SOURCES, SUMMARY_NAME
from vaultmem.model import check_node_id
from vaultmem.order import sibling_order
from vaultmem.tokens import count_tokens
from vaultmem.vectors import VectorCache


@dataclass(frozen=True)
class Node:
    """A leaf or a level as navigation shows it."""

    id: str
    kind: str  # "leaf" | "summary"
    path: str
    title: str  # a summary's title; a leaf's first words
    text: str
    tokens: int
    depth: int
    ts: str | None
    ts_end: str | None
    speaker: str | None
    children: int  # direct children (levels and leaves); 0 for a leaf
    descendants: int  # leaves under it (1 for a leaf)
    score: float | None = None  # similarity to the query, when drilling down with one
    stale: bool = False  # a level whose summary is behind its children (re-summarised by compaction)

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))

    def line(self) -> str:
        """One line of reading: ``speaker: text`` for a leaf, ``title`` for a level."""
        if self.kind == "leaf":
            body = " ".join(self.text.split())
            return neutralise(f"{self.speaker}: {body}" if self.speaker else body)
        return neutralise(self.title)


def _node(row: sqlite3.Row, children: int = 0) -> Node:
    if row["kind"] == "summary":
        prov = json.loads(row["provenance"])
        return Node(
            row["id"], "summary", row["path"], str(prov.get("title") or ""), row["text"], row["tokens"],
            row["depth"], row["ts"], row["ts_end"], None, children, int(prov.get("descendants") or 0),
            stale=row["status"] == "stale",
        )  # fmt: skip
    words = " ".join(str(row["text"]).split()[:10])
    return Node(
        row["id"], "leaf", row["path"], words, row["text"], row["tokens"], 0, row["ts"], row["ts"],
        row["speaker"], 0, 1,
    )  # fmt: skip


def _row(conn: sqlite3.Connection, node_id: str) -> sqlite3.Row:
    check_node_id(node_id)
    row: sqlite3.Row | None = conn.execute("SELECT * FROM chunks WHERE id = ?", (node_id,)).fetchone()
    if row is None:
        raise NodeNotFound(f"no node with id {node_id}; `vaultmem tree` shows the levels")
    return row


def child_rows(
    conn: sqlite3.Connection, node_id: str | None, linked: Sequence[str] = ()
) -> list[sqlite3.Row]:
    """Children in reading order. ``None``: every source's top (its levels and its ``_fresh/`` leaves).
    ``linked``: leaf ids a topic or digest node links (its wikilinks), listed after its sub-levels."""
    if node_id is None:
        rows = conn.execute(
            "SELECT * FROM chunks WHERE path >= ? AND path < ? AND ((kind = 'summary' AND parent IS NULL)"
            " OR (kind = 'leaf' AND instr(path, '/" + FRESH + "/') > 0))",
            index.prefix_range(f"{SOURCES}/"),
        ).fetchall()
        by_source: dict[str, list[sqlite3.Row]] = {}
        for row in rows:
            by_source.setdefault(row["source"], []).append(row)
        return [r for source in sorted(by_source) for r in sibling_order(by_source[source])]
    row = _row(conn, node_id)
    if row["kind"] != "summary":
        return []
    directory = row["path"].rsplit("/", 1)[0]
    prefix = directory + "/"
    kids = []
    for child in conn.execute(
        "SELECT * FROM chunks WHERE path >= ? AND path < ?", index.prefix_range(prefix)
    ):
        if _direct(child["path"][len(prefix) :], child["kind"]):
            kids.append(child)
    kids += index.in_place_sections(conn, row["path"])  # a note's sections, indexed where it is
    return [*sibling_order(kids), *_linked_rows(conn, linked, {r["id"] for r in kids}, "*")]


def _linked_rows(
    conn: sqlite3.Connection, linked: Sequence[str], have: set[str], cols: str
) -> list[sqlite3.Row]:
    """The leaves a topic or digest node links, in link order, without those already among its
    children (a note's node links the sections that are its children)."""
    wanted = [i for i in dict.fromkeys(linked) if i not in have]
    if not wanted:
        return []
    found = {
        r["id"]: r
        for r in conn.execute(
            f"SELECT {cols} FROM chunks WHERE kind = 'leaf' AND id IN ({','.join('?' * len(wanted))})", wanted
        )
    }
    return [found[i] for i in wanted if i in found]


# A level's links name leaves outside its folder only in these trees (a source level's links are its
# own children, a note's node links its sections): only their files are read to count children.
LINKING_TOPS = ("topics/", "global/")
LinksOf = Callable[[str], Sequence[str]]  # a level's id -> the leaf ids its links name (its file)


def _links(row: sqlite3.Row, links_of: LinksOf | None) -> Sequence[str]:
    if links_of is None or row["kind"] != "summary" or not str(row["path"]).startswith(LINKING_TOPS):
        return ()
    return links_of(row["id"])


def _counts(conn: sqlite3.Connection, rows: Sequence[sqlite3.Row], links_of: LinksOf | None) -> list[Node]:
    out = []
    for row in rows:
        n = len(child_rows(conn, row["id"], _links(row, links_of))) if row["kind"] == "summary" else 0
        out.append(_node(row, n))
    return out


def drill_down(
    conn: sqlite3.Connection,
    node_id: str | None,
    *,
    query: str | None = None,
    embedder: Callable[[], Embedder] | None = None,
    vectors: Callable[[Embedder], VectorCache] | None = None,
    linked: Sequence[str] = (),
    links_of: LinksOf | None = None,
) -> list[Node]:
    """The children of ``node_id`` (reading order), or ranked by similarity to ``query``. A child level's
    count includes the leaves it links (``links_of``, read for topic and digest levels)."""
    nodes = _counts(conn, child_rows(conn, node_id, linked), links_of)
    if not query or embedder is None or vectors is None or not nodes:
        return nodes
    model = embedder()
    cache = vectors(model)
    q = model.embed([query])[0]
    scored = []
    for node in nodes:
        pos = cache.pos.get(node.id)
        score = float(cache.matrix[pos] @ q) if pos is not None else -1.0
        scored.append(Node(**{**vars(node), "score": score}))
    return sorted(scored, key=lambda n: -(n.score if n.score is not None else -1.0))


def children_page(
    conn: sqlite3.Connection,
    node_id: str | None,
    *,
    source: str | None = None,
    offset: int = 0,
    limit: int = 100,
    linked: Sequence[str] = (),
    links_of: LinksOf | None = None,
) -> tuple[list[Node], int]:
    """One page of a level's children in reading order (``node_id`` None: the top of ``source``: its
    levels and its ``_fresh/`` leaves), and how many children there are; ``linked`` as for
    ``child_rows``; a child level's count includes the leaves it links (``links_of``, as for
    ``drill_down``). Orders the siblings on a few columns and reads whole rows for the page only, so a
    folder of 100,000 leaves stays cheap."""
    columns = "id, kind, path, ts, seq, ord"
    light = f"SELECT {columns} FROM chunks WHERE path >= ? AND path < ?"
    if node_id is None:
        if source is None:
            raise ValueError("the top of which source?")
        siblings = conn.execute(
            light + " AND ((kind = 'summary' AND parent IS NULL)"
            " OR (kind = 'leaf' AND instr(path, '/" + FRESH + "/') > 0))",
            index.prefix_range(f"{SOURCES}/{source}/"),
        ).fetchall()
    else:
        row = _row(conn, node_id)
        if row["kind"] != "summary":
            return [], 0
        prefix = row["path"].rsplit("/", 1)[0] + "/"
        siblings = [
            r
            for r in conn.execute(light, index.prefix_range(prefix))
            if _direct(r["path"][len(prefix) :], r["kind"])
        ] + index.in_place_sections(conn, row["path"])
    ordered = sibling_order(siblings)
    ordered += _linked_rows(conn, linked, {r["id"] for r in siblings}, columns)
    wanted = [r["id"] for r in ordered[max(0, offset) : max(0, offset) + max(0, limit)]]
    rows = {r["id"]: r for r in index.rows_by_ids(conn, wanted)}
    nodes = []
    for node in wanted:
        full = rows[node]
        if full["kind"] == "summary":
            prefix = full["path"].rsplit("/", 1)[0] + "/"
            paths = conn.execute(
                "SELECT id, path, kind FROM chunks WHERE path >= ? AND path < ?", index.prefix_range(prefix)
            )
            direct = {p["id"] for p in paths if _direct(p["path"][len(prefix) :], p["kind"])}
            direct.update(r["id"] for r in index.in_place_sections(conn, full["path"]))
            linked_too = _linked_rows(conn, _links(full, links_of), direct, "id")
            nodes.append(_node(full, len(direct) + len(linked_too)))
        else:
            nodes.append(_node(full))
    return nodes, len(ordered)


def _direct(rest: str, kind: str) -> bool:
    """Whether a path under a level's folder (``rest``, relative to it) is one of its own children."""
    if kind == "leaf":
        return "/" not in rest
    return rest.count("/") == 1 and rest.endswith("/" + SUMMARY_NAME)


def serialize(conn: sqlite3.Connection, node_id: str) -> str:
    """The subtree of ``node_id`` read as one document, depth first, in reading order."""
    row = _row(conn, node_id)
    lines: list[str] = []
    _serialize(conn, row, 1, lines)
    return "\n".join(lines).strip() + "\n"


def _serialize(conn: sqlite3.Connection, row: sqlite3.Row, level: int, lines: list[str]) -> None:
    node = _node(row)
    if node.kind == "leaf":
        lines.append(node.line())
        return
    span = f" ({(node.ts or '')[:10]} – {(node.ts_end or '')[:10]})" if node.ts else ""
    heading = neutralise(f"{'#' * min(level, 6)} {node.title or 'level'}{span}")
    lines.extend(["", heading, "", neutralise(node.text.strip()), ""])
    for child in child_rows(conn, node.id):
        _serialize(conn, child, level + 1, lines)


@dataclass(frozen=True)
class Expansion:
    text: str
    tokens: int
    nodes: tuple[str, ...]  # ids included, breadth-first
    complete: bool  # True when the whole subtree fit


def expand_to_length(conn: sqlite3.Connection, node_id: str, budget_tokens: int) -> Expansion:
    """Breadth-first from ``node_id``: its text, then its children's, level by level, while the next
    node fits the budget. A level's own summary is replaced by nothing: summaries and their children are
    both kept, so the result reads from overview to detail. Never exceeds the budget."""
    root = _row(conn, node_id)
    parts: list[str] = []
    used = 0
    included: list[str] = []
    frontier = [root]
    complete = True
    while frontier:
        nxt: list[sqlite3.Row] = []
        for row in frontier:
            node = _node(row)
            piece = (
                neutralise(f"## {node.title}\n{node.text.strip()}") if node.kind == "summary" else node.line()
            )
            cost = count_tokens(piece)
            if used + cost > budget_tokens:
                complete = False
                continue
            parts.append(piece)
            used += cost
            included.append(node.id)
            if node.kind == "summary":
                nxt.extend(child_rows(conn, node.id))
        frontier = nxt
    text = "\n".join(parts)
    return Expansion(text, count_tokens(text), tuple(included), complete)
