"""Staleness: which summaries are out of date, and marking them so.

Owns the re-summarise result every tree kind returns (``Resummarised``), the fingerprint of a level's
children as the index has them (``current_fingerprint``, compared with a summary's ``children_hash``),
``mark_stale`` (the ``stale:`` line of each file and its row, one durable step, and their re-summarise
jobs; ``stale_writes`` plans the same for a caller's own step) and ``ancestors_of`` (a node's parents up to its root, from the index).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from vaultmem import frontmatter, fsio, index, steps, validity
from vaultmem.errors import ConflictError, FrontmatterError
from vaultmem.layout import SUMMARY_NAME, Layout
from vaultmem.steps import FileWrite, TreeOp
from vaultmem.summaryfile import (
    SummaryNode,
    children_fingerprint,
    parse_summary,
    render_summary,
    set_stale_line,
)


@dataclass(frozen=True)
class Resummarised:
    outcome: str  # "done" | "defer" | "gone" (its row went) | "missing" (row without a file)
    message: str = ""
    notes: tuple[str, ...] = ()


def children_of(conn: sqlite3.Connection, directory: str) -> tuple[list[sqlite3.Row], list[sqlite3.Row]]:
    """(leaf rows directly in ``directory``, summary rows of the levels directly under it)."""
    prefix = directory + "/"
    leaves = []
    subs = []
    for row in conn.execute(
        "SELECT * FROM chunks WHERE path >= ? AND path < ? ORDER BY coalesce(ts, ''), path",
        index.prefix_range(prefix),
    ):
        rest = row["path"][len(prefix) :]
        if row["kind"] == "leaf" and "/" not in rest:
            leaves.append(row)
        elif row["kind"] == "summary" and rest.count("/") == 1:
            subs.append(row)
    leaves += index.in_place_sections(conn, f"{directory}/{SUMMARY_NAME}")
    return leaves, subs


def fingerprint_rows(rows: Iterable[sqlite3.Row]) -> str:
    return children_fingerprint(
        (str(r["id"]), validity.fingerprint_part(str(r["content_hash"]), _superseded_by(r))) for r in rows
    )


def _superseded_by(row: sqlite3.Row) -> str | None:
    try:
        return str(row["superseded_by"])
    except IndexError:  # a summary's row, or a read-only index made before validity had columns
        return None


def current_fingerprint(conn: sqlite3.Connection, directory: str) -> str:
    """The ``children_fingerprint`` of a level's children as the index has them now."""
    leaves, subs = children_of(conn, directory)
    return fingerprint_rows([*leaves, *subs])


def mark_stale(
    conn: sqlite3.Connection,
    layout: Layout,
    ids: Sequence[str],
    max_bytes: int,
    *,
    unless_current: bool = False,
) -> list[str]:
    """Flag summaries stale in their files and rows and queue their re-summarisation. With
    ``unless_current`` (catching up with edits made outside the engine), a summary whose recorded
    ``children_hash`` still matches its children is left alone (a revert restored both), unless a level
    below it is marked here: its text is about to change, so this one will be out of date too.

    Each file is read, only its ``stale:`` line changes, and it is written back guarded by the hash
    that was read (one durable step for all of them). Returns the ids marked."""
    writes, queued, source = stale_writes(conn, layout, ids, max_bytes, unless_current=unless_current)
    if not queued:
        return []
    op = TreeOp(
        "stale", source, f"memory: mark {len(queued)} summaries stale", tuple(writes), (), tuple(queued)
    )
    try:
        steps.apply(conn, layout, op, "", 0)
    except ConflictError:
        return []  # a person is editing one of them; the next catch-up sees it and tries again
    return [node_id for node_id, _ in queued]


def stale_writes(
    conn: sqlite3.Connection,
    layout: Layout,
    ids: Sequence[str],
    max_bytes: int,
    *,
    unless_current: bool = False,
) -> tuple[list[FileWrite], list[tuple[str, int]], str]:
    """What ``mark_stale`` does, planned and not applied: the summary files' new bytes (guarded by the
    hash read), the (id, depth) to re-summarise, and a source named by one of them ("" when none), for a
    caller that makes the marking part of its own durable step."""
    found: dict[str, tuple[bytes, SummaryNode, frontmatter.MdDoc, str | None]] = {}
    for node_id in dict.fromkeys(ids):
        row = conn.execute(
            "SELECT path, parent FROM chunks WHERE id = ? AND kind = 'summary'", (node_id,)
        ).fetchone()
        if row is None:
            continue
        try:
            data = layout.abs(row["path"]).read_bytes()
            node, doc = parse_summary(data.decode("utf-8-sig"), row["path"])
        except (FileNotFoundError, FrontmatterError, UnicodeDecodeError):
            continue
        found[node_id] = (data, node, doc, row["parent"])
    current = {
        node_id
        for node_id, (_data, node, _doc, _parent) in found.items()
        if unless_current
        and not node.stale
        and node.children_hash
        and node.children_hash == current_fingerprint(conn, node.directory)
    }
    changed = True
    while changed:  # a level marked below a current one makes it stale after all
        changed = False
        for node_id, (_data, _node, _doc, parent) in found.items():
            if node_id not in current and parent in current:
                current.discard(parent)
                changed = True
    writes: list[FileWrite] = []
    queued: list[tuple[str, int]] = []
    source = ""
    for node_id, (data, node, doc, _parent) in found.items():
        if node_id in current:
            continue
        new = set_stale_line(data, True)
        if new is None:
            new = render_summary(replace(node, stale=True), keep=doc).encode("utf-8")
        if new != data:
            writes.append(FileWrite(node.path, new.decode("utf-8"), fsio.sha256_bytes(data)))
        queued.append((node_id, node.depth))
        source = source or node.source
    return writes, queued, source


def ancestors_of(conn: sqlite3.Connection, node_id: str) -> list[str]:
    out: list[str] = []
    row = conn.execute("SELECT parent FROM chunks WHERE id = ?", (node_id,)).fetchone()
    while row is not None and row["parent"] is not None and row["parent"] not in out:
        out.append(row["parent"])
        row = conn.execute("SELECT parent FROM chunks WHERE id = ?", (row["parent"],)).fetchone()
    return out
