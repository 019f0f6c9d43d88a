"""Validity of a memory (issue #20): when a fact holds, and which version of it replaces which.

Owns the four frontmatter keys ``valid_from``, ``valid_to``, ``supersedes`` and ``superseded_by``:
reading them from a leaf's mapping (a person may write them by hand) and their values in the index's
columns. ``valid_to`` is exclusive: the first moment the fact no longer holds. Pure: no I/O.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from vaultmem.errors import FrontmatterError
from vaultmem.model import LEAF_ID_RE, Leaf, format_ts, parse_ts

VALID_FROM = "valid_from"
VALID_TO = "valid_to"
SUPERSEDES = "supersedes"  # the new leaf names the leaves it replaces ...
SUPERSEDED_BY = "superseded_by"  # ... and an old one names its successors
INGESTED = "ingested"  # when the vault learned it (written by the engine on new leaves): what ``as_of`` reads
KEYS = (VALID_FROM, VALID_TO, SUPERSEDES, SUPERSEDED_BY)


@dataclass(frozen=True)
class Validity:
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    supersedes: tuple[str, ...] = ()
    superseded_by: tuple[str, ...] = ()
    ingested: datetime | None = None

    def fields(self) -> dict[str, Any]:
        """As the keyword arguments of ``Leaf``."""
        return {
            VALID_FROM: self.valid_from,
            VALID_TO: self.valid_to,
            SUPERSEDES: self.supersedes,
            SUPERSEDED_BY: self.superseded_by,
            INGESTED: self.ingested,
        }


def _moment(value: Any, key: str, where: str) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, date) and not isinstance(value, datetime):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    moment = None if isinstance(value, bool) else parse_ts(value)
    if moment is None:
        raise FrontmatterError(f"{where}: '{key}' {str(value)[:40]!r} is not a date such as 2026-04-03")
    return moment


def _ids(value: Any, key: str, where: str) -> tuple[str, ...]:
    if value is None or value == "":
        return ()
    items = value if isinstance(value, list) else [value]
    out: dict[str, None] = {}
    for item in items:
        text = str(item).strip()
        if not LEAF_ID_RE.match(text):
            raise FrontmatterError(f"{where}: '{key}' {text[:40]!r} is not a leaf id (16 hex characters)")
        out.setdefault(text, None)
    return tuple(out)


def parse(meta: Mapping[str, Any], where: str = "file") -> Validity:
    """The validity keys of a frontmatter mapping; ``FrontmatterError`` for a value that is not a date
    or a leaf id (the file is then reported by ``check`` and skipped, like any invalid frontmatter)."""
    valid_from = _moment(meta.get(VALID_FROM), VALID_FROM, where)
    valid_to = _moment(meta.get(VALID_TO), VALID_TO, where)
    if valid_from is not None and valid_to is not None and valid_to <= valid_from:
        raise FrontmatterError(f"{where}: 'valid_to' must come after 'valid_from'")
    return Validity(
        valid_from,
        valid_to,
        _ids(meta.get(SUPERSEDES), SUPERSEDES, where),
        _ids(meta.get(SUPERSEDED_BY), SUPERSEDED_BY, where),
        _moment(meta.get(INGESTED), INGESTED, where),
    )


def of(leaf: Leaf) -> Validity:
    return Validity(leaf.valid_from, leaf.valid_to, leaf.supersedes, leaf.superseded_by, leaf.ingested)


def row_values(v: Validity) -> tuple[str | None, str | None, str, str, str | None]:
    """The five index columns of a leaf's validity (and when the vault learned it)."""
    return (
        format_ts(v.valid_from),
        format_ts(v.valid_to),
        json.dumps(list(v.supersedes)),
        json.dumps(list(v.superseded_by)),
        format_ts(v.ingested),
    )


def from_row(row: sqlite3.Row) -> Validity:
    try:
        return Validity(
            parse_ts(row["valid_from"]),
            parse_ts(row["valid_to"]),
            tuple(json.loads(row["supersedes"] or "[]")),
            tuple(json.loads(row["superseded_by"] or "[]")),
            parse_ts(row["ingested"]),
        )
    except IndexError:  # a read-only connection to an index made before validity had columns
        return Validity()


SUPERSEDED_MARK = "[superseded]"  # what a summary, topic or digest says of an old value ...
CURRENT_MARK = "[current]"  # ... and of the value that replaced it (as a context block does)


def listed(value: str | Sequence[str] | None) -> bool:
    if value is None:
        return False
    if isinstance(value, str):
        return value not in ("", "[]")
    return bool(value)


def marked(
    text: str, supersedes: str | Sequence[str] | None, superseded_by: str | Sequence[str] | None
) -> str:
    """A leaf's text as a summary reads it: an old value marked ``[superseded]``, the value that
    replaced one ``[current]`` (``supersedes`` / ``superseded_by`` as index columns or tuples)."""
    if listed(superseded_by):
        return f"{SUPERSEDED_MARK} {text}"
    if listed(supersedes):
        return f"{CURRENT_MARK} {text}"
    return text


SUPERSEDED_WEIGHT = 0.5  # an old value weighs less when a summary chooses its sentences


def fingerprint_part(content_hash: str, superseded_by: str | Sequence[str] | None) -> str:
    """What a leaf adds to its level's ``children_hash``: its text's hash, and whether it has been
    replaced (so linking two versions makes the summaries over them out of date)."""
    return f"{content_hash}~superseded" if listed(superseded_by) else content_hash
