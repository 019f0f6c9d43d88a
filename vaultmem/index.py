"""Rows of ``chunks``: writing a leaf's row and reading it back as a ``Leaf``.

Owns the column mapping between the ``Leaf`` value and the ``chunks`` table, so ingest, reindex and
check all agree on what a row holds. Takes an open connection; never opens files.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from vaultmem import validity
from vaultmem.db import BULK_MIN_ROWS, bulk_insert
from vaultmem.errors import InvalidInput, NodeNotFound
from vaultmem.inputs.mailthread import KnownEmail
from vaultmem.layout import SUMMARY_NAME, in_sealed_level, note_of, section_range
from vaultmem.model import InputKind, Leaf, Status, check_node_id, format_ts, parse_ts
from vaultmem.summaryfile import SummaryNode, text_hash

# Columns that describe a leaf; ``reindex`` equality is checked over exactly these.
ROW_COLUMNS = (
    "id",
    "kind",
    "path",
    "source",
    "input",
    "session",
    "source_id",
    "message_ids",
    "seq",
    "role",
    "speaker",
    "ts",
    "ts_end",
    "status",
    "score",
    "reasons",
    "tokens",
    "content_hash",
    "redactions",
    "provenance",
    "text",
    "parent",
    "depth",
    "file_hash",
    "file_size",
    "file_mtime_ns",
    "ord",
    "entities",
    "valid_from",
    "valid_to",
    "supersedes",
    "superseded_by",
    "ingested",
)


@dataclass(frozen=True)
class FileStamp:
    """What the index remembers of a file to notice later changes cheaply."""

    hash: str
    size: int
    mtime_ns: int


def effective_status(leaf: Leaf) -> Status:
    """The status the index reports: an admitted leaf inside a sealed level (or a section of a note,
    under its document node) is ``sealed``."""
    if leaf.status is Status.ADMITTED and (in_sealed_level(leaf.path) or note_of(leaf.path) is not None):
        return Status.SEALED
    return leaf.status


def _json_list(values: Sequence[str]) -> str:
    """``json.dumps(list(values), ensure_ascii=False)``; most of a leaf's lists are empty."""
    return json.dumps(list(values), ensure_ascii=False) if values else "[]"


def leaf_row(leaf: Leaf, stamp: FileStamp, parent: str | None = None) -> tuple[Any, ...]:
    """The row of a leaf; ``parent`` is the id of the ``_summary.md`` in the leaf's directory, if any."""
    ts = format_ts(leaf.ts)
    return (
        leaf.id,
        "leaf",
        leaf.path,
        leaf.source,
        leaf.kind.value,
        leaf.session,
        leaf.source_id,
        _json_list(leaf.message_ids),
        leaf.seq,
        leaf.role,
        leaf.speaker,
        ts,
        ts,
        effective_status(leaf).value,
        leaf.score,
        json.dumps(list(leaf.reasons)) if leaf.reasons else "[]",
        leaf.tokens,
        leaf.content_hash,
        json.dumps(list(leaf.redactions)) if leaf.redactions else "[]",
        json.dumps(leaf.meta, ensure_ascii=False, sort_keys=True) if leaf.meta else "{}",
        leaf.text,
        parent,
        0,
        stamp.hash,
        stamp.size,
        stamp.mtime_ns,
        leaf.order,
        _json_list(leaf.entities),
        *validity.row_values(validity.of(leaf)),
    )


def summary_row(node: SummaryNode, stamp: FileStamp, parent: str | None = None) -> tuple[Any, ...]:
    """The row of a summary: ``ts``/``ts_end`` span its leaves, ``status`` is ``stale`` or ``current``."""
    provenance = {
        "title": node.title,
        "descendants": node.descendants,
        "summariser": node.summariser,
        "pinned": bool(node.pinned),
        "hand_edited": node.hand_edited,
    }
    if node.entity:
        provenance["entity"] = node.entity
        provenance["archived"] = node.archived
    if node.period:
        provenance["period"] = node.period
    if node.document:
        provenance["document"] = node.document
    if node.note:
        provenance["note"] = node.note
    return (
        node.id,
        "summary",
        node.path,
        node.source,
        None,
        None,
        None,
        "[]",
        0,
        None,
        None,
        format_ts(node.earliest),
        format_ts(node.latest),
        "stale" if node.stale else "current",
        0.0,
        "[]",
        node.tokens,
        text_hash(node.searchable),
        "[]",
        json.dumps(provenance, ensure_ascii=False, sort_keys=True),
        node.searchable,
        parent,
        node.depth,
        stamp.hash,
        stamp.size,
        stamp.mtime_ns,
        node.order,
        "[]",
        *validity.row_values(validity.Validity()),
    )


_INSERT = f"INSERT INTO chunks({', '.join(ROW_COLUMNS)}) VALUES ({', '.join('?' * len(ROW_COLUMNS))})"
_UPSERT = (
    _INSERT
    + " ON CONFLICT(id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in ROW_COLUMNS if c != "id")
)


def insert_rows(conn: sqlite3.Connection, rows: Iterable[tuple[Any, ...]]) -> None:
    """Insert new rows; a batch of ``BULK_MIN_ROWS`` or more inside a transaction fills the FTS tables,
    the mentions and the ``chunks_gen`` counter once for all of them (``db.bulk_insert``)."""
    rows = list(rows)
    if len(rows) < BULK_MIN_ROWS:
        conn.executemany(_INSERT, rows)
        return
    bulk_insert(conn, lambda: conn.executemany(_INSERT, rows))


def upsert_rows(conn: sqlite3.Connection, rows: Iterable[tuple[Any, ...]]) -> None:
    conn.executemany(_UPSERT, rows)


def in_batches(ids: Sequence[str], size: int = 500) -> Iterator[tuple[list[str], str]]:
    """Split ids for ``IN (...)`` queries under SQLite's variable limit: (ids, placeholders) pairs."""
    for start in range(0, len(ids), size):
        part = list(ids[start : start + size])
        yield part, ",".join("?" * len(part))


def prefix_range(prefix: str) -> tuple[str, str]:
    """Bounds ``lo <= path < hi`` selecting the paths that start with ``prefix`` (ending in ``/``), so a
    query uses the unique index on ``path`` instead of scanning every row."""
    if not prefix.endswith("/"):
        raise ValueError("a directory prefix ends with '/'")
    return prefix, prefix[:-1] + chr(ord("/") + 1)


def existing_ids(conn: sqlite3.Connection, ids: Sequence[str]) -> set[str]:
    found: set[str] = set()
    for part, marks in in_batches(ids):
        found.update(r[0] for r in conn.execute(f"SELECT id FROM chunks WHERE id IN ({marks})", part))
    return found


def leaves_by_ids(conn: sqlite3.Connection, ids: Sequence[str]) -> list[Leaf]:
    """The leaves among ``ids``, in the given order (unknown ids are left out)."""
    return [row_to_leaf(row) for row in rows_by_ids(conn, ids, kind="leaf")]


def rows_by_ids(
    conn: sqlite3.Connection, ids: Sequence[str], *, kind: str | None = None
) -> list[sqlite3.Row]:
    """The rows of ``ids`` (of ``kind`` only, when given), in the given order; unknown ids left out."""
    rows: dict[str, sqlite3.Row] = {}
    only = "" if kind is None else " AND kind = ?"
    for part, marks in in_batches(ids):
        params = [*part] if kind is None else [*part, kind]
        for row in conn.execute(f"SELECT * FROM chunks WHERE id IN ({marks}){only}", params):
            rows[row["id"]] = row
    return [rows[i] for i in dict.fromkeys(ids) if i in rows]


def row_to_leaf(row: sqlite3.Row) -> Leaf:
    return Leaf(
        id=row["id"],
        source=row["source"],
        text=row["text"],
        path=row["path"],
        kind=InputKind(row["input"] or "chat"),
        seq=row["seq"],
        source_id=row["source_id"],
        session=row["session"],
        role=row["role"],
        speaker=row["speaker"],
        ts=parse_ts(row["ts"]),
        message_ids=tuple(json.loads(row["message_ids"])),
        status=Status(row["status"]),
        score=row["score"],
        reasons=tuple(json.loads(row["reasons"])),
        tokens=row["tokens"],
        content_hash=row["content_hash"],
        redactions=tuple(json.loads(row["redactions"])),
        order=_ord(row),
        entities=_entities(row),
        meta=json.loads(row["provenance"]),
        **validity.from_row(row).fields(),
    )


def _ord(row: sqlite3.Row) -> str | None:
    try:
        value: str | None = row["ord"]
    except IndexError:  # a read-only connection to an index that predates migration 010
        return None
    return value


def _entities(row: sqlite3.Row) -> tuple[str, ...]:
    try:
        value = row["entities"]
    except IndexError:  # a read-only connection to an index that predates migration 011
        return ()
    return tuple(json.loads(value)) if value else ()


def get_leaf(conn: sqlite3.Connection, node_id: str) -> Leaf:
    check_node_id(node_id)
    row = conn.execute("SELECT * FROM chunks WHERE id = ? AND kind = 'leaf'", (node_id,)).fetchone()
    if row is None:
        raise NodeNotFound(f"no leaf with id {node_id}; `vaultmem ls` lists what the vault holds")
    return row_to_leaf(row)


def all_rows(conn: sqlite3.Connection) -> dict[str, dict[str, Any]]:
    """Every row keyed by id, over ROW_COLUMNS only (for equality checks)."""
    cols = ", ".join(ROW_COLUMNS)
    return {row["id"]: dict(row) for row in conn.execute(f"SELECT {cols} FROM chunks")}


def known_emails(conn: sqlite3.Connection, source: str) -> list[KnownEmail]:
    """The emails indexed for a source (one per message: its first chunk), for threading new ones."""
    rows = conn.execute(
        "SELECT source_id, session, json_extract(provenance, '$.subject') AS subject, ts FROM chunks "
        "WHERE source = ? AND kind = 'leaf' AND input = ? AND seq = 0 AND source_id IS NOT NULL "
        "AND session IS NOT NULL",
        (source, InputKind.EMAIL.value),
    )
    return [
        KnownEmail(row["source_id"], row["session"], str(row["subject"] or ""), parse_ts(row["ts"]))
        for row in rows
    ]


def leaves_per_day(
    conn: sqlite3.Connection, first: str, last: str, source: str | None = None
) -> dict[str, int]:
    """UTC day (``YYYY-MM-DD``) -> leaves of that day, for days ``first`` to ``last`` inclusive (ISO
    dates); days without a leaf are left out. A leaf's day is that of its time, or for a leaf without
    one (a document section that names no date) that of its file's mtime, as the daily digest counts
    it. One range over the ``(kind, ts)`` index, and one lookup of its undated leaves."""
    sql = "SELECT substr(ts, 1, 10) AS day, count(*) FROM chunks WHERE kind = 'leaf' AND ts >= ? AND ts < ?"
    params: list[Any] = [first, last + "\uffff"]
    undated = "SELECT file_mtime_ns FROM chunks WHERE kind = 'leaf' AND ts IS NULL"
    if source is not None:
        sql += " AND source = ?"
        undated += " AND source = ?"
        params.append(source)
    days: Counter[str] = Counter(dict(conn.execute(sql + " GROUP BY day", params)))
    for (mtime_ns,) in conn.execute(undated, params[2:]):
        day = datetime.fromtimestamp((mtime_ns or 0) / 1e9, UTC).date().isoformat()
        if first <= day <= last:
            days[day] += 1
    return dict(sorted(days.items()))


def leaves_per_source(conn: sqlite3.Connection) -> dict[str, int]:
    """Source -> its leaves (every source with one)."""
    return dict(
        conn.execute(
            "SELECT source, count(*) FROM chunks WHERE kind = 'leaf' GROUP BY source ORDER BY source"
        )
    )


# -- which rows have files of their own -------------------------------------------------------------------
# The one place that says it. A section of a note written by hand is indexed where it is: its row's path
# is ``<note>#<leaf id>`` (``layout.section_path``) and names no file. Its text lives in the person's note,
# compared whole (``Vault.documents_out_of_step``); the engine never stats, reads, writes, moves or removes
# it as a file, and never links it as a version (that would write into the note). Every module that
# stats or reads a row's file asks ``has_file`` (per row) or filters with ``WITH_FILE`` (in SQL).
WITH_FILE = "path NOT GLOB '*.md#" + "[0-9a-f]" * 16 + "'"


def has_file(path: str) -> bool:
    """Whether the index row whose path is ``path`` has a file of its own (False for a note's section)."""
    return note_of(path) is None


def file_of(path: str) -> str:
    """The file that holds the text of the row whose path is ``path``: its own, or a section's note."""
    return note_of(path) or path


def refuse_note_sections(
    conn: sqlite3.Connection, ids: Sequence[str], what: str, *, node: bool = True
) -> None:
    """InvalidInput for a section of a note written by hand (``<note>#<id>``, indexed where it is) or,
    with ``node``, that note's document node while it has sections: the text is the person's note,
    which the engine never rewrites; they edit or delete the note itself, and the index follows. Without
    ``node`` the document node passes (its ``_summary.md`` is the engine's: its text and keys may be
    edited; ``note_node`` says which operations on it are refused)."""
    for node_id in ids:
        row = conn.execute(
            "SELECT path, json_extract(provenance, '$.note') AS note FROM chunks WHERE id = ?", (node_id,)
        ).fetchone()
        if row is None:
            continue
        section = not has_file(row["path"])
        note = note_of(row["path"]) if section else note_node(conn, node_id) if node else None
        if note is None:
            continue
        raise InvalidInput(
            f"{node_id} is {'a section' if section else 'the document'} of the note {note},"
            f" written by hand and indexed where it is: it cannot be {what}; edit or delete the note"
            " itself and the index follows (vaultmem never rewrites a person's note)"
        )


def note_node(conn: sqlite3.Connection, node_id: str) -> str | None:
    """The note whose document node ``node_id`` is, while it has sections (None for any other node)."""
    row = conn.execute(
        "SELECT path, json_extract(provenance, '$.note') AS note FROM chunks WHERE id = ? AND kind = 'summary'",
        (node_id,),
    ).fetchone()
    if row is None or not row["note"] or not str(row["path"]).endswith(SUMMARY_NAME):
        return None
    return str(row["note"]) if _has_sections(conn, str(row["note"])) else None


def _has_sections(conn: sqlite3.Connection, note: str) -> bool:
    return (
        conn.execute("SELECT 1 FROM chunks WHERE path >= ? AND path < ?", section_range(note)).fetchone()
        is not None
    )


def in_place_sections(conn: sqlite3.Connection, summary_path: str) -> list[sqlite3.Row]:
    """The section rows of the note whose document node is ``summary_path`` (none for another level):
    a note written by hand is indexed where it is, so its sections are not files in the node's folder."""
    node = conn.execute(
        "SELECT json_extract(provenance, '$.note') FROM chunks WHERE path = ? AND kind = 'summary'",
        (summary_path,),
    ).fetchone()
    if node is None or not node[0]:
        return []
    return list(
        conn.execute(
            "SELECT * FROM chunks WHERE path >= ? AND path < ? AND kind = 'leaf' ORDER BY coalesce(ts, ''), path",
            section_range(str(node[0])),
        )
    )
