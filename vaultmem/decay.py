"""Decay that is not deletion (issue #20, optional, off by default): what nobody asks about ranks lower.

Owns the ``recall`` table (the UTC day each leaf was last returned by a search or a context) and the
weight of a leaf: ``max(floor, 0.5 ** (days / half_life_days))``, with ``days`` counted from the later of
the day it was last asked about and its own day. Only leaves decay (summaries, topics and digests keep
their weight), nothing is removed, and the ranking is only re-ordered by the weighted score. With
``[decay] half_life_days = 0`` (the default) nothing here runs, and queries write nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from vaultmem.db import atomic
from vaultmem.model import parse_ts, utc
from vaultmem.search import Hit


def weights(
    conn: sqlite3.Connection, hits: Sequence[Hit], now: datetime, half_life_days: float, floor: float
) -> dict[str, float]:
    """Each leaf hit's weight in (floor, 1]; summaries are not listed (weight 1)."""
    ids = [h.id for h in hits if h.kind == "leaf"]
    if not ids or half_life_days <= 0:
        return {}
    marks = ",".join("?" * len(ids))
    asked = dict(conn.execute(f"SELECT id, day FROM recall WHERE id IN ({marks})", ids).fetchall())
    today = utc(now)
    out = {}
    for hit in hits:
        if hit.kind != "leaf":
            continue
        moments = [m for m in (parse_ts(asked.get(hit.id)), parse_ts(hit.ts)) if m is not None]
        if not moments:
            continue
        days = max(0.0, (today - max(moments)).total_seconds() / 86400)
        out[hit.id] = max(floor, 0.5 ** (days / half_life_days))
    return out


def reweigh(hits: Sequence[Hit], factor: dict[str, float]) -> list[Hit]:
    """``hits`` with their scores weighted and re-sorted (stable: ties keep their order)."""
    if not factor:
        return list(hits)
    weighed = [replace(h, score=h.score * factor.get(h.id, 1.0)) for h in hits]
    return sorted(weighed, key=lambda h: -h.score)


def noted(conn: sqlite3.Connection, hits: Sequence[Hit], now: datetime) -> None:
    """Record that these leaves were asked about today."""
    day = utc(now).strftime("%Y-%m-%dT00:00:00Z")
    rows = [(h.id, day) for h in hits if h.kind == "leaf"]
    if rows:
        with atomic(conn):
            conn.executemany(
                "INSERT INTO recall(id, day) VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET day = excluded.day",
                rows,
            )
