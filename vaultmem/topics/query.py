"""Reading the entity index: which entity a name means, the hottest ones, a topic's view, the graph.

Owns the read side of ``mentions`` and ``entity_heat``: resolving what a person types ("Caroline",
"@caroline", "person:caroline", a topic folder name) to one entity key, the hot-topic ranking, the
``vault.topic`` view (summary, hottest facts, recent leaves) and the co-occurrence graph a
force-directed view draws. Takes an open connection; never writes.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from vaultmem import entities, index
from vaultmem.errors import NodeNotFound
from vaultmem.model import Leaf
from vaultmem.topics import heat
from vaultmem.topics.plan import ARCHIVE, TopicSettings, display_name, existing


@dataclass(frozen=True)
class EntityInfo:
    key: str
    kind: str
    name: str
    heat: float
    leaves: int  # leaves that mention it
    sources: int  # distinct sources it appears in
    first_seen: str | None
    last_seen: str | None
    topic: str | None  # path of its topic's _summary.md, when it has one
    archived: bool

    def as_dict(self) -> dict[str, Any]:
        return {**vars(self), "heat": round(self.heat, 3)}


def resolve(conn: sqlite3.Connection, name: str) -> str:
    """The entity key ``name`` means. Tries the name as a key, then as each kind's canonical form,
    then as a topic folder name; among several known matches the most mentioned wins."""
    text = name.strip()
    if not text:
        raise NodeNotFound("no entity named ''; `vaultmem topics` lists the hot ones")
    tried: list[str] = []
    if ":" in text:
        kind, _, value = text.partition(":")
        if kind.strip().lower() in entities.KINDS:
            tried.append(entities.canonical(kind.strip().lower(), value))
    for kind in entities.KINDS:
        try:
            tried.append(entities.canonical(kind, text))
        except ValueError:
            continue
    best: tuple[int, str] | None = None
    for key in dict.fromkeys(tried):
        count = conn.execute("SELECT count(*) FROM mentions WHERE entity = ?", (key,)).fetchone()[0]
        if count and (best is None or count > best[0]):
            best = (int(count), key)
    if best is not None:
        return best[1]
    for key, path in existing(conn).items():
        if path.split("/")[-2] == text:
            return key
    raise NodeNotFound(f"no entity named {name!r} in the vault; `vaultmem topics` lists the hot ones")


def info(
    conn: sqlite3.Connection,
    keys: list[str],
    now: datetime,
    settings: TopicSettings,
    heats: dict[str, float] | None = None,
) -> list[EntityInfo]:
    """The facts of ``keys``, in that order (``heats``: their heat when already computed)."""
    topics = existing(conn)
    counts: dict[str, sqlite3.Row] = {}
    for part, marks in index.in_batches(keys):
        for row in conn.execute(
            "SELECT entity, count(*) AS n, count(DISTINCT source) AS s, min(ts) AS a, max(ts) AS b"
            f" FROM mentions WHERE entity IN ({marks}) GROUP BY entity",
            part,
        ):
            counts[row["entity"]] = row
    out = []
    for key in keys:
        row = counts.get(key)
        path = topics.get(key)
        out.append(
            EntityInfo(
                key,
                entities.parse_key(key)[0],
                display_name(key),
                heats[key]
                if heats is not None and key in heats
                else heat.heat_of(conn, key, now, settings.heat),
                int(row["n"]) if row else 0,
                int(row["s"]) if row else 0,
                row["a"] if row else None,
                row["b"] if row else None,
                path,
                bool(path and f"/{ARCHIVE}/" in path),
            )
        )
    return out


def hot(conn: sqlite3.Connection, n: int, now: datetime, settings: TopicSettings) -> list[EntityInfo]:
    """The ``n`` hottest entities as of ``now`` (ties: more leaves first, then the key)."""
    heats = heat.current(conn, now, settings.heat)
    found = info(conn, list(heats), now, settings, heats)
    found.sort(key=lambda e: (-e.heat, -e.leaves, e.key))
    return [e for e in found if e.leaves][:n]


@dataclass(frozen=True)
class TopicView:
    entity: EntityInfo
    summary: str  # the topic's summary text ("" when no topic tree exists yet)
    facts: tuple[Leaf, ...]  # the most important leaves about it
    recent: tuple[Leaf, ...]  # the newest leaves about it, newest first

    def as_dict(self) -> dict[str, Any]:
        from vaultmem.leaffile import leaf_json

        return {
            "entity": self.entity.as_dict(),
            "summary": self.summary,
            "facts": [leaf_json(x) for x in self.facts],
            "recent": [leaf_json(x) for x in self.recent],
        }


def topic_view(
    conn: sqlite3.Connection, key: str, summary: str, now: datetime, settings: TopicSettings, n: int = 5
) -> TopicView:
    """Facts are ranked by the leaf's importance score, then recency; recent leaves by time."""
    facts = [
        r[0]
        for r in conn.execute(
            "SELECT c.id FROM mentions m JOIN chunks c ON c.id = m.leaf WHERE m.entity = ?"
            " AND c.status NOT IN ('dropped', 'pending_extraction')"
            " ORDER BY c.score DESC, coalesce(c.ts, '') DESC, c.id LIMIT ?",
            (key, n),
        )
    ]
    recent = [
        r[0]
        for r in conn.execute(
            "SELECT c.id FROM mentions m JOIN chunks c ON c.id = m.leaf WHERE m.entity = ?"
            " AND c.status <> 'pending_extraction' ORDER BY coalesce(c.ts, '') DESC, c.path DESC LIMIT ?",
            (key, n),
        )
    ]
    return TopicView(
        info(conn, [key], now, settings)[0],
        summary,
        tuple(index.leaves_by_ids(conn, facts)),
        tuple(index.leaves_by_ids(conn, recent)),
    )


def graph(
    conn: sqlite3.Connection,
    now: datetime,
    settings: TopicSettings,
    *,
    limit: int = 200,
    min_weight: int = 1,
    keys: list[str] | None = None,
) -> dict[str, Any]:
    """Entities (``keys``, or the ``limit`` most mentioned) and their co-occurrence edges: two entities
    mentioned in the same leaf, weighted by how many leaves, with the first and last time they were."""
    if keys is None:
        keys = [
            r[0]
            for r in conn.execute(
                "SELECT entity FROM mentions GROUP BY entity ORDER BY count(*) DESC, entity LIMIT ?", (limit,)
            )
        ]
    nodes = [e.as_dict() for e in info(conn, keys, now, settings)]
    if not keys:
        return {"nodes": [], "edges": []}
    marks = ",".join("?" * len(keys))
    edges = [
        {"source": r[0], "target": r[1], "weight": int(r[2]), "first_seen": r[3], "last_seen": r[4]}
        for r in conn.execute(
            "SELECT a.entity, b.entity, count(*), min(a.ts), max(a.ts) FROM mentions a"
            " JOIN mentions b ON a.leaf = b.leaf AND a.entity < b.entity"
            f" WHERE a.entity IN ({marks}) AND b.entity IN ({marks})"
            " GROUP BY a.entity, b.entity HAVING count(*) >= ? ORDER BY count(*) DESC, a.entity, b.entity",
            (*keys, *keys, min_weight),
        )
    ]
    return {"nodes": nodes, "edges": edges}


def summary_text(conn: sqlite3.Connection, path: str | None) -> str:
    if path is None:
        return ""
    row = conn.execute("SELECT text FROM chunks WHERE path = ?", (path,)).fetchone()
    return str(row[0]) if row else ""
