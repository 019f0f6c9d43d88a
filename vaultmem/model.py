"""Plain values that flow through the pipeline: canonical messages, leaves, hits.

Bottom of the import graph: this module imports nothing from vaultmem except ``errors``. Frozen
dataclasses only; validation of outside input happens in the adapters and the file readers.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Any

from vaultmem.errors import FrontmatterError, InvalidInput, UnsafePath

LEAF_ID_RE = re.compile(r"^[0-9a-f]{16}$")
SUMMARY_ID_RE = re.compile(r"^s[0-9a-f]{15}$")
# Source and session names become directory names, so they are kept to a safe, portable alphabet.
SAFE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
# Names Windows keeps for devices, in any case and with any extension ("CON", "nul.txt", "Com1").
_RESERVED_RE = re.compile(r"^(?:con|prn|aux|nul|com[0-9]|lpt[0-9])(?:\..*)?$", re.I)
# A reading position: a plain decimal number (no NaN, no infinity, no "1_000"), bounded so that exact
# arithmetic on it stays cheap. 200 inserts into one gap need about 140 digits.
ORDER_RE = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?$")
ORDER_MAX_CHARS = 4096


class Status(StrEnum):
    """Leaf lifecycle: pending_extraction -> admitted -> sealed, or dropped.

    A leaf file records ``pending_extraction``, ``admitted`` or ``dropped``; ``sealed`` is where an
    admitted leaf lives (a sealed level, not ``_fresh/``), so sealing moves a file without rewriting it.
    """

    PENDING = "pending_extraction"
    ADMITTED = "admitted"
    SEALED = "sealed"
    DROPPED = "dropped"


class InputKind(StrEnum):
    CHAT = "chat"
    EMAIL = "email"
    DOC = "doc"


def safe_name(name: str, what: str = "source name") -> str:
    """Return ``name`` if it can be a single path component inside the vault, else raise UnsafePath."""
    if not isinstance(name, str) or not SAFE_NAME_RE.match(name) or name in {".", ".."} or ".." in name:
        raise UnsafePath(
            f"invalid {what} {name!r}: use letters, digits, '.', '_' or '-' (no '/', no '..', at most 80 chars)"
        )
    return name


def portable_name(name: str, what: str = "source name") -> str:
    """``safe_name``, and a folder name that every file system takes as it is: not a Windows device
    name (CON, PRN, AUX, NUL, COM1-9, LPT1-9, with or without an extension) and not ending in a dot
    (Windows drops it). New source names are checked; folders that exist are read as they are."""
    safe_name(name, what)
    if _RESERVED_RE.match(name):
        raise InvalidInput(f"invalid {what} {name!r}: Windows reserves it for a device; choose another name")
    if name.endswith("."):
        raise InvalidInput(f"invalid {what} {name!r}: a name may not end in '.' (Windows drops it)")
    return name


def slugify_name(text: str, fallback: str = "source") -> str:
    """Turn free text (a file stem, a channel title) into a safe source name."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", text.strip()).strip("-._")[:80].lower()
    return slug or fallback


def default_source_name(text: str, fallback: str = "source") -> str:
    """The source name made from a file or folder name when none is given: its slug (lower case, no
    ``..``), with ``-<fallback>`` after a Windows device name (``aux/`` -> ``aux-notes``, ``con.d`` ->
    ``con-notes.d``)."""
    slug = re.sub(r"\.{2,}", ".", slugify_name(text, fallback))
    if _RESERVED_RE.match(slug):
        base, dot, rest = slug.partition(".")
        slug = f"{base}-{fallback}{dot}{rest}"[:80].rstrip("-._")
    return portable_name(slug)


def check_node_id(node_id: str) -> str:
    """Validate an id that arrives from outside (CLI, API, frontmatter); ids never carry path syntax."""
    if not isinstance(node_id, str) or not (LEAF_ID_RE.match(node_id) or SUMMARY_ID_RE.match(node_id)):
        raise UnsafePath(f"invalid node id {node_id!r}: expected 16 lowercase hex characters")
    return node_id


def parse_order(value: Any, where: str = "file") -> str | None:
    """Validate a node's ``order`` (a decimal number, ideally written as a quoted string) and return it
    as text; None when absent. Raises FrontmatterError for anything else (a bool, a date, ``NaN``)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise FrontmatterError(f"{where}: 'order' must be a decimal number such as \"3.2\"")
    text = str(value).strip()
    if len(text) > ORDER_MAX_CHARS or not ORDER_RE.match(text):
        raise FrontmatterError(f"{where}: 'order' {text[:40]!r} is not a decimal number such as \"3.2\"")
    try:
        Decimal(text)
    except InvalidOperation as exc:  # pragma: no cover - the pattern only admits decimals
        raise FrontmatterError(f"{where}: 'order' {text[:40]!r} is not a decimal number") from exc
    return text


def utc(dt: datetime) -> datetime:
    """Normalise a datetime to aware UTC (naive values are taken as UTC)."""
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def format_ts(dt: datetime | None) -> str | None:
    """``2024-05-01T09:30:00Z``. Remembered per value: a leaf's time is written into its file name, its
    frontmatter and its row, and a batch shares one ``ingested``."""
    if dt is None:
        return None
    return _format_ts(dt)


@functools.lru_cache(maxsize=16384)  # a batch renders all its leaves, then makes all their rows
def _format_ts(dt: datetime) -> str:
    # Equal datetimes are the same instant (aware) or the same wall time (naive, taken as UTC): one text.
    return utc(dt).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_ts(value: Any) -> datetime | None:
    """Parse an ISO 8601 string, a datetime or epoch seconds into aware UTC; None stays None."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return utc(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        # Epoch seconds, or milliseconds when the number is too large to be seconds.
        seconds = value / 1000 if value > 1e11 else value
        return datetime.fromtimestamp(seconds, tz=UTC)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        try:
            return utc(datetime.fromisoformat(text))
        except ValueError:
            return None
    return None


@dataclass(frozen=True)
class Message:
    """One canonical unit of input: a chat turn, an email, or a section of a document.

    ``text`` is normalised Markdown. ``source_id`` is the id the source gave it (chat message id,
    email Message-ID, ``path#heading``); ``meta`` carries further provenance (subject, from, to,
    heading path, file) as plain strings.
    """

    source: str
    text: str
    kind: InputKind = InputKind.CHAT
    source_id: str | None = None
    session: str | None = None
    role: str | None = None
    speaker: str | None = None
    ts: datetime | None = None
    meta: dict[str, str] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Leaf:
    """A verbatim chunk as stored in a leaf file and its index row."""

    id: str
    source: str
    text: str
    path: str  # posix path relative to the vault root
    kind: InputKind = InputKind.CHAT
    seq: int = 0
    source_id: str | None = None
    session: str | None = None
    role: str | None = None
    speaker: str | None = None
    ts: datetime | None = None
    message_ids: tuple[str, ...] = ()
    status: Status = Status.PENDING
    score: float = 0.0
    reasons: tuple[str, ...] = ()
    tokens: int = 0
    content_hash: str = ""
    redactions: tuple[str, ...] = ()
    order: str | None = None  # reading position among its siblings (a decimal number), when set
    entities: tuple[str, ...] = ()  # canonical entity keys ("person:caroline"), found during extract
    meta: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    # Validity (issue #20): when the fact holds, and the versions it replaces / that replace it.
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    supersedes: tuple[str, ...] = ()
    superseded_by: tuple[str, ...] = ()
    ingested: datetime | None = None  # when the vault learned it (``as_of`` reads it); None: unknown

    @property
    def provenance(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "session": self.session,
            "source_id": self.source_id,
            "message_ids": list(self.message_ids),
            "role": self.role,
            "speaker": self.speaker,
            "ts": format_ts(self.ts),
            "path": self.path,
            **self.meta,
        }
