"""Entity hotness: how much an entity is on the agent's mind, growing with use and decaying by day.

Owns the formula and the ``entity_heat`` table. With ``d`` the whole UTC days since an entity's heat
was last recorded::

    heat_today = heat_then * 0.5 ** (d / half_life_days)
                 + mention_weight * (new leaves mentioning it)
                 + source_weight  * (sources it appears in for the first time)
                 + query_weight   * (queries that named it)

Heat is constant within a UTC day and halves every ``half_life_days`` without news. Events count on the
day the vault records them (a leaf when it is admitted, a query when it is asked), not on the day a
message was written: a backlog imported today is today's attention. ``entity_heat`` is therefore not
derived from the files and is kept by ``reindex``; when it is lost (a copied vault, a deleted index),
``seed`` rebuilds it from the mentions as it stood on the day of the vault's newest memory, each mention
counted on its message's own day: a copied vault keeps its hot topics, and its old history stays cold
relative to its own last activity. Takes an open connection; never touches files.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, date, datetime

from vaultmem import index
from vaultmem.db import atomic


@dataclass(frozen=True)
class HeatSettings:
    """The constants of the formula above (``[topics]`` in config.toml)."""

    half_life_days: float = 7.0
    mention_weight: float = 1.0
    source_weight: float = 2.0
    query_weight: float = 3.0
    create_at: float = 12.0  # a topic tree is made for an entity this hot ...
    min_leaves: int = 5  # ... that at least this many leaves mention
    archive_below: float = 1.0  # a topic tree colder than this is archived (kept, no longer routed)


def settings_from(values: Mapping[str, object]) -> HeatSettings:
    """``HeatSettings`` from the ``[topics]`` keys (``Config.topic_values()``); the other keys are ignored."""
    names = {f.name for f in fields(HeatSettings)}
    return HeatSettings(**{k: v for k, v in values.items() if k in names})  # type: ignore[arg-type]


def today(now: datetime) -> date:
    return now.astimezone(UTC).date()


def decayed(heat: float, since: date, until: date, half_life_days: float) -> float:
    days = max(0, (until - since).days)
    return heat * 0.5 ** (days / half_life_days) if days else heat


def record(
    conn: sqlite3.Connection,
    deltas: Mapping[str, float],
    now: datetime,
    settings: HeatSettings,
    *,
    queries: Iterable[str] = (),
) -> None:
    """Add ``deltas`` to the entities' heat as of ``now`` (decaying what was there first)."""
    day = today(now)
    asked = set(queries)
    if not deltas:
        return
    with atomic(conn):
        for entity, delta in deltas.items():
            row = conn.execute("SELECT heat, day FROM entity_heat WHERE entity = ?", (entity,)).fetchone()
            base = 0.0
            if row is not None:
                base = decayed(row["heat"], date.fromisoformat(row["day"]), day, settings.half_life_days)
            conn.execute(
                "INSERT INTO entity_heat(entity, heat, day, queries) VALUES (?, ?, ?, ?)"
                " ON CONFLICT(entity) DO UPDATE SET heat = excluded.heat, day = excluded.day,"
                " queries = queries + excluded.queries",
                (entity, base + delta, day.isoformat(), 1 if entity in asked else 0),
            )


def admitted(
    conn: sqlite3.Connection, leaf_ids: Sequence[str], now: datetime, settings: HeatSettings
) -> list[str]:
    """Record the mentions of newly admitted leaves. Returns the entities whose heat changed."""
    per_entity: dict[str, int] = defaultdict(int)
    per_source: dict[tuple[str, str], int] = defaultdict(int)  # (entity, source) -> leaves in this batch
    ids = list(dict.fromkeys(leaf_ids))
    for part, marks in index.in_batches(ids):
        for row in conn.execute(f"SELECT entity, source FROM mentions WHERE leaf IN ({marks})", part):
            per_entity[row["entity"]] += 1
            per_source[row["entity"], row["source"]] += 1
    fresh_sources: dict[str, int] = defaultdict(int)
    for (entity, source), count in per_source.items():
        total = conn.execute(
            "SELECT count(*) FROM mentions WHERE entity = ? AND source = ?", (entity, source)
        ).fetchone()[0]
        if total == count:  # every mention from this source is new: the entity reached a new source
            fresh_sources[entity] += 1
    deltas: dict[str, float] = {}
    for entity, count in per_entity.items():
        deltas[entity] = settings.mention_weight * count + settings.source_weight * fresh_sources[entity]
    record(conn, deltas, now, settings)
    return sorted(deltas)


def queried(
    conn: sqlite3.Connection, entities: Iterable[str], now: datetime, settings: HeatSettings
) -> list[str]:
    """Record a query that named ``entities`` (only entities the vault knows count)."""
    known = [
        e
        for e in dict.fromkeys(entities)
        if conn.execute("SELECT 1 FROM mentions WHERE entity = ? LIMIT 1", (e,)).fetchone()
    ]
    record(conn, {e: settings.query_weight for e in known}, now, settings, queries=known)
    return known


def current(conn: sqlite3.Connection, now: datetime, settings: HeatSettings) -> dict[str, float]:
    """Every recorded entity's heat as of ``now``."""
    day = today(now)
    return {
        row["entity"]: decayed(row["heat"], date.fromisoformat(row["day"]), day, settings.half_life_days)
        for row in conn.execute("SELECT entity, heat, day FROM entity_heat")
    }


def heat_of(conn: sqlite3.Connection, entity: str, now: datetime, settings: HeatSettings) -> float:
    row = conn.execute("SELECT heat, day FROM entity_heat WHERE entity = ?", (entity,)).fetchone()
    if row is None:
        return 0.0
    return decayed(row["heat"], date.fromisoformat(row["day"]), today(now), settings.half_life_days)


def seed(conn: sqlite3.Connection, now: datetime, settings: HeatSettings) -> int:
    """Give entities without a heat row one rebuilt from their mentions as of the vault's newest memory
    (each mention on its message's day; undated ones on that newest day). Returns how many were seeded."""
    day = today(now)
    newest = conn.execute("SELECT max(ts) FROM mentions").fetchone()[0]
    anchor = min(day, date.fromisoformat(newest[:10])) if newest else day
    missing: dict[str, list[tuple[str | None, str]]] = defaultdict(list)
    for row in conn.execute(
        "SELECT m.entity, m.ts, m.source FROM mentions m"
        " WHERE NOT EXISTS (SELECT 1 FROM entity_heat h WHERE h.entity = m.entity)"
    ):
        missing[row["entity"]].append((row["ts"], row["source"]))
    if not missing:
        return 0
    with atomic(conn):
        for entity, seen in missing.items():
            heat = 0.0
            sources: set[str] = set()
            for ts, source in sorted(seen, key=lambda s: s[0] or "9999"):
                when = date.fromisoformat(ts[:10]) if ts else anchor
                bonus = settings.source_weight if source not in sources else 0.0
                sources.add(source)
                heat += decayed(settings.mention_weight + bonus, when, anchor, settings.half_life_days)
            conn.execute(
                "INSERT OR IGNORE INTO entity_heat(entity, heat, day) VALUES (?, ?, ?)",
                (entity, heat, day.isoformat()),
            )
    return len(missing)


def utcnow() -> datetime:
    return datetime.now(UTC)
