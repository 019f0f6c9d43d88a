"""Opening a vault's index: checked as far as is cheap, opened read-only when it cannot be written, and a
damaged one moved aside (under the write lock) with what no file holds read back from it, for the caller
to rebuild from the files. Never rebuilds or heals anything itself (``Vault.open`` does, with its lock)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from vaultmem import db
from vaultmem.errors import DiskFull, ReadOnlyVault
from vaultmem.layout import Layout
from vaultmem.lock import exclusive


@dataclass(frozen=True)
class Damaged:
    """A damaged index moved aside: why, where it went, and what could be read back from it."""

    why: str
    moved: Path
    salvage: db.Salvage


@dataclass(frozen=True)
class Opened:
    conn: sqlite3.Connection
    read_only: str | None = None  # why writes are off; None when they are on
    damaged: Damaged | None = None  # a new, empty index replaced a damaged one: rebuild it


def open_index(layout: Layout) -> Opened:
    """chunks.db of ``layout``: for writing; read-only (immutable on read-only media) when it cannot be
    written; or, when it is damaged, a new empty one after the damaged one was moved aside (under the
    write lock, and only if it is still damaged: another process may have just done it, or a writer was
    restarting the log while it was read)."""
    try:
        return Opened(checked(layout))
    except ReadOnlyVault as exc:
        # Reading needs no write: open the index read-only (immutable on read-only media).
        try:
            return Opened(db.connect(layout.db, readonly=True), read_only=str(exc))
        except (sqlite3.DatabaseError, ReadOnlyVault) as ro_exc:
            raise ReadOnlyVault(
                f"{layout.root} is read-only and its index cannot be read ({ro_exc}); open it once where"
                " it is writable (or copy it) to build chunks.db"
            ) from ro_exc
    except DiskFull as exc:
        raise DiskFull(
            f"{exc}: the index cannot be opened; nothing was changed; free space, then run the command again"
        ) from exc
    except sqlite3.DatabaseError as exc:
        if not db.is_damage(exc):
            raise
        with exclusive(layout):
            try:
                return Opened(checked(layout))
            except sqlite3.DatabaseError as again:
                if not db.is_damage(again):
                    raise
                damaged = set_aside(layout, str(again))
                return Opened(db.connect(layout.db), damaged=damaged)


def checked(layout: Layout) -> sqlite3.Connection:
    """chunks.db, checked as far as is cheap: its write-ahead log's headers, then the first row of every
    table. Raises ``sqlite3.DatabaseError`` (``db.is_damage``) when it is damaged."""
    why = db.wal_problem(layout.db)
    if why is not None:
        raise db.DamagedLog(why)
    conn = db.connect(layout.db)
    try:
        db.probe(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def set_aside(layout: Layout, why: str) -> Damaged:
    """Move a damaged chunks.db aside (the caller holds the write lock) and read back what no file holds."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        moved = db.set_aside(layout.db, stamp)
    except OSError as exc:
        raise ReadOnlyVault(
            f"chunks.db is damaged ({why}) and cannot be moved aside to rebuild it: {exc.strerror};"
            " make .vaultmem/ writable, then run `vaultmem reindex`"
        ) from exc
    return Damaged(why, moved, db.salvage(moved))
